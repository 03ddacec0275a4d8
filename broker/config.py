"""BrokerConfig: a broker process's settings, typed and validated at start-up.

Every field names its unit; bounds are checked in __post_init__ and a bad value stops the process with
one clear line (INVALID_CONFIG). Topic-level settings (retention, segment size, min.insync.replicas, ...)
are not here: they come from the metadata log per topic (kanal.metadata.topic_config).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kanal.broker.quota_sampler import QuotaWindows
from kanal.broker.read_replica import REPLICA_SELECTORS
from kanal.metadata.authorizer import AuthorizerConfig
from kanal.net.host_port import HostPortError, parse_host_port
from kanal.security.listener_security import ListenerSecurity
from kanal.v1.error import ErrorCode, KanalError

# One attempt of a call at one controller waits at most this long (unless the call says less: heartbeats
# wait one heartbeat interval, metadata long polls their wait plus METADATA_FETCH_REPLY_MARGIN_MS), so a
# controller that hangs without closing its connections holds a call no longer: long enough for a Raft
# commit and an fsync on a busy machine, short beside a session timeout.
CONTROLLER_ATTEMPT_TIMEOUT_MS_MAX = 2_000
# A metadata long poll that got no reply this long after its wait ended is given up at that controller.
METADATA_FETCH_REPLY_MARGIN_MS = 1_000


def parse_endpoint(text: str) -> tuple[str, int]:
    """'host:port' -> (host, port); INVALID_CONFIG when malformed."""
    try:
        return parse_host_port(text)
    except HostPortError as exc:
        raise KanalError(ErrorCode.INVALID_CONFIG, f"{text!r} is not host:port: {exc}") from None


@dataclass(frozen=True)
class BrokerConfig:
    # This broker's id, unique in the cluster.
    broker_id: int
    # host:port the gRPC listener binds (0.0.0.0:9092 in a pod).
    listen: str
    # host:port of every controller's gRPC listener.
    controllers: tuple[str, ...]
    # Where partition logs live (one directory per partition).
    data_dir: Path
    # Rack for rack-aware placement and follower fetching; empty when unknown.
    rack: str = ""
    # Which replica a consumer that names its rack reads from (read_replica.py; Kafka's
    # replica.selector.class): "leader" (the default, as Kafka's) or "rack-aware".
    replica_selector: str = "leader"
    # host:port clients and other brokers dial, registered with the controllers; empty: `listen`.
    advertise: str = ""
    # host:port of a second gRPC listener, for the other nodes only: TLS with client certificates always
    # required, whatever the client listener's --tls-client-auth (Kafka's inter-broker listener). Other
    # brokers dial it; `listen` can then let password clients in without a certificate. Empty: none,
    # `listen` serves nodes and clients alike.
    inter_node_listen: str = ""
    # host:port other brokers dial for it, registered with the controllers; empty: `inter_node_listen`.
    inter_node_advertise: str = ""
    # host:port of the Kafka wire-protocol listener (broker/kafka/); empty: none. Same TLS as `listen`;
    # SASL (SCRAM, PLAIN over TLS) as Kafka's SASL_PLAINTEXT / SASL_SSL listeners when passwords are on.
    kafka_listen: str = ""
    # host:port Kafka clients dial for it, registered with the controllers; empty: `kafka_listen`.
    kafka_advertise: str = ""
    # host:port of the schema registry's REST listener (Confluent's API: schema_registry_http.py); empty:
    # none. Same TLS as `listen`; HTTP basic credentials are SCRAM passwords when passwords are on.
    schema_registry_listen: str = ""
    # Largest Kafka request frame the listener reads (socket.request.max.bytes): a longer length prefix
    # closes the connection before anything is read.
    kafka_request_bytes_max: int = 100 << 20
    # Requests one Kafka connection may have in flight; reading pauses beyond it (Kafka's broker reads one
    # request per connection at a time; clients pipeline up to max.in.flight.requests.per.connection).
    kafka_requests_in_flight_max: int = 64
    # Bytes of recent batches kept in Kafka's form (broker/kafka/batch_cache.py), so consumers near the
    # tail are served without a transcode; 0 turns the cache off.
    kafka_batch_cache_bytes: int = 64 << 20
    # Tiered storage (issue 44, remote_log_manager.py): where closed segments of topics with
    # remote.storage.enable go, `s3://bucket/prefix` or `file:///dir`; empty: none (such topics then keep
    # every segment locally). The same URL on every broker of a cluster.
    remote_storage: str = ""
    # An S3-compatible endpoint (`http://host:port` or https) for s3:// storage; empty: AWS's.
    remote_storage_endpoint: str = ""
    # The S3 region; empty: the AWS_REGION / AWS_DEFAULT_REGION variable, else us-east-1.
    remote_storage_region: str = ""
    # S3 credentials; empty: the standard AWS_* variables. Never printed (repr).
    remote_storage_access_key_id: str = field(default="", repr=False)
    remote_storage_secret_access_key: str = field(default="", repr=False)
    # Longest wait between retries of a failed upload (the wait doubles from 100 ms up to it).
    remote_retry_backoff_ms_max: int = 30_000
    # Bytes of remote segment data kept in memory for consumer reads (remote_fetch.py), and the size of
    # one ranged read (the cache's unit: a sequential reader fetches each chunk once).
    remote_fetch_cache_bytes: int = 64 << 20
    remote_fetch_chunk_bytes: int = 4 << 20
    # How often a partition's leader lists its remote objects for orphans (and the lowest-id live broker
    # the whole cluster's, for deleted topics' objects); never at start-up.
    remote_orphan_check_interval_ms: int = 600_000
    # An object no record names is an orphan only once it is this old (an upload in flight elsewhere, an
    # image not applied here yet); objects wholly below the remote log start go at once.
    remote_orphan_grace_ms: int = 600_000
    # host:port for the Prometheus metrics endpoint; empty disables it. `kanal broker` fills it in: port 9404
    # (kanal.server.metrics_endpoint) on the --listen host, unless --metrics moves it or says `off`.
    metrics_listen: str = ""
    # Heartbeat period to the active controller; also the deadline of one heartbeat attempt at one
    # controller (two for the whole heartbeat). At most 1/4 of the controllers' session timeout
    # (check_heartbeat_fits_session, checked at registration).
    heartbeat_interval_ms: int = 1000
    # A follower out of date for longer than this is removed from the ISR (replica.lag.time.max.ms).
    replica_lag_ms_max: int = 10_000
    # Readiness (broker/readiness.py) waits until this broker is back in the ISR of every partition it
    # hosts, at most this long after it was caught up and unfenced; then it is ready anyway and logs why.
    # 0 .. 86,400,000 (0: do not wait for the ISRs).
    ready_isr_wait_ms_max: int = 300_000
    # Long-poll wait of follower fetches (replica.fetch.wait.max.ms).
    replica_fetch_wait_ms_max: int = 500
    # Bytes per partition a follower fetch asks for.
    replica_fetch_partition_bytes_max: int = 1 << 20
    # Long-poll wait of metadata fetches from the controller.
    metadata_fetch_wait_ms_max: int = 500
    # Bytes of metadata log one FetchMetadata asks for (whole batches; at least one batch comes whatever
    # the limit, and the controllers cap a reply at 3 MiB). Initial catch-up applies as many replies as
    # it takes to reach the log end before publishing anything (metadata_follower.py), so this bounds
    # one reply's memory, not what a broker acts on; tests lower it to force many replies.
    metadata_fetch_bytes_max: int = 8 << 20
    # Whole-call deadline of a call to the controllers (over every controller it tries); one attempt at
    # one controller waits at most CONTROLLER_ATTEMPT_TIMEOUT_MS_MAX of it.
    controller_request_timeout_ms: int = 5000
    # Threads serving the gRPC calls that may block on I/O elsewhere (admin calls forwarded to the
    # controller, group calls, InitProducerId). Produce and Fetch run on the server's event loop and a
    # waiting one (acks=all, long poll) holds no thread.
    request_threads: int = 32
    # The acks=all wait of a Produce that leaves timeout_ms at 0 (proto3's default): Kafka's
    # request.timeout.ms.
    produce_timeout_ms_default: int = 30_000
    # Upper bound on one fetch response, over all partitions.
    fetch_response_bytes_max: int = 50 << 20
    # Upper bound on how long a consumer long poll may wait.
    fetch_wait_ms_max: int = 30_000
    # How often retention and time-based flushes run.
    log_maintenance_interval_ms: int = 1000
    # gRPC message size limit (send and receive); must hold the largest batch plus framing.
    grpc_message_bytes_max: int = 64 << 20
    # Partitions of __consumer_offsets when this broker is the one that creates it
    # (offsets.topic.num.partitions); fixed once the topic exists.
    offsets_topic_partitions: int = 50
    # Replication factor of __consumer_offsets (offsets.topic.replication.factor). Until this many brokers
    # are live, FindCoordinator answers COORDINATOR_NOT_AVAILABLE rather than create it smaller.
    offsets_topic_replication_factor: int = 3
    # How long a commit or group-state write may wait for the ISR before it fails (retriably).
    offsets_commit_timeout_ms: int = 5000
    # Partitions of __transaction_state when this broker creates it (transaction.state.log.num.partitions);
    # fixed once the topic exists.
    transaction_state_partitions: int = 50
    # Its replication factor (transaction.state.log.replication.factor): not created with fewer live brokers.
    transaction_state_replication_factor: int = 3
    # The largest transaction timeout a producer may ask for (transaction.max.timeout.ms).
    transaction_timeout_ms_max: int = 900_000
    # Bounds on the session timeout members may ask for (group.min/max.session.timeout.ms).
    group_session_timeout_ms_min: int = 6000
    group_session_timeout_ms_max: int = 1_800_000
    # A group's first rebalance waits this long for more members (group.initial.rebalance.delay.ms).
    group_initial_rebalance_delay_ms: int = 3000
    # An Empty group's committed offsets are deleted this long after the group became Empty and the
    # offset was committed (offsets.retention.minutes, 7 days); offsets of deleted topics go at once.
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    # How often the coordinator looks for expired offsets (offsets.retention.check.interval.ms).
    offsets_retention_check_interval_ms: int = 600_000
    # A producer with no batch stored on a replica for this long is forgotten there, which bounds the
    # producer state (producer.id.expiration.ms, one day); its next batch moves it to a new epoch.
    producer_id_expiration_ms: int = 86_400_000
    # ACL checks on every call (--authorizer, --super-users, --allow-everyone-if-no-acl-found); off by
    # default: everything is allowed, as before ACLs.
    authorizer: AuthorizerConfig = field(default_factory=AuthorizerConfig)
    # TLS, client certificates and authentication of the gRPC listener, and how this broker dials the
    # controllers and the other brokers (kanal.security.listener_security); default: plaintext, ANONYMOUS.
    security: ListenerSecurity = field(default_factory=ListenerSecurity)
    # Client quota rates are measured over this many samples (quota.window.num) ...
    quota_window_num: int = 11
    # ... of this length each (quota.window.size.seconds): a rate is an average over about
    # num x size, and a throttle lasts at most that long (broker/quota_policy.py).
    quota_window_size_ms: int = 1000
    # Where the controller quorum's gRPC listeners are, parsed from `controllers`.
    controller_endpoints: tuple[tuple[str, int], ...] = field(init=False)

    @property
    def advertised(self) -> str:
        """host:port registered with the controllers: `advertise`, else `listen`."""
        return self.advertise or self.listen

    @property
    def kafka_advertised(self) -> str:
        """host:port of the Kafka listener, registered with the controllers ("" when none)."""
        return self.kafka_advertise or self.kafka_listen

    @property
    def inter_node_advertised(self) -> str:
        """host:port of the listener for other nodes, registered with the controllers ("" when none)."""
        return self.inter_node_advertise or self.inter_node_listen

    def __post_init__(self) -> None:
        _check(self.broker_id >= 0, f"broker_id must be >= 0, got {self.broker_id}")
        parse_endpoint(self.listen)
        host, _ = parse_endpoint(self.advertised)
        _check(host not in ("0.0.0.0", "::", "[::]", ""),
               f"the advertised address {self.advertised!r} is a wildcard nobody can dial: set --advertise")
        if self.metrics_listen:
            parse_endpoint(self.metrics_listen)
        _check(not self.inter_node_advertise or bool(self.inter_node_listen),
               "--inter-node-advertise needs --inter-node-listen")
        if self.inter_node_listen:
            parse_endpoint(self.inter_node_listen)
            node_host, _ = parse_endpoint(self.inter_node_advertised)
            _check(node_host not in ("0.0.0.0", "::", "[::]", ""),
                   f"the advertised inter-node address {self.inter_node_advertised!r} is a wildcard nobody "
                   "can dial: set --inter-node-advertise")
            _check(self.security.tls and self.security.node_listener,
                   "--inter-node-listen needs TLS (--tls-cert-file, --tls-key-file, --tls-ca-file): the "
                   "other nodes authenticate there by certificate")
            _check(self.inter_node_listen != self.listen, "--inter-node-listen must differ from --listen")
        _check(not self.kafka_advertise or bool(self.kafka_listen), "--kafka-advertise needs --kafka-listen")
        if self.kafka_listen:
            parse_endpoint(self.kafka_listen)
            kafka_host, _ = parse_endpoint(self.kafka_advertised)
            _check(kafka_host not in ("0.0.0.0", "::", "[::]", ""),
                   f"the advertised Kafka address {self.kafka_advertised!r} is a wildcard nobody can dial: "
                   "set --kafka-advertise")
            _check(self.kafka_listen not in (self.listen, self.inter_node_listen),
                   "--kafka-listen must differ from --listen and --inter-node-listen")
        if self.schema_registry_listen:
            parse_endpoint(self.schema_registry_listen)
            others = (self.listen, self.inter_node_listen, self.kafka_listen)
            _check(self.schema_registry_listen not in others,
                   "--schema-registry-listen must differ from the broker's other listeners")
        _check(1024 <= self.kafka_request_bytes_max <= 1 << 30,
               "kafka_request_bytes_max must be in [1024, 1073741824]")
        _check(1 <= self.kafka_requests_in_flight_max <= 1024,
               "kafka_requests_in_flight_max must be in [1, 1024]")
        _check(0 <= self.kafka_batch_cache_bytes <= 1 << 34,
               "kafka_batch_cache_bytes must be in [0, 17179869184]")
        _check(len(self.controllers) >= 1, "at least one controller endpoint is needed")
        _check(not self.remote_storage_endpoint or bool(self.remote_storage),
               "--remote-storage-endpoint needs --remote-storage")
        _check(100 <= self.remote_retry_backoff_ms_max <= 3_600_000,
               "remote_retry_backoff_ms_max must be in [100, 3600000]")
        _check(64 << 10 <= self.remote_fetch_chunk_bytes <= 256 << 20,
               "remote_fetch_chunk_bytes must be in [64 KiB, 256 MiB]")
        _check(self.remote_fetch_chunk_bytes <= self.remote_fetch_cache_bytes <= 1 << 36,
               "remote_fetch_cache_bytes must be in [remote_fetch_chunk_bytes, 64 GiB]")
        _check(1000 <= self.remote_orphan_check_interval_ms <= 7 * 86_400_000,
               "remote_orphan_check_interval_ms must be in [1000, 604800000]")
        _check(1000 <= self.remote_orphan_grace_ms <= 7 * 86_400_000,
               "remote_orphan_grace_ms must be in [1000, 604800000]")
        _check(self.replica_selector in REPLICA_SELECTORS,
               f"replica_selector must be one of {', '.join(REPLICA_SELECTORS)}, "
               f"not {self.replica_selector!r}")
        object.__setattr__(self, "controller_endpoints", tuple(parse_endpoint(c) for c in self.controllers))
        _check(100 <= self.heartbeat_interval_ms <= 60_000, "heartbeat_interval_ms must be in [100, 60000]")
        _check(0 <= self.ready_isr_wait_ms_max <= 86_400_000,
               "ready_isr_wait_ms_max must be in [0, 86400000]")
        _check(self.replica_lag_ms_max > self.replica_fetch_wait_ms_max,
               "replica_lag_ms_max must exceed replica_fetch_wait_ms_max, or idle followers leave the ISR")
        _check(
            10 <= self.replica_fetch_wait_ms_max <= 10_000, "replica_fetch_wait_ms_max must be in [10, 10000]"
        )
        _check(1024 <= self.replica_fetch_partition_bytes_max <= 1 << 30, "replica fetch size out of bounds")
        _check(
            10 <= self.metadata_fetch_wait_ms_max <= 10_000,
            "metadata_fetch_wait_ms_max must be in [10, 10000]",
        )
        _check(
            1 <= self.metadata_fetch_bytes_max <= 64 << 20, "metadata_fetch_bytes_max must be in [1, 64 MiB]"
        )
        _check(self.grpc_message_bytes_max >= self.metadata_fetch_bytes_max + (1 << 20),
               "grpc_message_bytes_max must hold a whole metadata fetch reply")
        _check(
            100 <= self.controller_request_timeout_ms <= 120_000,
            "controller_request_timeout_ms out of bounds",
        )
        _check(4 <= self.request_threads <= 1024, "request_threads must be in [4, 1024]")
        _check(
            1 <= self.produce_timeout_ms_default <= 300_000,
            "produce_timeout_ms_default must be in [1, 300000]",
        )
        _check(1 << 10 <= self.fetch_response_bytes_max <= 1 << 30, "fetch_response_bytes_max out of bounds")
        _check(0 <= self.fetch_wait_ms_max <= 300_000, "fetch_wait_ms_max must be in [0, 300000]")
        # A negative or zero interval would spin the maintenance thread.
        _check(10 <= self.log_maintenance_interval_ms <= 3_600_000,
               "log_maintenance_interval_ms must be in [10, 3600000]")
        _check(self.grpc_message_bytes_max >= self.fetch_response_bytes_max + (1 << 20),
               "grpc_message_bytes_max must hold a whole fetch response")
        _check(1 <= self.offsets_topic_partitions <= 1000, "offsets_topic_partitions must be in [1, 1000]")
        _check(
            1 <= self.offsets_topic_replication_factor <= 16,
            "offsets_topic_replication_factor must be in [1, 16]",
        )
        _check(
            1 <= self.transaction_state_partitions <= 1000,
            "transaction_state_partitions must be in [1, 1000]",
        )
        _check(1 <= self.transaction_state_replication_factor <= 16,
               "transaction_state_replication_factor must be in [1, 16]")
        _check(1_000 <= self.transaction_timeout_ms_max <= 3_600_000,
               "transaction_timeout_ms_max must be in [1000, 3600000]")
        _check(
            100 <= self.offsets_commit_timeout_ms <= 300_000,
            "offsets_commit_timeout_ms must be in [100, 300000]",
        )
        _check(1 <= self.group_session_timeout_ms_min <= self.group_session_timeout_ms_max <= 3_600_000,
               "group session timeout bounds must satisfy 1 <= min <= max <= 3600000")
        _check(0 <= self.group_initial_rebalance_delay_ms <= 300_000,
               "group_initial_rebalance_delay_ms must be in [0, 300000]")
        _check(1000 <= self.offsets_retention_ms <= 10 * 365 * 24 * 3600 * 1000,
               "offsets_retention_ms must be in [1000, 10 years]")
        _check(100 <= self.offsets_retention_check_interval_ms <= 86_400_000,
               "offsets_retention_check_interval_ms must be in [100, 86400000]")
        _check(1000 <= self.producer_id_expiration_ms <= 10 * 365 * 24 * 3600 * 1000,
               "producer_id_expiration_ms must be in [1000, 10 years]")
        QuotaWindows(self.quota_window_num, self.quota_window_size_ms)  # INVALID_CONFIG when out of bounds


# A broker notices that its controller fell silent within two heartbeat intervals (the wait for the next
# heartbeat, then one attempt's deadline: lifecycle.py); at most this share of the session may go to that.
HEARTBEATS_PER_SESSION_MIN = 4


def check_heartbeat_fits_session(heartbeat_interval_ms: int, session_timeout_ms: int) -> None:
    """INVALID_CONFIG unless HEARTBEATS_PER_SESSION_MIN heartbeat intervals fit in the controllers' broker
    session timeout: noticing a hung controller takes up to two intervals, and the other half of the
    session is left for the controllers' election and reaching the new active controller. Checked when
    the broker registers (the controller reports its session timeout then)."""
    _check(
        HEARTBEATS_PER_SESSION_MIN * heartbeat_interval_ms <= session_timeout_ms,
        f"heartbeat_interval_ms ({heartbeat_interval_ms}) must be at most 1/{HEARTBEATS_PER_SESSION_MIN} of "
        f"the controllers' session timeout ({session_timeout_ms} ms), or a broker whose controller hangs "
        f"may be fenced before it reaches the new active controller; lower --heartbeat-interval-ms to at "
        f"most {session_timeout_ms // HEARTBEATS_PER_SESSION_MIN} or raise the controllers' "
        f"--session-timeout-ms",
    )


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise KanalError(ErrorCode.INVALID_CONFIG, message)
