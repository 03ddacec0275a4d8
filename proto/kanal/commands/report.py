"""How every `kanal` command ends: its exit status and its one-line error, as text or as JSON.

Exit statuses (docs/cli.md lists them for users):

    0    done
    1    the command failed; the message names an ErrorCode (a server's answer, or a check here)
    2    bad arguments (a usage error; nothing was sent)
    3    `kanal dev status`: a node is not serving; `kanal chaos run`: a run could not be carried out
    70   an internal error: a bug in kanal, reported in one line (KANAL_DEBUG=1 prints the traceback);
         sysexits' EX_SOFTWARE
    130  interrupted (Ctrl-C)

An error is one line on stderr: `kanal: NAME: message`; with `--output json` anywhere on the command line
it is one JSON object instead, `{"error": {"code": N, "name": "NAME", "message": "..."}, "exit": S}`, so a
script reads the same shape from every command. `kanal.deploy.cli` sets the mode once per process before
any parser runs (`set_json_errors`), because argparse reports a bad flag before a command has read its own
`--output`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Sequence
from typing import NoReturn

from kanal.v1.error import ErrorCode, error_name

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOT_ALL_WELL, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 70, 130
DOCUMENTED_EXITS = frozenset(
    {EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOT_ALL_WELL, EXIT_INTERNAL, EXIT_INTERRUPTED}
)
OUTPUT_HELP = "text (default) or json: data as JSON on stdout, an error as one JSON object on stderr"

_json_errors = False


def bounded_number(kind: type, lowest: float, what: str, highest: float | None = None):
    """An argparse type: a number of `kind` from `lowest` (to `highest`); argparse turns the ValueError into a
    one-line usage error (exit 2) instead of a traceback further in."""
    def parse(text: str):
        value = kind(text)
        if value < lowest or (highest is not None and value > highest):
            raise ValueError(f"{text} is not {what}")  # argparse: "invalid positive int value: '0'"
        return value
    parse.__name__ = f"{what} {kind.__name__}"  # argparse names the type in its message
    return parse


def wants_json(argv: Sequence[str]) -> bool:
    """Whether the command line asks for JSON output (`--output json` or `--output=json`)."""
    return "--output=json" in argv or any(
        a == "--output" and b == "json" for a, b in itertools.pairwise(argv)
    )


def set_json_errors(on: bool) -> None:
    global _json_errors
    _json_errors = on


def report_error(
    code: int, message: str, exit_status: int = EXIT_FAILED, *, as_json: bool | None = None
) -> int:
    """Print one error line (text or JSON) on stderr; returns the exit status to end with."""
    if _json_errors if as_json is None else as_json:
        print(json.dumps({"error": {"code": int(code), "name": error_name(code), "message": message},
                          "exit": exit_status}), file=sys.stderr, flush=True)
    else:
        print(f"kanal: {error_name(code)}: {message}", file=sys.stderr, flush=True)
    return exit_status


class CommandParser(argparse.ArgumentParser):
    """argparse for the `kanal` commands: a usage error is argparse's usage and message in text mode, one
    JSON object in JSON mode; either way exit status 2."""

    def error(self, message: str) -> NoReturn:
        if _json_errors:
            report_error(ErrorCode.INVALID_REQUEST, f"{self.prog}: {message}", EXIT_USAGE)
            sys.exit(EXIT_USAGE)
        super().error(message)


def command_error(prefix: str, message: str, code: int = ErrorCode.INVALID_REQUEST,
                  exit_status: int = EXIT_FAILED) -> int:
    """A command's own error line, `PREFIX: MESSAGE` (e.g. `kanal broker: error: ...`), or in JSON mode the
    JSON object with that text as its message; returns the exit status to end with."""
    if _json_errors:
        return report_error(code, f"{prefix}: {message}", exit_status)
    print(f"{prefix}: {message}", file=sys.stderr, flush=True)
    return exit_status
