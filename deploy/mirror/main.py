"""`kanal mirror`: copy topics from one cluster to another, exactly once, as MirrorMaker 2 does.

    kanal mirror run --source east=HOST:PORT --target west=HOST:PORT [--topics REGEX] [--groups REGEX]
        [--replication-policy default|identity] [--source-command-config FILE] [--target-command-config FILE]
        [--source-kind kanal|kafka] [--metrics HOST:PORT] [--commit-interval-ms N] ...
    kanal mirror run --config mirror.toml          # one or more flows (config.py has the format)
    kanal mirror status (--config mirror.toml | --source ... --target ...) [--output json]

`run` runs every flow on a thread of its own until SIGINT or SIGTERM (exit 0 once each flow committed what
it copied), or until a flow is fenced by another instance with its transactional id (exit 1). A cluster
that cannot be reached is retried, not fatal. `status` reads both clusters (the mirror need not run): per
flow and partition the source's end offset, the position committed on the target, and the lag.

A `kafka` source is any Kafka-protocol cluster, read with librdkafka (confluent-kafka); its command config
is then a librdkafka properties file (`key=value` lines: security.protocol, sasl.*, ssl.*).
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from kanal.commands.command_config import read_config_file, security_from
from kanal.commands.report import CommandParser, command_error
from kanal.deploy.mirror.config import ClusterConfig, FlowConfig, load_config
from kanal.deploy.mirror.flow import FENCED, RETRY_BACKOFF_S, Flow
from kanal.deploy.mirror.source import KanalSource, SourceCluster
from kanal.security.channel_security import ClientSecurity
from kanal.v1.error import ErrorCode, KanalError

log = logging.getLogger("kanal.mirror")
FLOW_OPTIONS = ("topics", "groups", "replication_policy", "commit_interval_ms", "refresh_interval_ms",
                "checkpoint_interval_ms", "heartbeat_interval_ms", "offset_lag_max", "replication_factor")


def _alias_address(text: str) -> tuple[str, str]:
    alias, sep, address = text.partition("=")
    if not sep or not alias or not address:
        raise argparse.ArgumentTypeError(f"{text!r}: ALIAS=HOST:PORT[,HOST:PORT]")
    return alias, address


def parser() -> argparse.ArgumentParser:
    p = CommandParser(prog="kanal mirror", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name, help_ in (("run", "run the flows until SIGINT/SIGTERM"),
                        ("status", "per flow and partition: source end, committed position, lag")):
        s = sub.add_parser(name, help=help_)
        s.add_argument("--config", type=Path, help="TOML file with [clusters.*] and [[flows]]")
        s.add_argument("--source", type=_alias_address, help="ALIAS=HOST:PORT of the source cluster")
        s.add_argument("--target", type=_alias_address, help="ALIAS=HOST:PORT of the target (kanal) cluster")
        s.add_argument("--source-kind", choices=("kanal", "kafka"), default="kanal")
        s.add_argument("--source-command-config", type=Path, help="the source's client config file")
        s.add_argument("--target-command-config", type=Path, help="the target's client config file")
        s.add_argument("--topics", default=".*", help="regular expression of the topics copied")
        s.add_argument("--groups", default=".*", help="regular expression of the groups translated")
        s.add_argument("--replication-policy", choices=("default", "identity"), default="default")
        s.add_argument("--no-sync-group-offsets", action="store_true")
        s.add_argument("--no-sync-topic-configs", action="store_true")
        s.add_argument("--no-sync-topic-acls", action="store_true")
        for option in FLOW_OPTIONS[3:]:
            s.add_argument(f"--{option.replace('_', '-')}", type=int,
                           default=FlowConfig.__dataclass_fields__[option].default)
        if name == "run":
            s.add_argument("--metrics", default="off", help="HOST:PORT of a Prometheus endpoint, or off")
        else:
            s.add_argument("--output", choices=("text", "json"), default="text")
    return p


def flows_from(args: argparse.Namespace) -> list[FlowConfig]:
    if args.config is not None:
        if args.source or args.target:
            raise ValueError("--config or --source/--target, not both")
        return load_config(args.config)
    if not (args.source and args.target):
        raise ValueError("give --source ALIAS=HOST:PORT and --target ALIAS=HOST:PORT, or --config FILE")
    source = ClusterConfig(args.source[0], args.source[1], args.source_command_config, args.source_kind)
    target = ClusterConfig(args.target[0], args.target[1], args.target_command_config)
    options = {o: getattr(args, o) for o in FLOW_OPTIONS}
    return [FlowConfig(source, target, sync_group_offsets=not args.no_sync_group_offsets,
                       sync_topic_configs=not args.no_sync_topic_configs,
                       sync_topic_acls=not args.no_sync_topic_acls, **options)]


def kanal_security(cluster: ClusterConfig) -> ClientSecurity | None:
    if cluster.command_config is None:
        return None
    return security_from(read_config_file(cluster.command_config), interactive=False)


def check_security(configs: list[FlowConfig]) -> None:
    """Every cluster's client config read once before anything starts: a bad file is a usage error now,
    not a flow that fails and starts again for ever."""
    for config in configs:
        kanal_security(config.target)
        if config.source.kind == "kanal":
            kanal_security(config.source)
        elif config.source.command_config is not None:
            from kanal.deploy.mirror.kafka_source import read_command_config

            read_command_config(config.source.command_config)


def open_source(cluster: ClusterConfig, flow_id: str) -> SourceCluster:
    if cluster.kind == "kafka":
        from kanal.deploy.mirror.kafka_source import KafkaSource  # librdkafka: only for a Kafka source

        return KafkaSource(cluster.bootstrap, cluster.command_config, client_id=f"kanal-mirror-{flow_id}")
    return KanalSource(cluster.bootstrap, kanal_security(cluster), client_id=f"kanal-mirror-{flow_id}")


def _run_flow(config: FlowConfig, stop: threading.Event, flows: list[Flow], failed: list[str]) -> None:
    """One flow until `stop`, started again after a failure it cannot recover from inside (a cluster
    unreachable at start, a source that went away); a fenced flow ends the process."""
    while not stop.is_set():
        source = None
        try:
            source = open_source(config.source, config.id)
            flow = Flow(config, source, kanal_security(config.target))
            flows.append(flow)
            flow.run(stop)
            return
        except KanalError as exc:
            if exc.code in FENCED:
                log.error("%s: fenced (%s): another instance runs this flow", config.name, exc)
                failed.append(config.name)
                stop.set()
                return
            log.warning("%s: %s; starting the flow again", config.name, exc)
        except Exception:
            log.exception("%s: failed; starting the flow again", config.name)
        finally:
            if source is not None:
                source.close()
        stop.wait(RETRY_BACKOFF_S * 4)


def run(configs: list[FlowConfig], metrics: str) -> int:
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: stopping after each flow's commit", signum)
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    flows: list[Flow] = []
    failed: list[str] = []
    server = None
    if metrics != "off":
        from kanal.deploy.mirror.metrics import MirrorCollector
        from kanal.server.metrics_endpoint import metrics_listen, node_registry, serve_metrics

        registry = node_registry()
        registry.register(MirrorCollector(flows))
        listen = metrics_listen(metrics, "", 0)
        assert listen is not None
        server = serve_metrics(listen, registry)
    threads = [threading.Thread(target=_run_flow, args=(c, stop, flows, failed), name=f"flow {c.name}")
               for c in configs]
    for t in threads:
        t.start()
    print(f"kanal mirror: {len(configs)} flow(s): {', '.join(c.name for c in configs)}", flush=True)
    while any(t.is_alive() for t in threads):
        for t in threads:
            t.join(0.2)
    if server is not None:
        server.shutdown()
    return 1 if failed else 0


def status(configs: list[FlowConfig]) -> list[dict]:
    from kanal.clients.admin import Admin

    out = []
    for config in configs:
        policy = config.policy
        source = open_source(config.source, config.id)
        try:
            topics = source.topics(functools.partial(policy.mirrors, topics_pattern=config.topics_pattern))
            partitions = [(t, p) for t, n in sorted(topics.items()) for p in range(n)]
            ends = source.end_offsets(partitions)
            with Admin(config.target.bootstrap, security=kanal_security(config.target)) as admin:
                committed = admin.group_offsets(policy.positions_group(config.id))
        finally:
            source.close()
        rows = []
        for topic, partition in partitions:
            remote = policy.remote_topic(topic)
            position = committed.get((remote, partition), -1)
            end = ends.get((topic, partition), 0)
            rows.append({"topic": topic, "remote_topic": remote, "partition": partition, "source_end": end,
                         "committed": position, "lag": end - max(position, 0)})
        out.append({"flow": config.name, "partitions": rows, "lag": sum(r["lag"] for r in rows)})
    return out


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        configs = flows_from(args)
        check_security(configs)
    except (ValueError, KanalError) as exc:
        return command_error("kanal mirror", str(exc), ErrorCode.INVALID_CONFIG, 2)
    if args.command == "run":
        return run(configs, args.metrics)
    try:
        report = status(configs)
    except KanalError as exc:
        return command_error("kanal mirror", str(exc), exc.code, 1)
    if args.output == "json":
        print(json.dumps(report, indent=1))
    else:
        for flow in report:
            print(f"{flow['flow']}  lag {flow['lag']}")
            for r in flow["partitions"]:
                print(f"  {r['topic']}[{r['partition']}] -> {r['remote_topic']}  source end {r['source_end']}"
                      f"  committed {r['committed']}  lag {r['lag']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
