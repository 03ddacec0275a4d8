"""The analytics job: what the partition logs hold, per topic and partition, as Parquet tables.

    result = run_analytics(spark, data_dir=..., out_dir=...)       # or bootstrap="host:port"

| table | rows |
|---|---|
| partition_stats | per topic/partition: records, bytes (key + value), first/last offset and time, producer ids seen, distinct keys |
| throughput | per topic/partition/minute: records and bytes (records per minute over time) |
| topic_keys | per topic: records, distinct keys, null keys, hottest key's count and its skew (hottest / mean per key) |
| hot_keys | per topic: the `hot_keys_max` most frequent keys with their count and share of the topic |
| producers | per topic/partition/producer id: records, first and last offset |
| lag | per group/topic/partition/minute: log end offset, committed offset and lag at the end of that minute |
| group_lag | per group/topic/partition now: committed offset, log end offset, lag |
| transactions | per topic: partitions, records of plain batches, of committed, aborted and open (undecided at the committed end) transactions, and control records (transaction markers) |
| damage | offsets no copy could give (`_corrupt` rows with `_lost`): data missing |
| notices | per topic/partition/offset: what the reader noticed that cost no committed record (never a `kanal-log` row): divergent copies, copies of a deleted topic, offsets not yet committed (from the plan, on the driver) and damage another copy made good (found by the tasks of the transactions pass, which read every committed entry) |

Lag over time. Log end offset at the end of minute m = 1 + the highest offset whose timestamp is before the
end of m (record timestamps); committed offset at the end of m = the last commit accepted before then
(commit timestamps from `__consumer_offsets`). Both are carried forward over minutes without records or
commits; lag = log end - committed. Data records with no key count as "null keys", not as a key.
"""  # noqa: E501 (a Markdown table keeps each row on one line)

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from kanal.security.channel_security import ClientSecurity
from kanal.spark.copy_plan import ReadPlan, plan_notices, read_items
from kanal.spark.fetch_reader import FetchPartition, cluster_metadata, fetch_partition, list_partitions
from kanal.spark.log_source import file_plan
from kanal.spark.offsets_topic import COMMITS_DDL, OFFSETS_TOPIC, commits_frame_from_rows
from kanal.spark.parquet_out import write_tables
from kanal.spark.range_reader import Clipped, Notice, ReadItem, read_item
from kanal.spark.segment_files import GROUP_BYTES_MAX_DEFAULT
from kanal.spark.source_options import security_options
from kanal.spark.transactions import READ_COMMITTED, TxnCounts, partition_counts
from kanal.v1.error import ErrorCode

HOT_KEYS_MAX_DEFAULT = 10
_MINUTE = "1 minute"


@dataclass(slots=True)
class AnalyticsResult:
    tables: dict[str, DataFrame] = field(default_factory=dict)
    damage: list[str] = field(default_factory=list)
    # What the reader noticed that cost no committed record: divergent copies, damage another copy made
    # good, copies of a deleted topic left out, offsets not yet on every in-sync replica.
    notices: list[str] = field(default_factory=list)
    out_dir: Path | None = None


def _reader(
    spark: SparkSession,
    data_dir: str | None,
    bootstrap: str | None,
    fail_fast: bool,
    split_bytes: int = 0,
    security: ClientSecurity | None = None,
):
    reader = (spark.read.format("kanal-log").option("mode", "FAILFAST" if fail_fast else "PERMISSIVE")
              .option("isolationLevel", READ_COMMITTED))
    if split_bytes:
        reader = reader.option("bytesPerPartition", str(split_bytes))
    if bootstrap:
        reader = reader.option("bootstrap", bootstrap).options(**security_options(security))
    return reader


def _load(reader, data_dir: str | None) -> DataFrame:
    return reader.load(data_dir) if data_dir else reader.load()


def data_frame(spark: SparkSession, *, data_dir: str | None = None, bootstrap: str | None = None,
               topics: list[str] | None = None, fail_fast: bool = False, split_bytes: int = 0,
               security: ClientSecurity | None = None) -> DataFrame:
    """The data topics' records (internal `__` topics left out unless named)."""
    reader = _reader(spark, data_dir, bootstrap, fail_fast, split_bytes, security).schema(
        "topic string, partition int, offset bigint, timestamp timestamp, key binary, value_bytes int, "
        "producer_id bigint, _corrupt string, _lost boolean")
    if topics:
        reader = reader.option("topics", ",".join(topics))
    return _load(reader, data_dir)


