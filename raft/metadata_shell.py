"""`kanal metadata`: browse the cluster's metadata image as a tree (Kafka's kafka-metadata-shell).

The image comes from a running controller (`--controller HOST:PORT`, DescribeMetadataImage: that
controller's committed image; default: the first controller of a running `kanal dev`) or, offline, from a
controller's data directory (`--data-dir`): the newest intact snapshot file of `__cluster_metadata-0/`,
then every batch of the log after it, applied as the controllers apply them. Offline reading changes no
file (segments are mapped read-only and never recovered); a damaged entry ends the replay there, with a
warning naming its offset.

The tree (every leaf a JSON value):

    /metadata            next_offset, controller_epoch, next_producer_id
    /brokers/<id>        endpoint, rack, epoch, fenced, incarnation and directory ids, metrics endpoint
    /topics/<name>       id, configs, partitions/<n> (replicas, isr, leader, leader and partition epochs)
    /configs/brokers/<name>     broker config overrides (name "" is the cluster default, shown as <default>)
    /quotas/<type>=<name>       client quota values
    /controllers/<id>    the controller's registered directory id
    /voters/<id>         the quorum's voters as the last VoterSetRecord names them (raft and grpc endpoints;
                         empty before any quorum change: the voters are then every controller's --peers)
    /acls/<type>:<pattern>:<name>   the resource's access-control entries (principal, host, operation,
                         permission), Kafka's names

Commands: `ls [PATH]`, `cat PATH` (a leaf's value, or a subtree as JSON), `tree [PATH]`; with no command
an interactive shell reads them from stdin, with `cd PATH`, `pwd`, `help` and `exit` besides. Exit 0, 1 when
a path does not exist or the image cannot be read, 2 on usage errors.
"""

from __future__ import annotations

import argparse
import json
import os
import posixpath
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kanal.broker.storage.segment_walk import mapped_segment, walk_segment
from kanal.commands.command_config import add_client_security_flags, layered_settings, security_from
from kanal.commands.dev_state import dev_state_path, read_dev_state
from kanal.commands.report import OUTPUT_HELP, CommandParser, command_error
from kanal.metadata import MetadataImage, apply_batch, image_from_snapshot
from kanal.metadata.acl import operation_name, pattern_name, permission_name, resource_type_name
from kanal.metadata.log_codec import decode_entry
from kanal.metadata.snapshot_file import SnapshotFileError, decode_snapshot_file, parse_snapshot_file_name
from kanal.raft.metadata_log import METADATA_LOG_DIR_NAME
from kanal.v1.batch import CorruptEntry
from kanal.v1.error import KanalError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
DEFAULT_NAME = "<default>"

Tree = dict[str, Any]


class ShellError(Exception):
    """A path that is not in the tree, or an image that cannot be read; one line."""


# ---- reading an image ----------------------------------------------------------------------------


def image_from_controller(endpoint: str, timeout_s: float = 10.0, security=None) -> MetadataImage:
    """`security`: a kanal.security.channel_security.ClientSecurity for a secured controller (None:
    plaintext)."""
    import grpc

    from kanal.net.channel_options import channel_options
    from kanal.security.channel_security import open_channel
    from kanal.v1 import controller_pb2, controller_pb2_grpc

    with open_channel(endpoint, channel_options(), security) as channel:
        try:
            reply = controller_pb2_grpc.ControllerStub(channel).DescribeMetadataImage(
                controller_pb2.DescribeMetadataImageRequest(), timeout=timeout_s)
        except grpc.RpcError as exc:
            raise ShellError(f"controller {endpoint}: {exc.code().name}: {exc.details()}") from None
    return image_from_snapshot(reply.snapshot)


