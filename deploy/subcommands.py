"""SUBCOMMANDS: the `kanal` command's table of subcommands, each with the module that owns it and its help.

The dispatcher (cli.py) runs a subcommand by importing its module only when it is chosen; the completion
script (completion.py) is built from the same table. `kanal completion` itself is not in it: the dispatcher
answers it, and the completion parser adds it.
"""

from __future__ import annotations

# subcommand -> (module with main(argv), one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "controller": ("kanal.raft.controller_main", "run one controller of the Raft metadata quorum"),
    "broker": ("kanal.broker.broker_main", "run one broker (partition replicas, produce and fetch)"),
    "demo": ("kanal.deploy.demo", "run kanal's main job end to end on the embedded default"),
    "metadata": (
        "kanal.raft.metadata_shell",
        "browse the metadata image as a tree, from a controller or its data directory",
    ),
    "dump-log": (
        "kanal.broker.dump_log",
        "print what a partition's segment files hold, read offline (kafka-dump-log)",
    ),
    "node-zone": (
        "kanal.deploy.node_zone",
        "write this pod's node zone to a file (an init container; broker --rack-file)",
    ),
    "health": (
        "kanal.deploy.health_probe",
        "ask a node's gRPC health service, over TLS too (an exec probe; exit 0 when SERVING)",
    ),
    "chaos": (
        "kanal.deploy.chaos.cli",
        "fault runner: workloads under kills, pauses and partitions, history checked",
    ),
    "mirror": (
        "kanal.deploy.mirror.main",
        "copy topics, configs, ACLs and group offsets to another cluster, exactly once (MirrorMaker 2)",
    ),
    "dev": ("kanal.deploy.dev", "run a local cluster (3 controllers, 3 brokers) on loopback until Ctrl-C"),
    "topics": ("kanal.clients.cli", "create, list, describe, delete or alter topics"),
    "produce": ("kanal.clients.cli", "produce one record per line of stdin or a file"),
    "consume": ("kanal.clients.cli", "print records of a topic"),
    "cluster": ("kanal.clients.cli", "describe the cluster: brokers and the controller quorum"),
    "configs": ("kanal.clients.cli", "describe or alter topic and broker configs"),
    "quotas": ("kanal.clients.cli", "describe or alter client quotas"),
    "acls": ("kanal.clients.cli", "add, list or remove access-control entries (kafka-acls' flags)"),
    "perf": ("kanal.clients.cli", "load generators: perf produce, perf consume"),
    "schemas": (
        "kanal.clients.cli",
        "the schema registry: list, get, register, delete subjects' schemas; compatibility",
    ),
    "users": ("kanal.clients.cli", "create, delete or list users (SCRAM credentials in the metadata log)"),
    "groups": ("kanal.clients.cli", "list, describe (with lag), reset offsets of or delete consumer groups"),
    "transactions": ("kanal.clients.cli", "list or describe transactional ids and their open transactions"),
    "reassign": (
        "kanal.clients.cli",
        "move partition replicas between brokers: plans, execute, verify, cancel",
    ),
    "leaders": ("kanal.clients.cli", "preferred-leader election (kafka-leader-election)"),
    "brokers": ("kanal.clients.cli", "broker lifecycle: unregister a decommissioned broker"),
    "quorum": ("kanal.clients.cli", "controller quorum: describe it, add or remove a voter"),
    "audit": ("kanal.spark.audit_cli", "Spark audit of the metadata log: cluster history as Parquet + HTML"),
    "analytics": (
        "kanal.spark.analytics_cli",
        "Spark analytics of partition data: throughput, keys, producers, lag",
    ),
}
