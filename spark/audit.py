"""The audit job: the metadata log replayed into the cluster's history, as Parquet tables.

    result = run_audit(spark, data_dir, out_dir, controllers=["127.0.0.1:9601", ...])

Steps: Spark reads the log with `kanal-metadata` (only the columns the replay needs) and replays it in
Spark, chunk after chunk (replay_job.py: one task per chunk, the replayer's state carried from each to the
next through the driver), from offset 0, or, when the controllers' retention moved the log start past 0,
from the oldest snapshot file at or past it (replay_start.py). The events and intervals stay on the
executors; the driver holds the replayer (images and open intervals), so its memory does not grow with
the log. The tables are aggregated from them per partition and written as Parquet under `out_dir/<table>/`:

| table | rows |
|---|---|
| events | every event, in log order (replay.Event's fields) |
| topic_lifecycle | topic_created / partitions_increased / topic_deleted, with topic id, principal and request id |
| leader_changes | every leader change: leader before/after, new leader epoch, cause, reason |
| isr_changes | every ISR change: before/after, shrink / expand, cause |
| broker_events | registrations, fencing, unfencing (with fenced duration), unregistrations |
| config_changes | topic/broker config and client quota changes, value before/after, principal |
| acl_changes | access-control entries added and removed: resource, grantee@host (`key`), what it allows or denies, and the principal who changed it |
| schema_changes | the schema registry: versions registered (a new id or one registered before), restored, soft- and hard-deleted, with subject, version, schema id and type; compatibility and mode set or removed (`subject` null for the registry's), value before/after; the principal who asked |
| remote_uploads | tiered storage: every remote segment recorded: topic, partition, base/end offsets (end exclusive), size, the uploader's leader epoch and broker, metadata offset and time |
| remote_deletions | tiered storage: every move of a partition's remote log start (remote retention): topic, partition, new start, reason, segments and bytes dropped |
| partition_health | intervals a partition was under-replicated or offline, with durations |
| broker_fencing | intervals a broker was fenced, with durations and reasons |
| partition_summary | per topic id and partition: leader changes, last leader epoch, ISR shrinks/expands, ms under-replicated, ms offline, deleted (a name re-created is another topic id, another row) |
| damage | log regions (file, byte, offset) no controller's copy could give: the replay stops there |
| notices | damage in one controller's copy that another copy made good, divergent copies |
| image_check | per controller: whether the replayed image equals its image, and the differences |
| transactional_producers | per transactional id: producer id and epoch, latest state, timeout, partitions of its latest transaction, producer ids held, epoch bumps, transactions started / committed / aborted, first and last update, states read (from `__transaction_state`: transaction_state.py) |
| transaction_states | every coordinator state `__transaction_state` still holds, in log order: partition, offset, transactional id, producer id and epoch, state, timeout, partitions, start and update time |
"""  # noqa: E501 (a Markdown table keeps each row on one line)

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kanal.security.channel_security import ClientSecurity
from kanal.spark.copy_plan import metadata_copy
from kanal.spark.live_image import ControllerCheck, check_controllers
from kanal.spark.parquet_out import write_tables
from kanal.spark.replay import History
from kanal.spark.replay_job import CHUNK_BYTES_DEFAULT, ReplayOutput, replay_in_spark
from kanal.spark.replay_start import ReplayStart, replay_start
from kanal.spark.transaction_state import StateRow, decode_state, summarize
from kanal.v1.topic_name import TRANSACTION_STATE_TOPIC


def interval_order() -> list:
    """replay.interval_order as Spark columns: the intervals tables' total order (built when called: a
    column needs a running session)."""
    return ["start_offset", "kind", F.coalesce(F.col("topic"), F.lit("")),
            F.coalesce(F.col("partition"), F.lit(0)), F.coalesce(F.col("broker_id"), F.lit(0))]


LIFECYCLE_EVENTS = ("topic_created", "partitions_increased", "topic_deleted")
BROKER_EVENTS = ("broker_registered", "broker_fenced", "broker_unfenced", "broker_unregistered")
CONFIG_EVENTS = ("config_set", "config_removed", "quota_set", "quota_removed")
ACL_EVENTS = ("acl_added", "acl_removed")
SCHEMA_EVENTS = ("schema_registered", "schema_restored", "schema_soft_deleted", "schema_hard_deleted",
                 "registry_config_set", "registry_config_removed", "registry_mode_set",
                 "registry_mode_removed")