def commits_frame(
    spark: SparkSession,
    *,
    data_dir: str | None = None,
    bootstrap: str | None = None,
    fail_fast: bool = False,
    split_bytes: int = 0,
    security: ClientSecurity | None = None,
) -> DataFrame:
    """Offset commits decoded from `__consumer_offsets` (empty when the topic does not exist)."""
    reader = (_reader(spark, data_dir, bootstrap, fail_fast, split_bytes, security)
              .schema("offset bigint, key binary, value binary").option("topics", OFFSETS_TOPIC))
    if bootstrap and not any(t.name == OFFSETS_TOPIC and t.error == ErrorCode.NONE
                             for t in cluster_metadata(bootstrap, [OFFSETS_TOPIC], security).topics):
        return spark.createDataFrame([], COMMITS_DDL)  # no group has committed yet
    return commits_frame_from_rows(_load(reader, data_dir))


TRANSACTIONS_DDL = ("topic string, partition int, plain_records bigint, committed_records bigint, "
                    "aborted_records bigint, open_records bigint, control_records bigint, "
                    "found array<struct<offset: bigint, notice: string>>")
NOTICES_DDL = "topic string, partition int, offset bigint, notice string"


def _count_items(task: tuple[str, int, tuple[ReadItem, ...]]) -> tuple:
    """A partition's counts by outcome, and the notices its tasks found (damage another copy made good;
    the planning notes are the driver's, notices_frame)."""
    topic, partition, items = task
    found: list[tuple[int, str]] = []

    def entries() -> Iterator[Clipped | Notice]:
        for item in items:
            for got in read_item(item):
                if isinstance(got, Notice) and not got.lost and (got.offset, got.text) not in item.notes:
                    found.append((got.offset, got.text))
                yield got

    counts = _counts_tuple(partition_counts(entries()))
    return (topic, partition) + counts + (found,)


def _counts_tuple(c: TxnCounts) -> tuple[int, ...]:
    return c.plain, c.committed, c.aborted, c.open, c.control


def transaction_counts_frame(
    spark: SparkSession,
    *,
    data_dir: str | None = None,
    bootstrap: str | None = None,
    topics: list[str] | None = None,
    split_bytes: int = 0,
    security: ClientSecurity | None = None,
    plan: ReadPlan | None = None,
) -> DataFrame:
    """Per partition: records by transaction outcome and control records (spark/transactions.py), and
    (`found`) the notices the tasks met on the way. One Spark task per partition (the outcome of a batch
    depends on markers anywhere after it). `plan`: the files' plan when the caller already made it."""
    wanted = frozenset(topics) if topics else None
    rows: DataFrame
    if bootstrap:
        parts = list_partitions(bootstrap, wanted, False, security)

        def count_fetched(part: FetchPartition) -> tuple:
            return (part.topic, part.partition) + _counts_tuple(
                partition_counts(fetch_partition(bootstrap, part, security))) + ([],)

        rdd = spark.sparkContext.parallelize(parts, max(1, len(parts))).map(count_fetched)
    else:
        plan = plan if plan is not None else file_plan(Path(str(data_dir)), wanted)
        items = read_items(plan, split_bytes or GROUP_BYTES_MAX_DEFAULT)
        by_partition: dict[tuple[str, int], list[ReadItem]] = {}
        for item in items:
            by_partition.setdefault((item.topic, item.partition), []).append(item)
        tasks = [(t, p, tuple(sorted(its, key=lambda i: (i.lo, i.start_position))))
                 for (t, p), its in sorted(by_partition.items())]
        rdd = spark.sparkContext.parallelize(tasks, max(1, len(tasks))).map(_count_items)
    rows = spark.createDataFrame(rdd, TRANSACTIONS_DDL)
    return rows


