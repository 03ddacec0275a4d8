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
    "metadata": ("kanal.raft.metadata_shell", "browse the metadata image as a tree, from a controller or its data directory"),
    "dump-log": ("kanal.broker.dump_log", "print what a partition's segment files hold, read offline (kafka-dump-log)"),
    "node-zone": ("kanal.deploy.node_zone", "write this pod's node zone to a file (an init container; broker --rack-file)"),
    "chaos": ("kanal.deploy.chaos.cli", "fault runner: workloads under kills, pauses and partitions, history checked"),
    "dev": ("kanal.deploy.dev", "run a local cluster (3 controllers, 3 brokers) on loopback until Ctrl-C"),
    "topics": ("kanal.clients.cli", "create, list, describe, delete or alter topics"),
    "produce": ("kanal.clients.cli", "produce one record per line of stdin or a file"),
    "consume": ("kanal.clients.cli", "print records of a topic"),
    "cluster": ("kanal.clients.cli", "describe the cluster: brokers and the controller quorum"),
    "configs": ("kanal.clients.cli", "describe or alter topic and broker configs"),
    "quotas": ("kanal.clients.cli", "describe or alter client quotas"),
    "acls": ("kanal.clients.cli", "add, list or remove access-control entries (kafka-acls' flags)"),
    "perf": ("kanal.clients.cli", "load generators: perf produce, perf consume"),
    "users": ("kanal.clients.cli", "create, delete or list users (SCRAM credentials in the metadata log)"),
    "groups": ("kanal.clients.cli", "list, describe (with lag), reset offsets of or delete consumer groups"),
    "transactions": ("kanal.clients.cli", "list or describe transactional ids and their open transactions"),
    "audit": ("kanal.spark.audit_cli", "Spark audit of the metadata log: cluster history as Parquet + HTML"),
    "analytics": ("kanal.spark.analytics_cli", "Spark analytics of partition data: throughput, keys, producers, lag"),
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
    module_name = SUBCOMMANDS[name][0]
    module = importlib.import_module(module_name)
    # Client commands share one parser that knows every subcommand; server commands get their flags only.
    return int(module.main(args if module_name == "kanal.clients.cli" else rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
