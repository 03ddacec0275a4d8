"""The `kanal` source's readers: `spark.readStream.format("kanal")` (a DataSourceStreamReader) and
`spark.read.format("kanal")` (a DataSourceReader over fixed offsets), reading through brokers.

    spark.readStream.format("kanal").option("kafka.bootstrap.servers", "127.0.0.1:9092")
         .option("subscribe", "events").option("startingOffsets", "earliest").load()

Columns are the Spark–Kafka connector's (`columns.STREAM_SCHEMA`). Options: `stream_options.py`.

Driver: the partitions to read (a subscription is looked up again before every micro-batch, so a
partition increase or a new topic matching the pattern is picked up, from its earliest offset), and their
offsets with ListOffsets at the leaders: `latest` is the last stable offset under read_committed (the
default: records of aborted transactions are never returned) and the high-water mark under
read_uncommitted, so only committed data is ever planned. The stream's offsets are the next offset of each
partition (`{"topic": {"0": 23}}`); `maxOffsetsPerTrigger` shares a limit over the partitions' backlogs.

Executors: one Spark task per partition range, read with the Python consumer (`kanal.clients.consumer`:
leader changes, decoding, transaction markers and aborted records are its business) from the range's
start until its position reaches the range's end. A start below the log start (retention deleted what the
query had not read) fails the task with OFFSET_OUT_OF_RANGE when `failOnDataLoss` is true (the default)
and reads on from the log start when it is false. Rows leave as Arrow record batches.

This module imports `kanal.clients` (a source and a sink are clients; the import-linter contract allows
the streaming modules exactly that).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from kanal.clients.cluster_metadata import ClusterMetadata
from kanal.clients.consumer import ISOLATION_LEVELS as WIRE_ISOLATION
from kanal.clients.consumer import Consumer, ConsumerConfig, ConsumerRecord
from kanal.clients.error_boundary import call
from kanal.spark.stream_options import (
    EARLIEST,
    LATEST,
    OffsetRange,
    Offsets,
    ReadOptions,
    TopicPartition,
    capped_end,
    offsets_of,
    positions_of,
    ranges,
)
from kanal.v1 import broker_pb2
from kanal.v1.error import ErrorCode, KanalError, error_name

STREAM_SCHEMA = ("key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp, "
                 "timestampType int, headers array<struct<key: string, value: binary>>")
ARROW_SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
    ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32()),
    ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
])
# kanal stamps records with the producer's time (CreateTime); the connector's code for it is 0.
CREATE_TIME = 0
# How long ListOffsets retries a partition without a leader (an election) before the batch fails.
OFFSETS_DEADLINE_S = 60.0
# How long a task waits for the next record of its range before it fails (a range ends at an offset that
# was committed when planned, so its records exist; only an outage lasts this long).
RANGE_STALL_S = 120.0
_POLL_S = 0.2
_RETRY_PAUSE_S = 0.1


class BrokerOffsets:
    """The driver's view: which partitions are read, and their offsets (ListOffsets at the leaders)."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._metadata = ClusterMetadata(
            options.bootstrap, security=options.security, client_id="kanal-spark"
        )

    def close(self) -> None:
        self._metadata.close()

    def partitions(self) -> list[TopicPartition]:
        o = self.options
        if o.assign:
            return list(o.assign)
        view = self._metadata.refresh(list(o.subscribe) if o.subscribe else None)
        return sorted((name, p.partition) for name, parts in view.topics.items()
                      if o.wants(name, name.startswith("__")) for p in parts)

    def offsets(self, partitions: list[TopicPartition], query: int) -> dict[TopicPartition, int]:
        """Each partition's offset for `query`: EARLIEST, LATEST (the last stable offset under
        read_committed) or a time in ms (the first offset at or after it; the latest when none is).
        Retriable failures (no leader yet, a broker down) are asked again until OFFSETS_DEADLINE_S, then
        raised with the last one's code; any other at once."""
        out: dict[TopicPartition, int] = {}
        pending = list(partitions)
        deadline = time.monotonic() + OFFSETS_DEADLINE_S
        problems: dict[TopicPartition, KanalError] = {}
        while pending:
            by_leader: dict[str, list[TopicPartition]] = {}
            for tp in pending:
                endpoint = self._metadata.leader_endpoint(*tp)
                if endpoint is None:
                    problems[tp] = KanalError(ErrorCode.LEADER_NOT_AVAILABLE, "no leader known")
                else:
                    by_leader.setdefault(endpoint, []).append(tp)
            for endpoint, tps in by_leader.items():
                for (topic, partition), offset, problem in self._ask(endpoint, tps, query):
                    if problem is not None:
                        problems[(topic, partition)] = problem
                    else:
                        out[(topic, partition)] = offset
                        problems.pop((topic, partition), None)
            pending = [tp for tp in pending if tp not in out]
            if not pending:
                break
            if time.monotonic() > deadline:
                codes = [problems[tp].code for tp in pending if tp in problems]
                detail = "; ".join(f"{t}-{p}: {e.message}" for (t, p), e in sorted(problems.items()))
                raise KanalError(codes[-1] if codes else ErrorCode.LEADER_NOT_AVAILABLE,
                                 f"offsets not found: {detail}")
            time.sleep(_RETRY_PAUSE_S)
            self._metadata.refresh(sorted({t for t, _ in pending}))
        if query >= 0:  # no record at or after the time: start at the end
            past = [tp for tp, offset in out.items() if offset < 0]
            if past:
                out.update(self.offsets(past, LATEST))
        return out

    def _ask(
        self, endpoint: str, tps: list[TopicPartition], query: int
    ) -> list[tuple[TopicPartition, int, KanalError | None]]:
        """(partition, offset, None) or (partition, 0, its retriable error) for each of `tps`; an error
        that is not retriable (the call's, or a partition's) is raised."""
        request = broker_pb2.ListOffsetsRequest(isolation_level=WIRE_ISOLATION[self.options.isolation_level])
        for topic in sorted({t for t, _ in tps}):
            request.topics.add(topic=topic).partitions.extend(
                broker_pb2.ListOffsetsRequest.PartitionQuery(partition=p, timestamp_ms=query) for t, p in tps
                if t == topic)
        try:
            reply = call(self._metadata.stub(endpoint).ListOffsets, request,
                         timeout_s=self._metadata.request_timeout_s, what=f"ListOffsets at {endpoint}")
        except KanalError as error:
            if not error.retriable:
                raise
            return [(tp, 0, error) for tp in tps]
        answers: list[tuple[TopicPartition, int, KanalError | None]] = []
        for topic in reply.topics:
            for p in topic.partitions:
                problem = None
                if p.error != ErrorCode.NONE:
                    problem = KanalError(
                        p.error, f"offsets of {topic.topic}-{p.partition}: {error_name(p.error)}"
                    )
                    if not problem.retriable:
                        raise problem
                answers.append(((topic.topic, p.partition), p.offset, problem))
        return answers

    def starting(self) -> dict[TopicPartition, int]:
        """Where a new query (or a batch read) starts: startingOffsets or startingTimestamp."""
        o = self.options
        parts = self.partitions()
        if o.starting_timestamp_ms is not None:
            return self.offsets(parts, o.starting_timestamp_ms)
        return self.resolve(o.starting, parts)

    def resolve(self, spec: str | Offsets, parts: list[TopicPartition]) -> dict[TopicPartition, int]:
        if spec in ("earliest", "latest"):
            return self.offsets(parts, EARLIEST if spec == "earliest" else LATEST)
        given = positions_of(spec)  # type: ignore[arg-type]
        missing = sorted(set(parts) - set(given)) if not self.options.assign else []
        if self.options.assign:
            parts = sorted(given)  # assign with JSON offsets: the JSON names the partitions
        if missing:
            raise KanalError(
                ErrorCode.INVALID_CONFIG,
                f"offsets JSON leaves out partitions {missing}: give each one (-2 earliest, -1 latest)",
            )
        special = {q: [tp for tp in parts if given[tp] == q] for q in (EARLIEST, LATEST)}
        out = {tp: given[tp] for tp in parts if given[tp] >= 0}
        for query, tps in special.items():
            if tps:
                out.update(self.offsets(tps, query))
        return out