REMOTE_UPLOAD_EVENT = "remote_segment_uploaded"
REMOTE_START_EVENT = "remote_log_start_moved"


@dataclass(slots=True)
class AuditResult:
    history: History
    records_read: int
    damage: list[str]
    checks: list[ControllerCheck]
    tables: dict[str, DataFrame] = field(default_factory=dict)
    out_dir: Path | None = None
    # Where the replay began: offset 0, or a snapshot when the log starts past 0 (replay_start.py).
    start: ReplayStart | None = None
    # What the reader noticed that cost no record: a damaged controller copy another one made good.
    notices: list[str] = field(default_factory=list)
    # Events per (event, of an internal topic): the summary's counts, counted by the replay's chunks.
    event_counts: dict[tuple[str, bool], int] = field(default_factory=dict)

    @property
    def image_matches(self) -> bool | None:
        """True when every reachable controller's image equals the replay's; None when none was checked."""
        compared = [c for c in self.checks if c.reachable]
        return all(c.equal for c in compared) if compared else None


REPLAY_COLUMNS = ("offset bigint, batch_offset bigint, controller_epoch bigint, time timestamp, "
                  "record binary, _corrupt string, _lost boolean")


def read_replay_rows(spark: SparkSession, data_dir: str, *, fail_fast: bool = False, split_bytes: int = 0
                     ) -> DataFrame:
    """The metadata log's rows the replay needs (a narrow schema: the source decodes only these)."""
    reader = (spark.read.format("kanal-metadata").option("mode", "FAILFAST" if fail_fast else "PERMISSIVE")
              .schema(REPLAY_COLUMNS))
    if split_bytes:
        reader = reader.option("bytesPerPartition", str(split_bytes))
    df = reader.load(data_dir)
    return df.select("offset", "batch_offset", "controller_epoch", F.unix_millis("time").alias("time_ms"),
                     "record", "_corrupt", "_lost")


def history_frames(spark: SparkSession, replayed: ReplayOutput) -> dict[str, DataFrame]:
    """The audit's tables from the replay's events and intervals (DataFrames: they never come to the
    driver) and its final image."""
    events_df, intervals_df = replayed.events, replayed.intervals
    ordered = events_df  # in replay order: by offset, then as the replay produced them
    tables = {
        "events": ordered,
        "topic_lifecycle": ordered.where(F.col("event").isin(*LIFECYCLE_EVENTS))
        .select("offset", "time", "event", "topic", "topic_id", "principal", "request_id", "detail")
        .withColumn("internal", F.coalesce(F.col("topic").startswith("__"), F.lit(False))),
        "leader_changes": ordered.where(F.col("event") == "leader_change").select(
            "offset",
            "time",
            "topic",
            "partition",
            "leader_before",
            "leader_after",
            "leader_epoch",
            "isr_before",
            "isr_after",
            "cause",
            "reason",
            "principal",
        ),
        "isr_changes": ordered.where(F.col("isr_change").isNotNull()).select(
            "offset",
            "time",
            "topic",
            "partition",
            "isr_change",
            "isr_before",
            "isr_after",
            "replicas",
            "cause",
            "reason",
            "principal",
        ),
        "broker_events": ordered.where(F.col("event").isin(*BROKER_EVENTS)).select(
            "offset",
            "time",
            "event",
            "broker_id",
            "broker_epoch",
            "reason",
            "duration_ms",
            "principal",
            "detail",
        ),
        "config_changes": ordered.where(F.col("event").isin(*CONFIG_EVENTS)).select(
            "offset",
            "time",
            "event",
            "resource_type",
            "resource",
            "key",
            "value_before",
            "value_after",
            "principal",
            "request_id",
        ),
        "acl_changes": ordered.where(F.col("event").isin(*ACL_EVENTS)).select(
            "offset",
            "time",
            "event",
            "resource_type",
            "resource",
            "key",
            "value_before",
            "value_after",
            "principal",
            "request_id",
            "detail",
        ),
        "schema_changes": ordered.where(F.col("event").isin(*SCHEMA_EVENTS)).select(
            "offset", "time", "event", "subject", "version", "schema_id", "schema_type", "key",
            "value_before", "value_after", "principal", "request_id", "detail"),
        "remote_uploads": ordered.where(F.col("event") == REMOTE_UPLOAD_EVENT).select(
            "offset", "time", "topic", "topic_id", "partition", "base_offset", "end_offset", "size_bytes",
            "leader_epoch", "broker_id", "principal"),
        "remote_deletions": ordered.where(F.col("event") == REMOTE_START_EVENT).select(
            "offset", "time", "topic", "topic_id", "partition", "log_start_offset", "reason",
            F.col("size_bytes").alias("bytes_dropped"), "detail", "principal"),
        "partition_health": intervals_df.where(F.col("kind") != "fenced")
        .orderBy(*interval_order())
        .drop("broker_id", "broker_epoch"),
        "broker_fencing": intervals_df.where(F.col("kind") == "fenced")
        .orderBy(*interval_order())
        .select(
            "broker_id", "broker_epoch", "start", "end", "duration_ms", "start_reason", "end_reason", "open"
        ),
    }
    live = spark.createDataFrame(
        pa.table({"topic_id": pa.array(list(replayed.history.image.topics_by_id), pa.string())})
    )
    tables["partition_summary"] = _partition_summary(events_df, intervals_df, live)
    return tables


