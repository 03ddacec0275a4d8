"""`kanal broker`: run one broker process until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path

from kanal.broker.config import BrokerConfig
from kanal.broker.server import BrokerServer
from kanal.v1.error import KanalError


def parse_args(argv: list[str]) -> BrokerConfig:
    p = argparse.ArgumentParser(prog="kanal broker", description="Run one kanal broker.")
    p.add_argument("--id", type=int, required=True, help="broker id, unique in the cluster")
    p.add_argument("--listen", required=True, help="host:port for gRPC (also advertised to clients)")
    p.add_argument("--controllers", required=True, help="comma-separated host:port of the controllers' gRPC")
    p.add_argument("--data-dir", type=Path, required=True, help="directory for partition logs")
    p.add_argument("--rack", default="", help="rack or zone, for rack-aware placement")
    p.add_argument("--metrics", default="", help="host:port for the Prometheus endpoint (default: off)")
    p.add_argument("--heartbeat-interval-ms", type=int, default=1000)
    p.add_argument("--replica-lag-ms-max", type=int, default=10_000, help="replica.lag.time.max.ms")
    p.add_argument("--replica-fetch-wait-ms-max", type=int, default=500)
    p.add_argument("--metadata-fetch-bytes-max", type=int, default=8 << 20,
                   help="bytes of metadata log one fetch from the controllers asks for (at least one batch comes)")
    p.add_argument("--offsets-topic-partitions", type=int, default=50, help="offsets.topic.num.partitions")
    p.add_argument("--offsets-topic-replication-factor", type=int, default=3)
    p.add_argument("--group-session-timeout-ms-min", type=int, default=6000, help="group.min.session.timeout.ms")
    p.add_argument("--group-session-timeout-ms-max", type=int, default=1_800_000, help="group.max.session.timeout.ms")
    p.add_argument("--group-initial-rebalance-delay-ms", type=int, default=3000,
                   help="group.initial.rebalance.delay.ms")
    p.add_argument("--offsets-retention-ms", type=int, default=7 * 24 * 3600 * 1000,
                   help="an Empty group's offsets are deleted this long after it became Empty and they were "
                        "committed (offsets.retention.minutes, in ms)")
    p.add_argument("--offsets-retention-check-interval-ms", type=int, default=600_000,
                   help="offsets.retention.check.interval.ms")
    p.add_argument("--producer-id-expiration-ms", type=int, default=86_400_000,
                   help="a producer with no batch for this long is forgotten (producer.id.expiration.ms)")
    p.add_argument("--produce-timeout-ms-default", type=int, default=30_000,
                   help="acks=all wait of a Produce whose timeout_ms is 0 (request.timeout.ms)")
    p.add_argument("--log-level", default="INFO")
    args = p.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format=f"%(asctime)s broker-{args.id} %(threadName)s %(levelname)s %(name)s: %(message)s")
    return BrokerConfig(
        broker_id=args.id, listen=args.listen, controllers=tuple(c for c in args.controllers.split(",") if c),
        data_dir=args.data_dir, rack=args.rack, metrics_listen=args.metrics,
        heartbeat_interval_ms=args.heartbeat_interval_ms, replica_lag_ms_max=args.replica_lag_ms_max,
        replica_fetch_wait_ms_max=args.replica_fetch_wait_ms_max,
        metadata_fetch_bytes_max=args.metadata_fetch_bytes_max,
        offsets_topic_partitions=args.offsets_topic_partitions,
        offsets_topic_replication_factor=args.offsets_topic_replication_factor,
        group_session_timeout_ms_min=args.group_session_timeout_ms_min,
        group_session_timeout_ms_max=args.group_session_timeout_ms_max,
        group_initial_rebalance_delay_ms=args.group_initial_rebalance_delay_ms,
        offsets_retention_ms=args.offsets_retention_ms,
        offsets_retention_check_interval_ms=args.offsets_retention_check_interval_ms,
        producer_id_expiration_ms=args.producer_id_expiration_ms,
        produce_timeout_ms_default=args.produce_timeout_ms_default,
    )


def main(argv: list[str] | None = None) -> int:
    try:
        config = parse_args(sys.argv[1:] if argv is None else argv)
    except KanalError as exc:
        print(f"kanal broker: {exc.message}", file=sys.stderr)
        return 2
    server = BrokerServer(config)
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())
    try:
        server.start()
    except KanalError as exc:
        print(f"kanal broker: could not start: {exc}", file=sys.stderr)
        server.stop(controlled=False)
        return 1
    stopping.wait()
    server.stop()
    return 0
