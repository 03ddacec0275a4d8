"""The `kanal` command: one entry point that dispatches to the part of kanal that owns each subcommand.

Server subcommands (`controller`, `broker`, `dev`, `demo`) live with their servers; client subcommands
live in kanal.clients and never import server code. Each owner module exposes `main(argv) -> int`.
Imports happen only for the chosen subcommand, so `kanal produce` never loads pysyncobj or Spark.
"""

from __future__ import annotations

import importlib
import sys

# subcommand -> (module with main(argv), one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "controller": ("kanal.raft.controller_main", "run one controller of the Raft metadata quorum"),
    "broker": ("kanal.broker.broker_main", "run one broker (partition replicas, produce and fetch)"),
    "demo": ("kanal.deploy.demo", "run kanal's main job end to end on the embedded default"),
}


def usage() -> str:
    width = max(len(name) for name in SUBCOMMANDS)
    lines = ["usage: kanal <command> [options]", "", "commands:"]
    lines += [f"  {name:<{width}}  {help_text}" for name, (_, help_text) in sorted(SUBCOMMANDS.items())]
    lines += ["", "Run `kanal <command> --help` for a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in SUBCOMMANDS:
        print(f"kanal: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(SUBCOMMANDS[name][0])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