def _partition_summary(events: DataFrame, intervals: DataFrame, live: DataFrame) -> DataFrame:
    """Per (topic id, partition): a name deleted and re-created is two topics, so two rows, the old one
    marked `deleted` (its topic id is not in the final image)."""
    per_partition = (
        events.where(F.col("partition").isNotNull())
        .groupBy("topic", "topic_id", "partition")
        .agg(
            F.sum(F.when(F.col("event") == "leader_change", 1).otherwise(0)).alias("leader_changes"),
            F.max("leader_epoch").alias("last_leader_epoch"),
            F.sum(F.when(F.col("isr_change") == "shrink", 1).otherwise(0)).alias("isr_shrinks"),
            F.sum(F.when(F.col("isr_change") == "expand", 1).otherwise(0)).alias("isr_expands"),
        )
    )
    trouble = (
        intervals.where(F.col("kind") != "fenced")
        .groupBy("topic_id", "partition")
        .agg(
            F.sum(F.when(F.col("kind") == "under_replicated", F.col("duration_ms")).otherwise(0)).alias(
                "under_replicated_ms"
            ),
            F.sum(F.when(F.col("kind") == "offline", F.col("duration_ms")).otherwise(0)).alias("offline_ms"),
        )
    )
    alive = live.withColumn("alive", F.lit(True))
    return (per_partition.join(trouble, ["topic_id", "partition"], "left")
            .fillna(0, ["under_replicated_ms", "offline_ms"])
            .join(alive, "topic_id", "left").withColumn("deleted", F.col("alive").isNull()).drop("alive")
            .orderBy("topic", "deleted", "topic_id", "partition"))


TRANSACTION_STATES_DDL = ("partition int, offset bigint, transactional_id string, producer_id bigint, "
                          "producer_epoch int, state string, timeout_ms int, partitions array<string>, "
                          "start_ms bigint, last_update_ms bigint, error string")
TRANSACTIONAL_PRODUCERS_DDL = (
    "transactional_id string, producer_id bigint, producer_epoch int, state string, "
    "timeout_ms int, partitions array<string>, producer_ids array<bigint>, "
    "epoch_bumps int, transactions_started int, commits int, aborts int, "
    "first_update_ms bigint, last_update_ms bigint, states_seen int"
)


def read_transaction_states(spark: SparkSession, data_dir: str, *, fail_fast: bool = False) -> list[StateRow]:
    """The coordinators' states from `__transaction_state`'s partition logs under `data_dir` (none when the
    topic was never created), decoded on the driver: a compacted topic of one small record per id."""
    df = (
        spark.read.format("kanal-log")
        .option("mode", "FAILFAST" if fail_fast else "PERMISSIVE")
        .option("topics", TRANSACTION_STATE_TOPIC)
        .schema("partition int, offset bigint, key binary, value binary, _corrupt string")
        .load(data_dir)
    )
    rows = [decode_state(r["partition"], r["offset"], r["key"], r["value"])
            for r in df.where(F.col("_corrupt").isNull()).collect()]
    return [r for r in rows if r is not None]


