"""ControllerConfig: one controller process's settings, typed and validated, and the `kanal controller` flags.

Every field carries its unit in its name, a default and bounds; `ControllerConfig(...)` checks them and
the relations between them (for example the Raft heartbeat must be well below the election timeout) and
raises ControllerConfigError with a one-line message. `parse_controller_args(argv)` builds one from the
command line; unknown flags and bad values are ConfigErrors too, so `kanal controller` can print one line
and exit with status 2.

Durability: the metadata log is fsynced before any write is acknowledged (group commit: one fsync for
every batch applied together), so a machine crash cannot lose an acknowledged write on this controller.
The Raft journal and term/vote are fsynced before this controller acknowledges an entry or a vote
(raft_journal.py, raft_durability.py), so committed entries survive a power loss of every controller.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kanal.metadata.authorizer import AuthorizerConfig, authorizer_config_from
from kanal.net.host_port import HostPortError, parse_host_port
from kanal.raft.metadata_snapshots import (
    METADATA_RETENTION_BYTES_DEFAULT,
    METADATA_RETENTION_MS_DEFAULT,
    SNAPSHOT_INTERVAL_BYTES_DEFAULT,
    SNAPSHOT_INTERVAL_MS_DEFAULT,
    SNAPSHOTS_RETAINED_DEFAULT,
    SnapshotSettings,
)
from kanal.security.authorizer_flags import add_authorizer_flags
from kanal.security.listener_security import (
    ListenerSecurity,
    ListenerSecurityError,
    add_listener_security_flags,
    listener_security_from_args,
)
from kanal.server.flags import (
    ServerFlagError,
    add_server_flags,
    check_resolves,
    hostname_from,
    integer,
    parse_layered,
)
from kanal.server.metrics_endpoint import CONTROLLER_METRICS_PORT_DEFAULT, MetricsFlagError, metrics_listen
from kanal.v1.error import ConfigError, KanalError

# Voters in the quorum: 1 (a development controller) .. 7 (more only slows every commit down).
VOTERS_MAX = 7
# pysyncobj's leaderFallbackTimeout, in maximal election timeouts (see leader_fallback_timeout_ms).
LEADER_FALLBACK_ELECTION_TIMEOUTS = 2
_CLUSTER_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
# A flag or setting is missing, unknown or out of bounds: the one ConfigError (its message is one line).
ControllerConfigError = ConfigError


@dataclass(frozen=True, slots=True)
class Address:
    """host:port, validated (host: a name, an IPv4 address, or [IPv6]; port 1..65535)."""

    host: str
    port: int

    @classmethod
    def parse(cls, text: str, what: str) -> Address:
        try:
            host, port = parse_host_port(text)
        except HostPortError as exc:
            raise ControllerConfigError(f"{what}: {exc}") from None
        return cls(host, port)

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Voter:
    """One controller of the quorum: its id, its Raft (pysyncobj) address and its gRPC endpoint."""

    controller_id: int
    raft: Address
    grpc: Address

    @classmethod
    def parse(cls, text: str) -> Voter:
        parts = text.split("=")
        if len(parts) != 3 or not parts[0].strip().isdigit():
            raise ControllerConfigError(
                f"--peers: expected ID=RAFTHOST:RAFTPORT=GRPCHOST:GRPCPORT, got {text!r}"
            )
        return cls(
            int(parts[0]),
            Address.parse(parts[1].strip(), f"--peers {parts[0]} raft"),
            Address.parse(parts[2].strip(), f"--peers {parts[0]} grpc"),
        )

    def __str__(self) -> str:
        return f"{self.controller_id}={self.raft}={self.grpc}"


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """Settings of one controller. Times in milliseconds, sizes in bytes."""

    # This controller's id; must be one of `voters`. 0 .. 2^31-1.
    controller_id: int
    # gRPC listener (bind address, e.g. 0.0.0.0:9091 in a pod). The endpoint other processes use (the one
    # it advertises) is this voter's `grpc` address in `voters`.
    listen: Address
    # Raft address the other voters dial (advertised); must equal this voter's `raft` in `voters`.
    raft: Address
    # Every voter of the quorum, this one included, 1 .. VOTERS_MAX, distinct ids and addresses.
    voters: tuple[Voter, ...]
    # Holds `__cluster_metadata-0/` (the metadata log) and `raft/` (pysyncobj's journal and dump).
    data_dir: Path
    # Shared secret of the quorum: encrypts and authenticates Raft traffic (pysyncobj `password`).
    # None: Raft traffic is plain and unauthenticated (pysyncobj unpickles what it receives), so the
    # Raft port must then only be reachable by the other controllers.
    cluster_secret: str | None = field(default=None, repr=False)
    # The cluster id the first active controller records in a metadata log that has none
    # (kanal.metadata.cluster_identity); "" (the default): a random one. 1..64 of [A-Za-z0-9._-]. Give it
    # only to recover a lost quorum under its old id on purpose: a constant reused by a quorum started
    # afresh would defeat the brokers' check that their disks belong to this cluster.
    cluster_id: str = ""
    # A broker without a heartbeat for longer than this is fenced. 100 .. 600,000 (KRaft: 9,000); above
    # leader_fallback_timeout_ms + election_timeout_ms_max (6 x election_timeout_ms). A new active
    # controller starts every broker's session when it takes over.
    session_timeout_ms: int = 9_000
    # How often the active controller looks for expired sessions. 10 .. 10,000, < session timeout.
    session_check_interval_ms: int = 100
    # Automatic preferred-leader election (Kafka's auto.leader.rebalance.enable): every
    # leader_imbalance_check_interval_ms the active controller moves leadership back to preferred replicas
    # (live and in the ISR only) of each broker whose share of misled partitions is above
    # leader_imbalance_per_broker_percentage (kanal.metadata.leader_balance). Interval 100 .. 10^9
    # (Kafka: 300,000); percentage 0 .. 100 (Kafka: 10).
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_ms: int = 300_000
    leader_imbalance_per_broker_percentage: int = 10
    # Raft election timeout: a follower that hears nothing from the leader for a random time in
    # [election_timeout_ms, 2 * election_timeout_ms] starts an election. 100 .. 60,000.
    election_timeout_ms: int = 500
    # Raft heartbeat (append-entries) period. 5 .. election_timeout_ms / 3 (pysyncobj's rule).
    raft_heartbeat_interval_ms: int = 50
    # Upper bound on a write's wait for its commit, and on a forwarded call; the caller's gRPC deadline
    # shortens it. 100 .. 120,000.
    request_timeout_ms: int = 5_000
    # Raft entries proposed and not yet committed, at most; decisions taken meanwhile wait in the outbox
    # and go together as the next entry (group commit, active_controller.py). 2: replication stays busy
    # and entries carry the most decisions each (the least Raft work per write: followers' CPU per write
    # fell by about a third against 16, benchmarks/controller_bench.py --admin-vs-pysyncobj). 1 .. 1,024.
    inflight_proposals_max: int = 2
    # Largest metadata batch (one Raft entry, one RecordBatch) a decision may produce. A 10,000-partition
    # topic is about 0.7 MB. 64 KiB .. 3 MiB: a FetchMetadata reply holds at least one batch and must stay
    # under gRPC's default 4 MiB receive limit.
    metadata_batch_bytes_max: int = 3 * 1024 * 1024
    # pysyncobj compacts its journal into a dump (a metadata snapshot) after this many entries ...
    raft_compaction_entries: int = 20_000
    # ... or after this long. The dump is written in pysyncobj's thread, so it is kept rare. 1,000 .. 10^9.
    raft_compaction_interval_ms: int = 600_000
    # FetchMetadata long polls wait at most this long. 0 .. 60,000.
    fetch_wait_ms_max: int = 10_000
    # Metadata log segments roll at this size (KRaft metadata.log.segment.bytes). 128 KiB .. 1 GiB, and
    # above twice --metadata-batch-bytes-max (a stored batch is at most that). Retention deletes whole
    # segments, so the log start moves in steps of this.
    metadata_log_segment_bytes: int = 64 * 1024 * 1024
    # A metadata snapshot (a snapshot file + pysyncobj's dump) is taken after this many bytes of metadata
    # batches since the last one (metadata.log.max.record.bytes.between.snapshots). 1 KiB .. 2^40.
    metadata_snapshot_interval_bytes: int = SNAPSHOT_INTERVAL_BYTES_DEFAULT
    # ... or this long after the last one when a record came in since (metadata.log.max.snapshot.interval.ms).
    # 100 .. 10^10.
    metadata_snapshot_interval_ms: int = SNAPSHOT_INTERVAL_MS_DEFAULT
    # Snapshot files kept: the newest this many, plus the oldest one at or past the log start. 1 .. 100.
    metadata_snapshots_retained: int = SNAPSHOTS_RETAINED_DEFAULT
    # Metadata log segments wholly below the newest snapshot are deleted once their newest record is older
    # than this (metadata.max.retention.ms, 7 days) ... 0 .. 10^12.
    metadata_retention_ms: int = METADATA_RETENTION_MS_DEFAULT
    # ... or while the log is larger than this (metadata.max.retention.bytes); -1: no size limit.
    # -1 .. 2^50.
    metadata_retention_bytes: int = METADATA_RETENTION_BYTES_DEFAULT
    # gRPC server threads (long polls hold one each). 4 .. 256.
    grpc_threads: int = 32
    # Python logging level name.
    log_level: str = "INFO"
    # Raft bind address when it differs from `raft` (a pod binds 0.0.0.0:9093 and is dialled by its DNS
    # name); None: bind `raft`.
    raft_listen: Address | None = None
    # stdout log lines: "text" or "json" (one object per line, kanal.server.logs).
    log_format: str = "text"
    # Prometheus endpoint HOST:PORT (controller_metrics.py), e.g. 0.0.0.0:9404 in a pod; None: off. `kanal
    # controller` fills it in: port 9405 (kanal.server.metrics_endpoint) on the --listen host, unless
    # --metrics
    # moves it or says `off`.
    metrics_listen: Address | None = None
    # ACL checks on every call (--authorizer, --super-users, --allow-everyone-if-no-acl-found); off by
    # default. On, broker calls need the broker's own principal: brokers must authenticate (TLS).
    authorizer: AuthorizerConfig = field(default_factory=AuthorizerConfig)
    # TLS, client certificates and authentication of the gRPC listener, and how this controller dials
    # the others (kanal.security.listener_security); default: plaintext, ANONYMOUS. Raft traffic is not gRPC:
    # `cluster_secret` protects it.
    security: ListenerSecurity = field(default_factory=ListenerSecurity)

    def __post_init__(self) -> None:
        _bound("--id", self.controller_id, 0, 2**31 - 1)
        if not 1 <= len(self.voters) <= VOTERS_MAX:
            raise ControllerConfigError(f"--peers: 1 .. {VOTERS_MAX} voters needed, got {len(self.voters)}")
        ids = [v.controller_id for v in self.voters]
        if len(set(ids)) != len(ids):
            raise ControllerConfigError(f"--peers: controller ids must be distinct, got {ids}")
        for what, addresses in (
            ("raft", [v.raft for v in self.voters]),
            ("grpc", [v.grpc for v in self.voters]),
        ):
            if len(set(addresses)) != len(addresses):
                raise ControllerConfigError(f"--peers: {what} addresses must be distinct")
        me = self.voter(self.controller_id)
        if me is None:
            raise ControllerConfigError(f"--peers does not list this controller (--id {self.controller_id})")
        if me.raft != self.raft:
            raise ControllerConfigError(f"--raft {self.raft} differs from --peers entry {me}")
        if self.cluster_secret is not None and not 8 <= len(self.cluster_secret) <= 1024:
            raise ControllerConfigError("--cluster-secret must be 8 .. 1024 characters")
        if self.cluster_id and not _CLUSTER_ID.match(self.cluster_id):
            raise ControllerConfigError(
                f"--cluster-id must be 1..64 of [A-Za-z0-9._-], got {self.cluster_id!r}"
            )
        _bound("--session-timeout-ms", self.session_timeout_ms, 100, 600_000)
        _bound("--session-check-interval-ms", self.session_check_interval_ms, 10, 10_000)
        if self.session_check_interval_ms >= self.session_timeout_ms:
            raise ControllerConfigError("--session-check-interval-ms must be below --session-timeout-ms")
        _bound("--leader-imbalance-check-interval-ms", self.leader_imbalance_check_interval_ms, 100, 10**9)
        _bound(
            "--leader-imbalance-per-broker-percentage", self.leader_imbalance_per_broker_percentage, 0, 100
        )
        _bound("--election-timeout-ms", self.election_timeout_ms, 100, 60_000)
        _bound("--raft-heartbeat-interval-ms", self.raft_heartbeat_interval_ms, 5, 60_000)
        if self.raft_heartbeat_interval_ms * 3 >= self.election_timeout_ms:
            raise ControllerConfigError(
                "--raft-heartbeat-interval-ms must be below --election-timeout-ms / 3"
            )
        if self.leader_fallback_timeout_ms + self.election_timeout_ms_max >= self.session_timeout_ms:
            # A leader cut off from the other controllers (or paused and resumed) answers broker heartbeats
            # as active until pysyncobj makes it step down, leader_fallback_timeout_ms after it last heard
            # a majority; a new leader is elected no sooner than election_timeout_ms after that and starts
            # every broker's session when it takes over. Brokers must be left time to reach it.
            per_t = 2 * (LEADER_FALLBACK_ELECTION_TIMEOUTS + 1)  # the sum, in units of --election-timeout-ms
            raise ControllerConfigError(
                f"--session-timeout-ms ({self.session_timeout_ms}) must exceed the leader fallback timeout "
                f"({self.leader_fallback_timeout_ms} = {2 * LEADER_FALLBACK_ELECTION_TIMEOUTS} x "
                f"--election-timeout-ms) plus the longest election timeout ({self.election_timeout_ms_max} = "
                "2 x --election-timeout-ms), or a controller that lost the quorum keeps answering "
                "heartbeats while the new one fences the brokers; raise --session-timeout-ms above "
                f"{self.leader_fallback_timeout_ms + self.election_timeout_ms_max} or lower "
                f"--election-timeout-ms below {ceil_div(self.session_timeout_ms, per_t)}"
            )
        _bound("--request-timeout-ms", self.request_timeout_ms, 100, 120_000)
        _bound("--inflight-proposals-max", self.inflight_proposals_max, 1, 1_024)
        _bound("--metadata-batch-bytes-max", self.metadata_batch_bytes_max, 64 * 1024, 3 * 1024 * 1024)
        _bound("--raft-compaction-entries", self.raft_compaction_entries, 10, 10**9)
        _bound("--raft-compaction-interval-ms", self.raft_compaction_interval_ms, 1_000, 10**9)
        _bound("--fetch-wait-ms-max", self.fetch_wait_ms_max, 0, 60_000)
        _bound("--metadata-log-segment-bytes", self.metadata_log_segment_bytes, 128 * 1024, 1 << 30)
        if self.metadata_log_segment_bytes <= 2 * self.metadata_batch_bytes_max:
            raise ControllerConfigError(
                f"--metadata-log-segment-bytes ({self.metadata_log_segment_bytes}) must exceed twice "
                f"--metadata-batch-bytes-max ({self.metadata_batch_bytes_max}): a stored batch may be that "
                "big"
            )
        _bound("--metadata-snapshot-interval-bytes", self.metadata_snapshot_interval_bytes, 1024, 1 << 40)
        _bound("--metadata-snapshot-interval-ms", self.metadata_snapshot_interval_ms, 100, 10**10)
        _bound("--metadata-snapshots-retained", self.metadata_snapshots_retained, 1, 100)
        _bound("--metadata-retention-ms", self.metadata_retention_ms, 0, 10**12)
        _bound("--metadata-retention-bytes", self.metadata_retention_bytes, -1, 1 << 50)
        _bound("--grpc-threads", self.grpc_threads, 4, 256)
        if self.log_format not in ("text", "json"):
            raise ControllerConfigError(f"--log-format must be text or json, got {self.log_format!r}")
        if self.log_level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise ControllerConfigError(
                f"--log-level must be DEBUG, INFO, WARNING or ERROR, got {self.log_level!r}"
            )

    # -- derived settings ---------------------------------------------------------------------------

    @property
    def election_timeout_ms_max(self) -> int:
        return 2 * self.election_timeout_ms

    @property
    def leader_fallback_timeout_ms(self) -> int:
        """A leader that hears from no majority for this long steps down (pysyncobj default: 30 s).
        Two maximal election timeouts: long enough not to flap, short enough that writes sent to a cut-off
        leader fail fast with CONTROLLER_NOT_AVAILABLE, and that it stops answering broker heartbeats as
        active well before a new leader could fence a broker (the relation with session_timeout_ms is
        checked in __post_init__)."""
        return LEADER_FALLBACK_ELECTION_TIMEOUTS * self.election_timeout_ms_max

    @property
    def me(self) -> Voter:
        voter = self.voter(self.controller_id)
        if voter is None:  # __post_init__ checked it; this keeps mypy and -O honest
            raise ControllerConfigError(f"controller {self.controller_id} is not a voter")
        return voter

    @property
    def others(self) -> tuple[Voter, ...]:
        return tuple(v for v in self.voters if v.controller_id != self.controller_id)

    def voter(self, controller_id: int) -> Voter | None:
        for v in self.voters:
            if v.controller_id == controller_id:
                return v
        return None

    def voter_by_raft(self, raft_address: str) -> Voter | None:
        for v in self.voters:
            if str(v.raft) == raft_address:
                return v
        return None

    @property
    def raft_bind(self) -> Address:
        """The address pysyncobj binds: --raft-listen, else the advertised --raft."""
        return self.raft_listen if self.raft_listen is not None else self.raft

    @property
    def snapshot_settings(self) -> SnapshotSettings:
        return SnapshotSettings(
            interval_bytes=self.metadata_snapshot_interval_bytes,
            interval_ms=self.metadata_snapshot_interval_ms,
            retained=self.metadata_snapshots_retained,
            retention_ms=self.metadata_retention_ms,
            retention_bytes=None if self.metadata_retention_bytes < 0 else self.metadata_retention_bytes,
        )

    @property
    def raft_dir(self) -> Path:
        return self.data_dir / "raft"

    def __repr__(self) -> str:
        secret = "set" if self.cluster_secret else "none"
        return (
            f"<ControllerConfig id={self.controller_id} listen={self.listen} raft={self.raft} "
            f"voters={[str(v) for v in self.voters]} data_dir={self.data_dir} secret={secret}>"
        )


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _bound(flag: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise ControllerConfigError(f"{flag} must be in [{low}, {high}], got {value}")


# -- command line -----------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting, so errors stay one line."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise ControllerConfigError(message)


# Settings come from flags, KANAL_* variables and --config FILE (kanal.server.flags): every flag below
# is also KANAL_<FLAG> and a `flag = value` key of the file.


def build_parser() -> argparse.ArgumentParser:
    d = ControllerConfig.__dataclass_fields__
    p = _Parser(
        prog="kanal controller",
        description="Run one controller of the kanal metadata quorum (Raft on pysyncobj).",
        allow_abbrev=False,
    )
    p.add_argument(
        "--id", type=integer("--id"), help="this controller's id (one of --peers; or --id-from-hostname)"
    )
    p.add_argument("--listen", required=True, help="gRPC listen (bind) address HOST:PORT; the address it "
                                                   "advertises is its entry in --peers")
    p.add_argument(
        "--raft", help="Raft address HOST:PORT the peers dial (default: this id's entry in --peers)"
    )
    p.add_argument(
        "--raft-listen", help="Raft bind address HOST:PORT when it differs from --raft (0.0.0.0:9093)"
    )
    p.add_argument(
        "--peers",
        required=True,
        help="every voter, this one included: ID=RAFTHOST:RAFTPORT=GRPCHOST:GRPCPORT,...",
    )
    p.add_argument("--data-dir", required=True, help="directory for the metadata log and Raft files")
    secret = p.add_mutually_exclusive_group()
    secret.add_argument("--cluster-secret", help="shared Raft secret (visible in ps; prefer the file)")
    secret.add_argument("--cluster-secret-file", help="file whose first line is the shared Raft secret")
    p.add_argument("--cluster-id", default=d["cluster_id"].default)
    for flag, name in (
        ("--session-timeout-ms", "session_timeout_ms"),
        ("--session-check-interval-ms", "session_check_interval_ms"),
        ("--leader-imbalance-check-interval-ms", "leader_imbalance_check_interval_ms"),
        ("--leader-imbalance-per-broker-percentage", "leader_imbalance_per_broker_percentage"),
        ("--election-timeout-ms", "election_timeout_ms"),
        ("--raft-heartbeat-interval-ms", "raft_heartbeat_interval_ms"),
        ("--request-timeout-ms", "request_timeout_ms"),
        ("--inflight-proposals-max", "inflight_proposals_max"),
        ("--metadata-batch-bytes-max", "metadata_batch_bytes_max"),
        ("--raft-compaction-entries", "raft_compaction_entries"),
        ("--raft-compaction-interval-ms", "raft_compaction_interval_ms"),
        ("--fetch-wait-ms-max", "fetch_wait_ms_max"),
        ("--grpc-threads", "grpc_threads"),
        ("--metadata-log-segment-bytes", "metadata_log_segment_bytes"),
        ("--metadata-snapshot-interval-bytes", "metadata_snapshot_interval_bytes"),
        ("--metadata-snapshot-interval-ms", "metadata_snapshot_interval_ms"),
        ("--metadata-snapshots-retained", "metadata_snapshots_retained"),
        ("--metadata-retention-ms", "metadata_retention_ms"),
        ("--metadata-retention-bytes", "metadata_retention_bytes"),
    ):
        default = d[name].default
        p.add_argument(flag, dest=name, type=integer(flag), default=default, help=f"default {default}")
    p.add_argument("--auto-leader-rebalance-enable", choices=("true", "false"), default="true",
                   help="move leadership back to preferred replicas automatically (default true)")
    p.add_argument("--log-level", default=d["log_level"].default, help="DEBUG, INFO, WARNING or ERROR")
    p.add_argument("--metrics", default="",
                   help=f"HOST:PORT of the Prometheus endpoint, or 'off' (default: the --listen host, port "
                        f"{CONTROLLER_METRICS_PORT_DEFAULT})")
    add_authorizer_flags(p)
    add_listener_security_flags(p)
    add_server_flags(p)
    return p


def _metrics_flag(flag: str, listen: str) -> Address | None:
    try:
        where = metrics_listen(flag, listen, CONTROLLER_METRICS_PORT_DEFAULT)
    except MetricsFlagError as exc:
        raise ControllerConfigError(str(exc)) from None
    return None if where is None else Address.parse(str(where), "--metrics")


def parse_controller_args(argv: Sequence[str], environ: Mapping[str, str] | None = None,
                          hostname: str | None = None) -> ControllerConfig:
    """The config the flags, KANAL_* variables (`environ`, default os.environ) and --config file describe;
    ControllerConfigError (one line) when they are wrong, including an advertised address of this
    controller (its --peers entry) that does not resolve within --resolve-wait-ms-max."""
    environ = os.environ if environ is None else environ
    try:
        args = parse_layered(build_parser(), argv, environ, hostname or hostname_from(environ))
    except ServerFlagError as exc:
        raise ControllerConfigError(str(exc)) from None
    voters = tuple(Voter.parse(item) for item in args.peers.split(",") if item.strip())
    me = next((v for v in voters if v.controller_id == args.id), None)
    if me is None:
        listed = sorted(v.controller_id for v in voters)
        raise ControllerConfigError(
            f"--peers does not list this controller (--id {args.id}); the quorum's ids are {listed}"
        )
    raft = Address.parse(args.raft, "--raft") if args.raft else me.raft
    secret = args.cluster_secret
    if args.cluster_secret_file is not None:
        try:
            secret = Path(args.cluster_secret_file).read_text().splitlines()[0].strip()
        except (OSError, IndexError) as exc:
            raise ControllerConfigError(f"--cluster-secret-file: cannot read a secret: {exc}") from None
    try:
        authorizer = authorizer_config_from(
            args.authorizer, args.super_users, args.allow_everyone_if_no_acl_found
        )
        security = listener_security_from_args(args)
    except KanalError as exc:
        raise ControllerConfigError(exc.message) from None
    except ListenerSecurityError as exc:
        raise ControllerConfigError(str(exc)) from None
    config = ControllerConfig(
        authorizer=authorizer,
        security=security,
        controller_id=args.id,
        listen=Address.parse(args.listen, "--listen"),
        raft=raft,
        raft_listen=Address.parse(args.raft_listen, "--raft-listen") if args.raft_listen else None,
        log_format=args.log_format,
        voters=voters,
        data_dir=Path(args.data_dir),
        cluster_secret=secret,
        cluster_id=args.cluster_id,
        session_timeout_ms=args.session_timeout_ms,
        session_check_interval_ms=args.session_check_interval_ms,
        auto_leader_rebalance_enable=args.auto_leader_rebalance_enable == "true",
        leader_imbalance_check_interval_ms=args.leader_imbalance_check_interval_ms,
        leader_imbalance_per_broker_percentage=args.leader_imbalance_per_broker_percentage,
        election_timeout_ms=args.election_timeout_ms,
        raft_heartbeat_interval_ms=args.raft_heartbeat_interval_ms,
        request_timeout_ms=args.request_timeout_ms,
        inflight_proposals_max=args.inflight_proposals_max,
        metadata_batch_bytes_max=args.metadata_batch_bytes_max,
        raft_compaction_entries=args.raft_compaction_entries,
        raft_compaction_interval_ms=args.raft_compaction_interval_ms,
        fetch_wait_ms_max=args.fetch_wait_ms_max,
        grpc_threads=args.grpc_threads,
        metadata_log_segment_bytes=args.metadata_log_segment_bytes,
        metadata_snapshot_interval_bytes=args.metadata_snapshot_interval_bytes,
        metadata_snapshot_interval_ms=args.metadata_snapshot_interval_ms,
        metadata_snapshots_retained=args.metadata_snapshots_retained,
        metadata_retention_ms=args.metadata_retention_ms,
        metadata_retention_bytes=args.metadata_retention_bytes,
        log_level=args.log_level,
        metrics_listen=_metrics_flag(args.metrics, args.listen),
    )
    for what, address in (("--peers raft", config.me.raft), ("--peers grpc", config.me.grpc)):
        try:
            check_resolves(f"{what} address of controller {config.controller_id}", address.host,
                           args.resolve_wait_ms_max)
        except ServerFlagError as exc:
            raise ControllerConfigError(str(exc)) from None
    return config
