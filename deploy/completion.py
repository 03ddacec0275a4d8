"""`kanal completion bash|zsh|tcsh`: print a shell completion script for every kanal command (shtab).

    kanal completion bash | sudo tee /etc/bash_completion.d/kanal     # or: eval "$(kanal completion bash)"
    kanal completion zsh > "${fpath[1]}/_kanal"

Needs the `completion` extra (pip install 'kanal[completion]'). The script is generated from the commands'
own argparse parsers, so it knows every subcommand and flag; commands whose parser is built only when they
run (controller, audit, analytics, demo, dev) complete by name.
"""

from __future__ import annotations

import argparse
import importlib
import json

from kanal.clients.cli import build_parser as client_parser
from kanal.commands.report import OUTPUT_HELP, CommandParser
from kanal.deploy.subcommands import SUBCOMMANDS

# command -> module whose build_parser() (or parser()) gives that command's flags
_PARSERS = {"broker": "kanal.broker.broker_main", "metadata": "kanal.raft.metadata_shell",
            "dump-log": "kanal.broker.dump_log", "node-zone": "kanal.deploy.node_zone",
            "chaos": "kanal.deploy.chaos.cli"}


def full_parser() -> argparse.ArgumentParser:
    """One parser of every kanal command: the client commands' parser, with the others added beside them."""
    parser = client_parser()
    parser.add_argument("--version", action="store_true", help="print kanal's version")
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, (module_name, help_text) in sorted(SUBCOMMANDS.items()):
        if name in sub.choices:
            continue
        own = None
        if name in _PARSERS:
            module = importlib.import_module(_PARSERS[name])
            own = getattr(module, "build_parser", None) or module.parser
        sub.add_parser(name, help=help_text, parents=[own()] if own else [], add_help=own is None)
    sub.add_parser("completion", help="print a shell completion script").add_argument(
        "shell", choices=["bash", "zsh", "tcsh"], help="the shell")
    return parser


def main(argv: list[str]) -> int:
    parser = CommandParser(prog="kanal completion", description=__doc__.splitlines()[0])
    parser.add_argument("shell", choices=["bash", "zsh", "tcsh"], help="the shell to write the script for")
    parser.add_argument("--output", choices=("text", "json"), default="text",
                        help=f"{OUTPUT_HELP} (json: {{\"shell\": ..., \"script\": ...}})")
    args = parser.parse_args(argv)
    import shtab  # the `completion` extra: kanal.deploy.cli names it when it is missing

    script = shtab.complete(full_parser(), shell=args.shell)
    print(json.dumps({"shell": args.shell, "script": script}) if args.output == "json" else script)
    return 0