def transaction_frames(spark: SparkSession, states: list[StateRow]) -> dict[str, DataFrame]:
    state_rows = [
        (
            r.partition,
            r.offset,
            r.transactional_id,
            r.producer_id,
            r.producer_epoch,
            r.state,
            r.timeout_ms,
            list(r.partitions),
            r.start_ms,
            r.last_update_ms,
            r.error,
        )
        for r in sorted(states, key=lambda r: (r.partition, r.offset))
    ]
    producers = [
        (
            p.transactional_id,
            p.producer_id,
            p.producer_epoch,
            p.state,
            p.timeout_ms,
            list(p.partitions),
            p.producer_ids,
            p.epoch_bumps,
            p.transactions_started,
            p.commits,
            p.aborts,
            p.first_update_ms,
            p.last_update_ms,
            p.states_seen,
        )
        for p in summarize(states)
    ]
    return {"transaction_states": spark.createDataFrame(state_rows, TRANSACTION_STATES_DDL),
            "transactional_producers": spark.createDataFrame(producers, TRANSACTIONAL_PRODUCERS_DDL)}


def staging_dir(out_dir: str | Path | None) -> Path:
    """Where a long log is staged for the replay's chunks (replay_job.py): under the output directory,
    which the executors write anyway (shared storage on a cluster), or a temporary directory; removed when
    this process exits, since the chunks read from it until then."""
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        path = Path(tempfile.mkdtemp(prefix=".replay-", dir=out_dir))
    else:
        path = Path(tempfile.mkdtemp(prefix="kanal-audit-replay-"))
    atexit.register(shutil.rmtree, path, True)
    return path


def run_audit(spark: SparkSession, data_dir: str | Path, out_dir: str | Path | None = None, *,
              controllers: list[str] | None = None, fail_fast: bool = False, split_bytes: int = 0,
              security: ClientSecurity | None = None, chunk_bytes: int = CHUNK_BYTES_DEFAULT,
              progress: Callable[[str], None] | None = None) -> AuditResult:
    """Read, replay (in Spark, `chunk_bytes` of segment files per chunk: replay_job.py), compare with the
    controllers (when endpoints are given; over TLS with `security`), write the tables. `progress` is told
    each step of the replay."""
    copy = metadata_copy(Path(data_dir))
    start = replay_start(copy)
    rows = read_replay_rows(spark, str(data_dir), fail_fast=fail_fast, split_bytes=split_bytes)
    replayed = replay_in_spark(spark, rows, start, sum(s.size_bytes for s in copy.segments),
                               lambda: staging_dir(out_dir), chunk_bytes=chunk_bytes, progress=progress)
    flagged = replayed.flags
    corrupt = [c for c, lost in flagged if lost]
    history = replayed.history
    checks = check_controllers(controllers or [], history.image,
                               start.snapshot.snapshot if start.snapshot is not None else None, security)
    result = AuditResult(history, replayed.records_read, [*start.damaged, *corrupt], checks)
    result.notices = [c for c, lost in flagged if not lost]
    result.start = start
    result.tables = history_frames(spark, replayed)
    result.event_counts = replayed.event_counts
    damage = pa.table({"damage": pa.array(result.damage, pa.string())})
    result.tables["damage"] = spark.createDataFrame(damage)
    result.tables["notices"] = spark.createDataFrame(
        pa.table({"notice": pa.array(result.notices, pa.string())})
    )
    result.tables["image_check"] = spark.createDataFrame(pa.table({
        # Explicit types: with no controllers given the lists are empty, and a null-typed column has no
        # Parquet form.
        "controller": pa.array([c.endpoint for c in checks], pa.string()),
        "reachable": pa.array([c.reachable for c in checks], pa.bool_()),
        "equal": pa.array([c.equal for c in checks], pa.bool_()),
        "compared_at_offset": pa.array([c.compared_at_offset for c in checks], pa.int64()),
        "log_end_offset": pa.array([c.log_end_offset for c in checks], pa.int64()),
        "in_memory_compared": pa.array([c.in_memory_compared for c in checks], pa.bool_()),
        "error": pa.array([c.error for c in checks], pa.string()),
        "differences": pa.array([c.differences for c in checks], pa.list_(pa.string())),
    }))
    if progress is not None:
        progress("reading __transaction_state and writing the tables")
    result.tables.update(transaction_frames(spark, read_transaction_states(spark, str(data_dir),
                                                                           fail_fast=fail_fast)))
    if out_dir is not None:
        result.out_dir = write_tables(result.tables, out_dir)
    return result