def notices_frame(spark: SparkSession, plan: ReadPlan | None, counts: DataFrame) -> DataFrame:
    """What cost no committed record: the plan's notes (known on the driver) and what the tasks of the
    transactions pass found (damage made good), one row each, in topic, partition, offset order."""
    planned = spark.createDataFrame(plan_notices(plan) if plan is not None else [], NOTICES_DDL)
    found = (counts.select("topic", "partition", F.explode("found").alias("n"))
             .select("topic", "partition", F.col("n.offset").alias("offset"),
                     F.col("n.notice").alias("notice")))
    return planned.unionByName(found).orderBy("topic", "partition", "offset")


def transactions_table(counts: DataFrame) -> DataFrame:
    return (counts.groupBy("topic").agg(
        F.count(F.lit(1)).alias("partitions"),
        *[F.sum(c).alias(c) for c in ("plain_records", "committed_records", "aborted_records", "open_records",
                                      "control_records")]).orderBy("topic"))


def analytics_tables(records: DataFrame, commits: DataFrame, hot_keys_max: int = HOT_KEYS_MAX_DEFAULT
                     ) -> dict[str, DataFrame]:
    good = records.where(F.col("_corrupt").isNull())
    size = F.coalesce(F.length("key"), F.lit(0)) + F.col("value_bytes")
    stats = (good.groupBy("topic", "partition").agg(
        F.count(F.lit(1)).alias("records"), F.sum(size).alias("bytes"),
        F.min("offset").alias("first_offset"), F.max("offset").alias("last_offset"),
        F.min("timestamp").alias("first_time"), F.max("timestamp").alias("last_time"),
        F.countDistinct("producer_id").alias("producer_ids"), F.countDistinct("key").alias("distinct_keys"))
        .orderBy("topic", "partition"))
    throughput = (good.groupBy("topic", "partition", F.window("timestamp", _MINUTE).start.alias("minute"))
                  .agg(F.count(F.lit(1)).alias("records"), F.sum(size).alias("bytes"))
                  .orderBy("topic", "partition", "minute"))
    per_key = (
        good.where(F.col("key").isNotNull()).groupBy("topic", "key").agg(F.count(F.lit(1)).alias("count"))
    )
    topic_totals = good.groupBy("topic").agg(
        F.count(F.lit(1)).alias("records"),
        F.sum(F.when(F.col("key").isNull(), 1).otherwise(0)).alias("null_keys"),
    )
    key_stats = per_key.groupBy("topic").agg(F.count(F.lit(1)).alias("distinct_keys"),
                                             F.max("count").alias("hottest_key_count"),
                                             F.avg("count").alias("mean_per_key"))
    topic_keys = (topic_totals.join(key_stats, "topic", "left")
                  .withColumn("skew", F.col("hottest_key_count") / F.col("mean_per_key")).orderBy("topic"))
    rank = Window.partitionBy("topic").orderBy(F.desc("count"), F.asc("key"))
    hot_keys = (per_key.withColumn("rank", F.row_number().over(rank)).where(F.col("rank") <= hot_keys_max)
                .join(topic_totals.select("topic", "records"), "topic")
                .withColumn("share", F.col("count") / F.col("records")).drop("records")
                .orderBy("topic", "rank"))
    producers = (good.groupBy("topic", "partition", "producer_id")
                 .agg(F.count(F.lit(1)).alias("records"), F.min("offset").alias("first_offset"),
                      F.max("offset").alias("last_offset")).orderBy("topic", "partition", "producer_id"))
    lag, group_lag = _lag(good, commits)
    return {
        "partition_stats": stats,
        "throughput": throughput,
        "topic_keys": topic_keys,
        "hot_keys": hot_keys,
        "producers": producers,
        "lag": lag,
        "group_lag": group_lag,
        "damage": records.where(F.col("_corrupt").isNotNull() & F.col("_lost")).select(
            "topic", "partition", "offset", "_corrupt"
        ),
    }


