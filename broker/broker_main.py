"""`kanal broker`: run one broker process until SIGTERM or SIGINT.

    kanal broker --id 1 --listen 0.0.0.0:9092 --advertise kanal-broker-1.kanal-broker:9092 \\
        --controllers kanal-controller-0.kanal-controller:9091 --data-dir /var/lib/kanal

Every flag is also a KANAL_<FLAG> environment variable and a key of a TOML --config file (precedence: flag,
environment, file, default; kanal.server.flags). SIGTERM is a controlled shutdown: the broker asks the
controller to move its leaderships away, stops serving, flushes and closes its logs, and exits 0.

Exit status: 0 after a clean stop, 1 when the broker could not start, 2 for bad configuration (one line on
stderr, before anything starts).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

from kanal.broker.config import BrokerConfig, parse_endpoint
from kanal.broker.memory_policy import keep_freed_memory
from kanal.broker.read_replica import REPLICA_SELECTORS
from kanal.broker.server import BrokerServer
from kanal.commands.report import command_error
from kanal.metadata.authorizer import authorizer_config_from
from kanal.security.authorizer_flags import add_authorizer_flags
from kanal.security.listener_security import (
    ListenerSecurityError,
    add_listener_security_flags,
    listener_security_from_args,
)
from kanal.server.flags import (
    OneLineParser,
    ServerFlagError,
    add_server_flags,
    check_resolves,
    hostname_from,
    integer,
    parse_layered,
)
from kanal.server.logs import setup_logging
from kanal.server.metrics_endpoint import BROKER_METRICS_PORT_DEFAULT, MetricsFlagError, metrics_listen
from kanal.v1.error import KanalError

EXIT_OK = 0
EXIT_STARTUP_FAILED = 1
EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="kanal broker", description="Run one kanal broker.", allow_abbrev=False)
    p.add_argument(
        "--id", type=integer("--id"), help="broker id, unique in the cluster (or --id-from-hostname)"
    )
    p.add_argument("--listen", required=True, help="host:port the gRPC server binds (e.g. 0.0.0.0:9092)")
    p.add_argument("--advertise", default="",
                   help="host:port clients and other brokers dial (default: --listen); must resolve")
    p.add_argument("--inter-node-listen", default="",
                   help="host:port of a second listener for the other nodes only: TLS with client "
                        "certificates always required (needs --tls-*-file); other brokers dial it, so "
                        "--listen may take password clients without a certificate (--tls-client-auth none)")
    p.add_argument("--inter-node-advertise", default="",
                   help="host:port other brokers dial for --inter-node-listen (default: --inter-node-listen)")
    p.add_argument("--schema-registry-listen", default="",
                   help="host:port of the schema registry's REST listener (Confluent's API; default: none)")
    p.add_argument("--kafka-listen", default="",
                   help="host:port of a Kafka wire-protocol listener (Kafka clients: producers, consumer "
                        "groups, admin, transactions), with the --listen listener's TLS and passwords")
    p.add_argument("--kafka-advertise", default="",
                   help="host:port Kafka clients dial for --kafka-listen (default: --kafka-listen)")
    p.add_argument("--controllers", required=True, help="comma-separated host:port of the controllers' gRPC")
    p.add_argument("--data-dir", type=Path, required=True, help="directory for partition logs")
    p.add_argument("--rack", default="", help="rack or zone, for rack-aware placement")
    p.add_argument(
        "--rack-file",
        default="",
        help="file whose first line is the rack (in a pod: written by `kanal node-zone` from the node's "
        "zone label); an empty line is no rack",
    )
    p.add_argument("--remote-storage", default="",
                   help="tiered storage: where closed segments of topics with remote.storage.enable go, "
                        "s3://BUCKET[/PREFIX] or file:///DIR (the same on every broker)")
    p.add_argument("--remote-storage-endpoint", default="",
                   help="an S3-compatible endpoint for s3:// storage, http(s)://HOST:PORT (default: AWS)")
    p.add_argument("--remote-storage-region", default="", help="the S3 region (default: $AWS_REGION)")
    p.add_argument("--remote-storage-access-key-id", default="",
                   help="S3 credentials (default: the AWS_* variables); best given in --config or "
                        "the environment")
    p.add_argument("--remote-storage-secret-access-key", default="",
                   help="S3 credentials (default: the AWS_* variables); best given in --config or "
                        "the environment")
    p.add_argument("--replica-selector", default="leader", choices=REPLICA_SELECTORS,
                   help="which replica serves a consumer that names its rack (replica.selector.class): "
                        "leader (default), or rack-aware (an in-sync follower in the consumer's rack)")
    p.add_argument("--metrics", default="",
                   help=f"HOST:PORT of the Prometheus endpoint, or 'off' (default: the --listen host, port "
                        f"{BROKER_METRICS_PORT_DEFAULT})")
    for flag, default, help_text in (
        ("--heartbeat-interval-ms", 1000, None),
        ("--replica-lag-ms-max", 10_000, "replica.lag.time.max.ms"),
        ("--replica-fetch-wait-ms-max", 500, None),
        ("--ready-isr-wait-ms-max", 300_000,
         "readiness waits this long at most for the broker to rejoin the ISR of its partitions"),
        ("--metadata-fetch-bytes-max", 8 << 20,
         "bytes of metadata log one fetch from the controllers asks for (at least one batch comes)"),
        ("--offsets-topic-partitions", 50, "offsets.topic.num.partitions"),
        ("--offsets-topic-replication-factor", 3, None),
        ("--transaction-state-partitions", 50, "transaction.state.log.num.partitions"),
        ("--transaction-state-replication-factor", 3, "transaction.state.log.replication.factor"),
        ("--transaction-timeout-ms-max", 900_000, "transaction.max.timeout.ms"),
        ("--group-session-timeout-ms-min", 6000, "group.min.session.timeout.ms"),
        ("--group-session-timeout-ms-max", 1_800_000, "group.max.session.timeout.ms"),
        ("--group-initial-rebalance-delay-ms", 3000, "group.initial.rebalance.delay.ms"),
        ("--offsets-retention-ms", 7 * 24 * 3600 * 1000,
         ("an Empty group's offsets are deleted this long after it became Empty and they were committed "
          "(offsets.retention.minutes, in ms)")),
        ("--offsets-retention-check-interval-ms", 600_000, "offsets.retention.check.interval.ms"),
        ("--producer-id-expiration-ms", 86_400_000,
         "a producer with no batch for this long is forgotten (producer.id.expiration.ms)"),
        ("--produce-timeout-ms-default", 30_000,
         "acks=all wait of a Produce whose timeout_ms is 0 (request.timeout.ms)"),
        ("--kafka-request-bytes-max", 100 << 20,
         "largest Kafka request frame (socket.request.max.bytes); a longer one closes the connection"),
        ("--kafka-requests-in-flight-max", 64, "Kafka requests one connection may have in flight"),
        ("--kafka-batch-cache-bytes", 64 << 20,
         "bytes of recent batches kept in Kafka's form, served to consumers without a transcode; 0: off"),
        ("--remote-retry-backoff-ms-max", 30_000, "longest wait between retries of a failed upload"),
        ("--remote-fetch-cache-bytes", 64 << 20, "bytes of remote segment data cached for consumer reads"),
        ("--remote-fetch-chunk-bytes", 4 << 20, "size of one ranged read of a remote segment"),
        ("--remote-orphan-check-interval-ms", 600_000,
         "how often remote objects no record names are looked for (never at start-up)"),
        ("--remote-orphan-grace-ms", 600_000, "age at which a remote object no record names is removed"),
        ("--quota-window-num", 11, "samples client quota rates are measured over (quota.window.num)"),
        ("--quota-window-size-ms", 1000, "length of one quota sample (quota.window.size.seconds, in ms)"),
    ):
        p.add_argument(flag, type=integer(flag), default=default,
                       help=f"{help_text + '; ' if help_text else ''}default {default}")
    p.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"),
                   help="the least severe log level written (default INFO)")
    add_authorizer_flags(p)
    add_listener_security_flags(p)
    add_server_flags(p)
    return p


def parse_args(argv: list[str], environ: Mapping[str, str] | None = None,
               hostname: str | None = None) -> BrokerConfig:
    """The config alone (see parse_command)."""
    return parse_command(argv, environ, hostname)[0]


def parse_command(argv: list[str], environ: Mapping[str, str] | None = None,
                  hostname: str | None = None) -> tuple[BrokerConfig, argparse.Namespace]:
    """The config the flags, KANAL_* variables and --config file describe, and the parsed flags (for the
    log settings); ServerFlagError or KanalError(INVALID_CONFIG), one line, when anything is wrong,
    including an advertised host that does not resolve within --resolve-wait-ms-max."""
    environ = os.environ if environ is None else environ
    args = parse_layered(build_parser(), argv, environ, hostname or hostname_from(environ))
    try:
        security = listener_security_from_args(args, node_listener=bool(args.inter_node_listen))
    except ListenerSecurityError as exc:
        raise ServerFlagError(str(exc)) from None
    config = BrokerConfig(
        broker_id=args.id,
        listen=args.listen,
        advertise=args.advertise,
        inter_node_listen=args.inter_node_listen,
        inter_node_advertise=args.inter_node_advertise,
        kafka_listen=args.kafka_listen,
        schema_registry_listen=args.schema_registry_listen,
        kafka_advertise=args.kafka_advertise,
        kafka_request_bytes_max=args.kafka_request_bytes_max,
        kafka_requests_in_flight_max=args.kafka_requests_in_flight_max,
        kafka_batch_cache_bytes=args.kafka_batch_cache_bytes,
        controllers=tuple(c.strip() for c in args.controllers.split(",") if c.strip()),
        data_dir=args.data_dir,
        rack=rack_of(args.rack, args.rack_file),
        replica_selector=args.replica_selector,
        remote_storage=args.remote_storage,
        remote_storage_endpoint=args.remote_storage_endpoint,
        remote_storage_region=args.remote_storage_region,
        remote_storage_access_key_id=args.remote_storage_access_key_id,
        remote_storage_secret_access_key=args.remote_storage_secret_access_key,
        remote_retry_backoff_ms_max=args.remote_retry_backoff_ms_max,
        remote_fetch_cache_bytes=args.remote_fetch_cache_bytes,
        remote_fetch_chunk_bytes=args.remote_fetch_chunk_bytes,
        remote_orphan_check_interval_ms=args.remote_orphan_check_interval_ms,
        remote_orphan_grace_ms=args.remote_orphan_grace_ms,
        metrics_listen=_metrics_flag(args.metrics, args.listen),
        heartbeat_interval_ms=args.heartbeat_interval_ms,
        replica_lag_ms_max=args.replica_lag_ms_max,
        ready_isr_wait_ms_max=args.ready_isr_wait_ms_max,
        replica_fetch_wait_ms_max=args.replica_fetch_wait_ms_max,
        metadata_fetch_bytes_max=args.metadata_fetch_bytes_max,
        offsets_topic_partitions=args.offsets_topic_partitions,
        offsets_topic_replication_factor=args.offsets_topic_replication_factor,
        transaction_state_partitions=args.transaction_state_partitions,
        transaction_state_replication_factor=args.transaction_state_replication_factor,
        transaction_timeout_ms_max=args.transaction_timeout_ms_max,
        group_session_timeout_ms_min=args.group_session_timeout_ms_min,
        group_session_timeout_ms_max=args.group_session_timeout_ms_max,
        group_initial_rebalance_delay_ms=args.group_initial_rebalance_delay_ms,
        offsets_retention_ms=args.offsets_retention_ms,
        offsets_retention_check_interval_ms=args.offsets_retention_check_interval_ms,
        producer_id_expiration_ms=args.producer_id_expiration_ms,
        produce_timeout_ms_default=args.produce_timeout_ms_default,
        authorizer=authorizer_config_from(
            args.authorizer, args.super_users, args.allow_everyone_if_no_acl_found
        ),
        security=security,
        quota_window_num=args.quota_window_num,
        quota_window_size_ms=args.quota_window_size_ms,
    )
    advertised_host, _ = parse_endpoint(config.advertised)
    check_resolves("--advertise", advertised_host, args.resolve_wait_ms_max)
    if config.kafka_listen:
        check_resolves("--kafka-advertise", parse_endpoint(config.kafka_advertised)[0],
                       args.resolve_wait_ms_max)
    if config.inter_node_listen:
        check_resolves("--inter-node-advertise", parse_endpoint(config.inter_node_advertised)[0],
                       args.resolve_wait_ms_max)
    return config, args


def _metrics_flag(flag: str, listen: str) -> str:
    try:
        where = metrics_listen(flag, listen, BROKER_METRICS_PORT_DEFAULT)
    except MetricsFlagError as exc:
        raise ServerFlagError(str(exc)) from None
    return "" if where is None else str(where)


def rack_of(rack: str, rack_file: str) -> str:
    """--rack, or the first line of --rack-file; ServerFlagError when both are given or the file is unusable
    (missing: the init container that writes it did not run, so the broker must not start rackless)."""
    if not rack_file:
        return rack
    if rack:
        raise ServerFlagError("give --rack or --rack-file, not both")
    try:
        lines = Path(rack_file).read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ServerFlagError(
            f"--rack-file {rack_file}: cannot read it: {getattr(exc, 'strerror', exc)}"
        ) from None
    value = lines[0].strip() if lines else ""
    if any(c.isspace() or not c.isprintable() for c in value) or len(value) > 253:
        raise ServerFlagError(f"--rack-file {rack_file}: not a rack name: {value[:60]!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    try:
        config, args = parse_command(sys.argv[1:] if argv is None else argv)
    except ServerFlagError as exc:
        return command_error("kanal broker: error", str(exc), exit_status=EXIT_USAGE)
    except KanalError as exc:
        return command_error("kanal broker: error", exc.message, exc.code, EXIT_USAGE)
    setup_logging(args.log_format, args.log_level, f"broker-{config.broker_id}")
    logging.getLogger("kanal.broker").info("%s", keep_freed_memory())
    try:
        # Opening the data directory (meta.properties: another node's disk) can refuse before any start.
        server = BrokerServer(config)
    except KanalError as exc:
        return command_error("kanal broker: could not start", str(exc), exc.code, EXIT_STARTUP_FAILED)
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())
    try:
        server.start()
    except KanalError as exc:
        server.stop(controlled=False)
        return command_error("kanal broker: could not start", str(exc), exc.code, EXIT_STARTUP_FAILED)
    stopping.wait()
    server.stop()
    return EXIT_OK
