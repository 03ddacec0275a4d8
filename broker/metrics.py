"""The broker's Prometheus metrics, named after Kafka's MBeans so dashboards translate directly.

One registry per broker process (not the global default), with the process and Python runtime collectors
(kanal.server.metrics_endpoint), served on `metrics_listen`: port 9404 on the --listen host unless moved or
switched off (`--metrics`). docs/metrics.md lists every name; deploy/grafana/kanal.json draws them.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from kanal.server.metrics_endpoint import node_registry

_LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
# An fsync takes from tens of microseconds (a page cache with nothing dirty) to seconds (a busy disk).
_FLUSH_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


class BrokerMetrics:
    def __init__(self) -> None:
        self.registry = node_registry()
        r = self.registry
        self.under_replicated_partitions = Gauge(
            "kanal_replica_manager_under_replicated_partitions",
            "Partitions led here whose ISR is smaller than their replica set", registry=r)
        self.offline_partitions = Gauge(
            "kanal_offline_partitions_count",
            "Partitions with no leader, as this broker's metadata says",
            registry=r,
        )
        self.leader_partitions = Gauge(
            "kanal_replica_manager_leader_count", "Partitions led here", registry=r
        )
        self.partitions = Gauge("kanal_replica_manager_partition_count", "Replicas hosted here", registry=r)
        self.isr_shrinks = Counter(
            "kanal_replica_manager_isr_shrinks", "ISR shrinks this broker made", registry=r
        )
        self.isr_expands = Counter(
            "kanal_replica_manager_isr_expands", "ISR expansions this broker made", registry=r
        )
        self.stray_replicas_removed = Counter(
            "kanal_replica_manager_stray_replicas_removed",
            "Replica directories removed because they belong to no topic this broker hosts (another topic "
            "id, or a topic deleted while it was away)", registry=r)
        self.requests = Counter("kanal_network_requests", "Requests served", ["request"], registry=r)
        self.request_errors = Counter("kanal_network_request_errors", "Per-item errors returned",
                                      ["request", "error"], registry=r)
        self.request_latency = Histogram("kanal_network_request_latency_seconds", "Time to answer a request",
                                         ["request"], buckets=_LATENCY_BUCKETS_S, registry=r)
        self.bytes_in = Counter("kanal_broker_topic_bytes_in", "Bytes appended by producers", registry=r)
        self.bytes_out = Counter("kanal_broker_topic_bytes_out", "Bytes returned to consumers", registry=r)
        # Follower fetching (read_replica.py): how much of bytes_out went to consumers in this broker's rack,
        # and how much this broker served as a follower; the share of a zone's reads kept in the zone.
        self.bytes_out_same_rack = Counter(
            "kanal_broker_topic_bytes_out_same_rack",
            "Bytes returned to consumers whose Fetch named this broker's rack", registry=r)
        self.bytes_out_as_follower = Counter(
            "kanal_broker_topic_bytes_out_as_follower",
            "Bytes returned to consumers from replicas this broker follows (follower fetching)", registry=r)
        self.preferred_read_replica_answers = Counter(
            "kanal_broker_preferred_read_replica_answers",
            "Consumer fetches of a partition this broker leads that were sent to another replica", registry=r)
        # Tiered storage (remote_log_manager.py): uploads of this broker's leaders, and what waits for one.
        self.remote_bytes_uploaded = Counter(
            "kanal_remote_log_bytes_uploaded", "Bytes of segments and their metadata uploaded", registry=r)
        self.remote_segments_uploaded = Counter(
            "kanal_remote_log_segments_uploaded", "Segments uploaded and recorded", registry=r)
        self.remote_upload_errors = Counter(
            "kanal_remote_log_upload_errors", "Failed uploads, by whether they are retried", ["kind"],
            registry=r)
        self.remote_upload_lag_segments = Gauge(
            "kanal_remote_log_upload_lag_segments",
            "Closed segments of partitions led here not yet recorded in remote storage", registry=r)
        self.remote_upload_lag_bytes = Gauge(
            "kanal_remote_log_upload_lag_bytes", "Bytes of those segments", registry=r)
        # Tiered storage housekeeping (remote_log_manager.py): retention, topic deletion, orphan sweeps.
        self.remote_segments_deleted = Counter(
            "kanal_remote_log_segments_deleted",
            "Remote segments deleted by remote retention or with their topic", registry=r)
        self.remote_orphans_removed = Counter(
            "kanal_remote_orphans_removed",
            "Remote objects no record names removed by the orphan sweeps", registry=r)
        # Tiered storage reads (remote_fetch.py): consumer fetches served from remote segments.
        self.remote_fetch_bytes = Counter(
            "kanal_remote_fetch_bytes", "Bytes returned to consumers from remote segments", registry=r)
        self.remote_fetch_latency = Histogram(
            "kanal_remote_fetch_latency_seconds", "Time to read one partition's answer from remote storage",
            registry=r)
        self.remote_fetch_cache_hits = Counter(
            "kanal_remote_fetch_cache_hits", "Remote reads served from the chunk cache", registry=r)
        self.remote_fetch_cache_misses = Counter(
            "kanal_remote_fetch_cache_misses", "Remote reads that fetched a chunk from storage", registry=r)
        self.replication_bytes_in = Counter(
            "kanal_broker_replication_bytes_in", "Bytes appended by follower fetchers", registry=r
        )
        self.replication_throttled_bytes_in = Counter(
            "kanal_broker_replication_throttled_bytes_in",
            "Bytes appended by follower fetchers to replicas a reassignment is adding, under "
            "follower.replication.throttled.rate (also counted in kanal_broker_replication_bytes_in)",
            registry=r,
        )
        self.messages_in = Counter(
            "kanal_broker_topic_messages_in", "Records appended by producers", registry=r
        )
        self.fetch_purgatory = Gauge("kanal_fetch_purgatory_size", "Long-poll fetches waiting for data",
                                     ["kind"], registry=r)
        self.produce_purgatory = Gauge(
            "kanal_produce_purgatory_size",
            "acks=all produces parked until the high-water mark passes them, over the partitions led here",
            registry=r)
        self.log_flush_latency = Histogram(
            "kanal_log_flush_latency_seconds",
            "Time of one partition log flush (fsync of its active segment)",
            buckets=_FLUSH_BUCKETS_S,
            registry=r,
        )
        self.metadata_offset = Gauge(
            "kanal_broker_metadata_offset", "Metadata log offset applied", registry=r
        )
        self.consumer_group_lag = Gauge(
            "kanal_consumer_group_lag", "High-water mark minus committed offset, for groups coordinated here",
            ["group", "topic", "partition"], registry=r)
        self.groups = Gauge("kanal_group_coordinator_groups", "Groups coordinated here, by state", ["state"],
                            registry=r)
        # Exposed with the _total suffix prometheus_client gives counters.
        self.group_rebalances = Counter(
            "kanal_group_coordinator_rebalances",
            "Generations completed by groups coordinated here (each one a finished rebalance)", registry=r)
        self.group_bad_records = Counter(
            "kanal_group_coordinator_bad_records",
            "__consumer_offsets records (an undecodable batch counts once) a load skipped as unusable",
            registry=r,
        )
        self.group_load_failures = Counter(
            "kanal_group_coordinator_load_failures",
            "Loads of a __consumer_offsets partition that failed and were retried, by cause (an ErrorCode "
            "name, or 'unexpected')", ["cause"], registry=r)
        self.producer_ids = Gauge(
            "kanal_broker_producer_ids",
            "Idempotent producers whose state this broker keeps, summed over its replicas",
            registry=r,
        )
        self.requests_refused_starting = Counter(
            "kanal_broker_requests_refused_starting",
            "Calls refused with BROKER_NOT_AVAILABLE because this broker was not yet registered and caught "
            "up with the metadata log", registry=r)
        self.schema_registry_requests = Counter(
            "kanal_schema_registry_requests",
            "Schema registry REST requests served, by SchemaRegistry method ('none': answered without a "
            "call, or refused before one) and HTTP status (4xx and 5xx are the errors)",
            ["method", "status"], registry=r)
        self.fenced = Gauge(
            "kanal_broker_fenced", "1 while the controller has this broker fenced", registry=r
        )
        # Client quotas (broker/quota_policy.py). `quota` is the quota key (producer_byte_rate,
        # consumer_byte_rate, request_percentage); `entity` the configured quota entity the client matched
        # (`user=alice,client-id=app`, `client-id=<default>`), never the raw client id: one label set per
        # configured quota, removed when the quota is.
        self.quota_throttle_time_ms = Counter(
            "kanal_client_quota_throttle_time_ms", "Throttle time handed to clients over their quota, in ms",
            ["quota", "entity"], registry=r)
        self.quota_throttled_calls = Counter(
            "kanal_client_quota_throttled_calls",
            "Calls answered with a throttle time > 0",
            ["quota", "entity"],
            registry=r,
        )
        self.quota_rate = Gauge(
            "kanal_client_quota_rate",
            "Rate of a quota entity at its last call: bytes/s (byte rates) or percent of one thread "
            "(request_percentage)", ["quota", "entity"], registry=r)
        self.quota_delayed_calls = Counter(
            "kanal_client_quota_delayed_calls",
            "Calls the broker held because their client was still throttled (it did not wait)", registry=r)