def _lag(good: DataFrame, commits: DataFrame) -> tuple[DataFrame, DataFrame]:
    valid = commits.where(F.col("error").isNull() & ~F.col("tombstone"))
    end_by_minute = (good.groupBy("topic", "partition", F.window("timestamp", _MINUTE).start.alias("minute"))
                     .agg((F.max("offset") + 1).alias("minute_end_offset")))
    last_commit = Window.partitionBy("group", "topic", "partition", "minute").orderBy(
        F.desc("commit_time"), F.desc("log_offset"))
    commit_by_minute = (valid.withColumn("minute", F.window("commit_time", _MINUTE).start)
                        .withColumn("n", F.row_number().over(last_commit)).where(F.col("n") == 1)
                        .select("group", "topic", "partition", "minute", "committed_offset"))
    groups = valid.select("group", "topic", "partition").distinct()
    # Every minute in which the partition got records or the group committed, per group.
    minutes = (groups.join(end_by_minute.select("topic", "partition", "minute"), ["topic", "partition"])
               .unionByName(commit_by_minute.select("group", "topic", "partition", "minute")).distinct())
    filled = Window.partitionBy("group", "topic", "partition").orderBy("minute").rowsBetween(
        Window.unboundedPreceding, Window.currentRow)
    lag = (minutes.join(end_by_minute, ["topic", "partition", "minute"], "left")
           .join(commit_by_minute, ["group", "topic", "partition", "minute"], "left")
           .withColumn("log_end_offset", F.coalesce(F.max("minute_end_offset").over(filled), F.lit(0)))
           .withColumn("committed_offset", F.last("committed_offset", ignorenulls=True).over(filled))
           .where(F.col("committed_offset").isNotNull())
           .withColumn("lag", F.greatest(F.col("log_end_offset") - F.col("committed_offset"), F.lit(0)))
           .select("group", "topic", "partition", "minute", "log_end_offset", "committed_offset", "lag")
           .orderBy("group", "topic", "partition", "minute"))
    latest = Window.partitionBy("group", "topic", "partition").orderBy(
        F.desc("commit_time"), F.desc("log_offset")
    )
    log_end = good.groupBy("topic", "partition").agg((F.max("offset") + 1).alias("log_end_offset"))
    group_lag = (
        valid.withColumn("n", F.row_number().over(latest))
        .where(F.col("n") == 1)
        .join(log_end, ["topic", "partition"], "left")
        .fillna(0, ["log_end_offset"])
        .withColumn("lag", F.greatest(F.col("log_end_offset") - F.col("committed_offset"), F.lit(0)))
        .select("group", "topic", "partition", "committed_offset", "commit_time", "log_end_offset", "lag")
        .orderBy("group", "topic", "partition")
    )
    return lag, group_lag


def run_analytics(spark: SparkSession, *, data_dir: str | Path | None = None, bootstrap: str | None = None,
                  out_dir: str | Path | None = None, topics: list[str] | None = None,
                  hot_keys_max: int = HOT_KEYS_MAX_DEFAULT, fail_fast: bool = False,
                  split_bytes: int = 0, security: ClientSecurity | None = None) -> AnalyticsResult:
    """Read the data (files or a live cluster, over TLS with `security`), build every table, write them
    as Parquet when out_dir."""
    if not data_dir and not bootstrap:
        raise ValueError("give data_dir or bootstrap")
    path = str(data_dir) if data_dir else None
    records = data_frame(spark, data_dir=path, bootstrap=bootstrap, topics=topics, fail_fast=fail_fast,
                         split_bytes=split_bytes, security=security).cache()
    commits = commits_frame(spark, data_dir=path, bootstrap=bootstrap, fail_fast=fail_fast,
                            split_bytes=split_bytes, security=security).cache()
    result = AnalyticsResult(analytics_tables(records, commits, hot_keys_max))
    plan = None if bootstrap else file_plan(Path(str(path)), frozenset(topics) if topics else None)
    counts = transaction_counts_frame(spark, data_dir=path, bootstrap=bootstrap, topics=topics,
                                      split_bytes=split_bytes, security=security, plan=plan).cache()
    result.tables["transactions"] = transactions_table(counts)
    result.tables["notices"] = notices_frame(spark, plan, counts)
    result.damage = [r["_corrupt"] for r in result.tables["damage"].collect()]
    result.notices = [r["notice"] for r in result.tables["notices"].collect()]
    if out_dir is not None:
        result.out_dir = write_tables(result.tables, out_dir)
    return result