def image_from_data_dir(data_dir: Path, warn=lambda line: print(line, file=sys.stderr)) -> MetadataImage:
    """The image a controller's data directory holds: newest intact snapshot, then the log after it."""
    log_dir = data_dir / METADATA_LOG_DIR_NAME
    if not log_dir.is_dir():
        raise ShellError(
            f"{data_dir}: no {METADATA_LOG_DIR_NAME} directory (not a controller's data directory)"
        )
    image = MetadataImage()
    for path in sorted(log_dir.iterdir(), reverse=True):
        if parse_snapshot_file_name(path.name) is None:
            continue
        try:
            image = image_from_snapshot(decode_snapshot_file(path.read_bytes(), path.name).snapshot)
            break
        except (OSError, SnapshotFileError) as exc:
            warn(f"kanal metadata: skipping the damaged snapshot {path.name}: {exc}")
    for base, entries in _segments(log_dir):
        try:
            for entry in walk_segment(entries, base):
                batch = decode_entry(entry.batch)
                if batch.end_offset <= image.next_offset:
                    continue
                if batch.base_offset != image.next_offset:
                    raise ShellError(
                        f"{log_dir}: the log jumps from {image.next_offset} to {batch.base_offset}"
                    )
                apply_batch(image, batch.metadata_batch(), batch.base_offset)
        except CorruptEntry as exc:
            warn(f"kanal metadata: the log is damaged in segment {base} ({exc.message}); "
                 f"the image stops at offset {image.next_offset}")
            break
    return image


def _segments(log_dir: Path) -> Iterator[tuple[int, memoryview]]:
    for path in sorted(log_dir.glob("*.log")):
        if not path.stem.isdigit():
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            with mapped_segment(fd, os.fstat(fd).st_size) as view:
                yield int(path.stem), view
        finally:
            os.close(fd)


# ---- the tree --------------------------------------------------------------------------------------


def image_tree(image: MetadataImage) -> Tree:
    """The image as nested dicts (see the module docstring); leaves are JSON values."""
    return {
        "metadata": {
            "next_offset": image.next_offset,
            "controller_epoch": image.controller_epoch,
            "next_producer_id": image.next_producer_id,
        },
        "brokers": {
            str(b): {
                "endpoint": r.endpoint,
                "rack": r.rack,
                "epoch": r.broker_epoch,
                "fenced": r.fenced,
                "incarnation_id": r.incarnation_id,
                "directory_id": r.directory_id,
                "metrics_endpoint": r.metrics_endpoint,
            }
            for b, r in sorted(image.brokers.items())
        },
        "topics": {
            name: {
                "id": str(t.topic_id),
                "configs": dict(sorted(t.configs.items())),
                "partitions": {
                    str(p.partition_id): {
                        "replicas": list(p.replicas),
                        "isr": list(p.isr),
                        "leader": p.leader,
                        "leader_epoch": p.leader_epoch,
                        "partition_epoch": p.partition_epoch,
                    }
                    for p in t.partitions
                },
            }
            for name, t in sorted(image.topics.items())
        },
        "configs": {
            "brokers": {
                name or DEFAULT_NAME: dict(sorted(values.items()))
                for name, values in sorted(image.broker_configs.items())
            }
        },
        "quotas": {
            f"{kind}={name or DEFAULT_NAME}": dict(sorted(values.items()))
            for (kind, name), values in sorted(image.client_quotas.items())
        },
        "controllers": {str(c): {"directory_id": d} for c, d in sorted(image.controller_directories.items())},
        "voters": {
            str(v.controller_id): {"raft": v.raft_endpoint, "grpc": v.grpc_endpoint} for v in image.voters
        },
        "acls": {
            f"{resource_type_name(r.resource_type)}:{pattern_name(r.pattern_type)}:{r.name}": [
                {
                    "principal": e.principal,
                    "host": e.host,
                    "operation": operation_name(e.operation),
                    "permission": permission_name(e.permission),
                }
                for e in sorted(
                    acl_set.entries, key=lambda e: (e.principal, e.host, e.operation, e.permission)
                )
            ]
            for r, acl_set in sorted(image.acls.items())
        },
    }


def resolve(tree: Tree, cwd: str, path: str) -> tuple[str, Any]:
    """(absolute path, node) of `path` taken from `cwd`; ShellError when it is not in the tree."""
    absolute = posixpath.normpath(posixpath.join(cwd, path or "."))
    node: Any = tree
    for part in [p for p in absolute.split("/") if p]:
        if not isinstance(node, dict) or part not in node:
            raise ShellError(f"{absolute}: no such node")
        node = node[part]
    return ("/" if absolute in ("/", "//") else absolute), node


def render_tree(node: Any, name: str, indent: str = "") -> Iterator[str]:
    if isinstance(node, dict):
        yield f"{indent}{name}/"
        for key, child in node.items():
            yield from render_tree(child, key, indent + "  ")
    else:
        yield f"{indent}{name}: {json.dumps(node)}"