class RangePartition(InputPartition):
    def __init__(self, item: OffsetRange) -> None:
        super().__init__(item)
        self.item = item


def _batch(records: list[ConsumerRecord]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [
            pa.array([r.key for r in records], pa.binary()),
            pa.array([r.value for r in records], pa.binary()),
            pa.array([r.topic for r in records], pa.string()),
            pa.array([r.partition for r in records], pa.int32()),
            pa.array([r.offset for r in records], pa.int64()),
            pa.array([r.timestamp_ms * 1000 for r in records], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            pa.array([CREATE_TIME] * len(records), pa.int32()),
            pa.array(
                [[{"key": k, "value": v} for k, v in r.headers] for r in records],
                ARROW_SCHEMA.field("headers").type,
            ),
        ],
        schema=ARROW_SCHEMA,
    )


def read_range(options: ReadOptions, item: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The committed records of one partition in [item.start, item.end), in offset order."""
    tp = (item.topic, item.partition)
    consumer = Consumer(
        ConsumerConfig(
            options.bootstrap,
            auto_offset_reset="none",
            isolation_level=options.isolation_level,
            fetch_max_wait_ms=100,
            enable_auto_commit=False,
            client_id="kanal-spark",
            security=options.security,
        )
    )
    try:
        consumer.assign([tp])
        if item.start == EARLIEST:
            consumer.seek_to_beginning([tp])
        else:
            consumer.seek(tp, item.start)
        stalled_at = time.monotonic() + RANGE_STALL_S
        position = item.start
        while True:
            try:
                position = consumer.position(tp, timeout_s=RANGE_STALL_S)
                if position >= item.end:
                    return
                records = consumer.poll(_POLL_S)
            except KanalError as exc:
                if exc.code != ErrorCode.OFFSET_OUT_OF_RANGE:
                    raise
                if options.fail_on_data_loss:
                    raise KanalError(
                        ErrorCode.OFFSET_OUT_OF_RANGE,
                        (
                            f"data loss: {item.topic}-{item.partition} no longer holds offsets from "
                            f"{position} "
                            "(retention or truncation deleted them before the query read them): "
                            f"{exc.message}. Set the option "
                            "failOnDataLoss=false to go on from the log start"
                        ),
                    ) from None
                consumer.seek_to_beginning([tp])
                continue
            wanted = [r for r in records if r.offset < item.end]
            if wanted:
                yield _batch(wanted)
                stalled_at = time.monotonic() + RANGE_STALL_S
            if len(wanted) < len(records):
                return
            if not records and time.monotonic() > stalled_at:
                raise KanalError(ErrorCode.REQUEST_TIMED_OUT, (
                    f"{item.topic}-{item.partition}: no record in {RANGE_STALL_S:.0f}s at offset {position}, "
                    f"before the planned end {item.end}"))
    finally:
        consumer.close()


class KanalStreamReader(DataSourceStreamReader):
    """Micro-batches of every subscribed partition's committed records; offsets as `stream_options`."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._offsets: BrokerOffsets | None = None

    def _client(self) -> BrokerOffsets:
        if self._offsets is None:
            self._offsets = BrokerOffsets(self.options)
        return self._offsets

    def initialOffset(self) -> dict:
        return offsets_of(self._client().starting())

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        client = self._client()
        begun = positions_of(start)
        parts = sorted(set(client.partitions()) | set(begun))
        latest = client.offsets(parts, LATEST)
        new = [tp for tp in parts if tp not in begun]
        if new:  # a partition increase or a new topic: read from its earliest offset
            begun.update(client.offsets(new, EARLIEST))
        rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return offsets_of(capped_end(begun, latest, rows))

    def partitions(self, start: dict, end: dict) -> list[RangePartition]:
        return [RangePartition(r) for r in ranges(positions_of(start), positions_of(end))]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        return read_range(self.options, partition.item)

    def commit(self, end: dict) -> None:
        """Nothing to do: the offsets live in Spark's checkpoint, not in a consumer group."""

    def stop(self) -> None:
        if self._offsets is not None:
            self._offsets.close()
            self._offsets = None


class KanalBatchReader(DataSourceReader):
    """`spark.read.format("kanal")`: the records between startingOffsets (default earliest) and
    endingOffsets (default latest), fixed when Spark plans the read."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> list[RangePartition]:
        client = BrokerOffsets(self.options)
        try:
            start = client.starting()
            end = client.resolve(self.options.ending, sorted(start))
            latest = client.offsets(sorted(end), LATEST) if isinstance(self.options.ending, dict) else end
        finally:
            client.close()
        beyond = sorted(
            f"{t}-{p}: {end[(t, p)]} > {latest[(t, p)]}" for t, p in end if end[(t, p)] > latest[(t, p)]
        )
        if beyond:  # the records are not there (or not committed): a read would wait for them
            raise KanalError(ErrorCode.INVALID_REQUEST, "endingOffsets past the latest (committed) offsets: "
                                                        + ", ".join(beyond))
        return [RangePartition(r) for r in ranges(start, {tp: max(o, start[tp]) for tp, o in end.items()})]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RangePartition)
        return read_range(self.options, partition.item)
