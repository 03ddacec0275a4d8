"""The `kanal` command: one entry point that dispatches to the part of kanal that owns each subcommand.

Server subcommands (`controller`, `broker`, `dev`, `demo`) live with their servers; client subcommands
live in kanal.clients and never import server code. Each owner module exposes `main(argv) -> int`.
Imports happen only for the chosen subcommand, so `kanal produce` never loads pysyncobj or Spark.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback

import kanal
from kanal.commands.report import (
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    report_error,
    set_json_errors,
    wants_json,
)
from kanal.deploy.subcommands import SUBCOMMANDS
from kanal.v1.error import ErrorCode, KanalError


def usage() -> str:
    width = max(len(name) for name in SUBCOMMANDS)
    lines = ["usage: kanal <command> [options]", "", "commands:"]
    lines += [f"  {name:<{width}}  {help_text}" for name, (_, help_text) in sorted(SUBCOMMANDS.items())]
    lines += [
        "",
        "options:",
        "  --version      print kanal's version",
        "  --output json  (every command) data as JSON on stdout, an error as one JSON object on stderr",
        "",
        "environment: KANAL_BOOTSTRAP (HOST:PORT[,...] of brokers when --bootstrap is not given),",
        "  KANAL_HOME (where `kanal dev` writes dev.json, which the other commands read; default ~/.kanal),",
        "  KANAL_DEBUG=1 (print the traceback of an internal error).",
        "exit status: 0 done, 1 failed (the message names an error code), 2 bad arguments, 70 internal",
        "  error (a bug), 130 interrupted; 3 from `dev status` and `chaos run`. docs/cli.md has the",
        "  commands, their exit statuses, their Kafka equivalents and examples.",
        "",
        "Run `kanal <command> --help` for a command's options; `kanal completion bash|zsh|tcsh` prints a",
        "shell completion script.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Runs one command and turns whatever ends it into a documented exit status and at most one error
    line (kanal.commands.report): never a traceback, unless KANAL_DEBUG=1 asks for one."""
    args = sys.argv[1:] if argv is None else argv
    set_json_errors(wants_json(args))
    try:
        return _dispatch(args)
    except KanalError as exc:
        return report_error(exc.code, exc.message)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `kanal consume ... | head`: the reader has what it wanted
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 - the process top: a bug ends it with status 70, its traceback on request
        if os.environ.get("KANAL_DEBUG"):
            traceback.print_exc()
        return report_error(
            ErrorCode.UNKNOWN_SERVER_ERROR,
            f"internal error {type(exc).__name__}: {exc} (a bug in kanal; KANAL_DEBUG=1 prints "
            "the traceback)",
            EXIT_INTERNAL,
        )


def _leading_output_last(args: list[str]) -> list[str]:
    """`kanal --output json topics list` as `kanal topics list --output json`: the usage line shows --output
    as a flag of every command, so it may come before the command's name too."""
    if args[:1] == ["--output"] and len(args) >= 2:
        return [*args[2:], "--output", args[1]]
    if args and args[0].startswith("--output="):
        return [*args[1:], args[0]]
    return args


def _dispatch(args: list[str]) -> int:
    args = _leading_output_last(args)
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage(), file=sys.stdout if args else sys.stderr)  # asked for, or a usage error
        return 0 if args else EXIT_USAGE
    if args[0] in ("--version", "version"):
        print(f"kanal {kanal.__version__}")
        return 0
    name, rest = args[0], args[1:]
    if name == "completion":
        # Imported for this command only, as every command's module is: it loads the client commands' parser.
        from kanal.deploy.completion import main as completion_main

        return completion_main(rest)
    if name not in SUBCOMMANDS:
        return report_error(ErrorCode.INVALID_REQUEST, f"unknown command {name!r}; `kanal --help` lists them",
                            EXIT_USAGE)
    module_name = SUBCOMMANDS[name][0]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:  # an optional extra that is not installed (Spark for audit, analytics)
        extra = MISSING_EXTRAS.get(exc.name or "")
        if extra is None:
            raise
        raise KanalError(ErrorCode.MISSING_DEPENDENCY, f"`kanal {name}` needs {exc.name}: "
                                                       f"pip install 'kanal[{extra}]'") from None
    # Client commands share one parser that knows every subcommand; server commands get their flags only.
    return int(module.main(args if module_name == "kanal.clients.cli" else rest) or 0)


# Modules that come with a pip extra -> the extra's name.
MISSING_EXTRAS = {
    "pyspark": "spark",
    "pyarrow": "spark",
    "testcontainers": "containers",
    "docker": "containers",
    "shtab": "completion",
}


if __name__ == "__main__":
    sys.exit(main())