class Shell:
    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        self.cwd = "/"

    def run(self, words: list[str]) -> list[str]:
        """The output lines of one command; ShellError for a bad path or command."""
        command, args = words[0], words[1:]
        if command in ("ls", "tree", "cat", "cd") and len(args) > 1:
            raise ShellError(f"{command}: one path at most")
        path = args[0] if args else ""
        if command == "ls":
            absolute, node = resolve(self.tree, self.cwd, path)
            if not isinstance(node, dict):
                return [posixpath.basename(absolute)]
            return [f"{key}/" if isinstance(child, dict) else key for key, child in node.items()]
        if command == "cat":
            if not path:
                raise ShellError("cat: which path?")
            _, node = resolve(self.tree, self.cwd, path)
            return [json.dumps(node, indent=2 if isinstance(node, dict) else None)]
        if command == "tree":
            absolute, node = resolve(self.tree, self.cwd, path)
            return list(render_tree(node, absolute))
        if command == "cd":
            absolute, node = resolve(self.tree, self.cwd, path or "/")
            if not isinstance(node, dict):
                raise ShellError(f"{absolute}: not a directory")
            self.cwd = absolute
            return []
        if command == "pwd":
            return [self.cwd]
        if command == "help":
            return ["ls [PATH]  cat PATH  tree [PATH]  cd [PATH]  pwd  help  exit"]
        raise ShellError(f"unknown command {command!r} (help lists them)")


# ---- the command -----------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="kanal metadata",
        description="Browse the metadata image as a tree, from a controller or offline from a controller's "
                    "data directory (Kafka's kafka-metadata-shell).",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--controller", metavar="HOST:PORT",
                        help="a controller to ask (default: the first controller of a running `kanal dev`)")
    source.add_argument("--data-dir", type=Path, help="a controller's data directory, read offline")
    parser.add_argument("command", nargs="*", metavar="COMMAND",
                        help="ls [PATH] | cat PATH | tree [PATH]; none: an interactive shell on stdin")
    parser.add_argument(
        "--output",
        choices=("text", "json"),
        default="text",
        help=f"{OUTPUT_HELP}; with a COMMAND: ls gives a JSON list of names, cat and tree the "
        "node as one JSON document",
    )
    add_client_security_flags(parser)
    return parser


def _dev_controller() -> str:
    state = read_dev_state()
    if state is None or not isinstance(state.get("controllers"), str):
        raise ShellError(f"no --controller or --data-dir, and no running `kanal dev` ({dev_state_path()})")
    return state["controllers"].split(",")[0]


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.data_dir is not None:
            image = image_from_data_dir(args.data_dir)
        else:
            settings = layered_settings(args, os.environ, read_dev_state(), talks_to_dev=not args.controller)
            image = image_from_controller(
                args.controller or _dev_controller(), security=security_from(settings)
            )
    except KanalError as exc:
        return command_error("kanal metadata: error", exc.message, exc.code)
    except ShellError as exc:
        return command_error("kanal metadata: error", str(exc))
    shell = Shell(image_tree(image))
    if args.command:
        try:
            lines = shell.run(args.command)
            if args.output == "json":
                if args.command[0] in ("cat", "tree"):
                    lines = [
                        json.dumps(
                            resolve(shell.tree, shell.cwd, args.command[1] if len(args.command) > 1 else "")[
                                1
                            ],
                            indent=2,
                        )
                    ]
                else:
                    lines = [json.dumps(lines)]
        except ShellError as exc:
            return command_error("kanal metadata: error", str(exc))
        for out in lines:
            print(out)
        return EXIT_OK
    interactive = sys.stdin.isatty()
    while True:
        if interactive:
            print(f"kanal metadata {shell.cwd}> ", end="", flush=True)
        line = sys.stdin.readline()
        if not line:
            return EXIT_OK
        try:
            words = shlex.split(line)
        except ValueError as exc:  # an unclosed quote
            print(f"error: {exc}", file=sys.stderr)
            continue
        if not words:
            continue
        if words[0] in ("exit", "quit"):
            return EXIT_OK
        try:
            for out in shell.run(words):
                print(out)
        except ShellError as exc:
            print(f"error: {exc}", file=sys.stderr)
