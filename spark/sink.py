"""The `kanal` sink: `df.write.format("kanal")` and `df.writeStream.format("kanal")` produce one record per
row through kanal's producer (`kanal.clients.producer`: idempotent, acks=all).

Columns (as the Spark–Kafka connector's): `value` (binary or string, required), `key` (binary or string),
`topic` (string; the `topic` option when the column is missing or null), `partition` (int; the key's
partition, or the sticky one without a key, when missing or null), `headers` (array<struct<key: string,
value: binary>>). Any other column is refused before a task runs.

Batch writes (`df.write`): each task produces its rows and waits for every acknowledgement; the job fails
if one record fails. A retried task writes its rows again (at-least-once, as the Kafka connector).

Streams (`writeStream`): exactly-once per micro-batch. Each task writes its rows in one transaction of the
transactional id `<prefix>-<Spark partition>` (prefix: the option `transactionalIdPrefix`, else
`kanal-sink-<query id>`; the query id survives a restart from the checkpoint). With the rows the
transaction commits, as the offset of a consumer group named like the id, the number of the micro-batch
plus one (the "marker"). Before it writes, a task initialises its id — fencing an older attempt of the same
task and finishing a transaction one left open — and reads the marker: when that batch already committed
(the query stopped or failed after the write and before Spark recorded the batch as done, and replays it
after a restart), the task writes nothing. So each batch's rows are committed once, and a reader at
read_committed (the `kanal` source's default) sees each row once. This needs the micro-batch replayed with
the same rows in the same Spark partitions, which holds for deterministic plans over a replayable source
(the `kanal` source replays the same offset ranges from the checkpoint); a plan that repartitions
randomly (`repartition(n)` without columns) can move rows between tasks on a replay and break it.
Readers at read_uncommitted may see records of aborted attempts.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from kanal.clients.admin import Admin
from kanal.clients.producer import Producer
from kanal.clients.producer_config import ProducerConfig
from kanal.spark.stream_options import WriteOptions
from kanal.v1.error import ErrorCode, KanalError

# Spark sets these task-local properties for every task of a micro-batch (StreamExecution).
_BATCH_ID_PROPERTY = "streaming.sql.batchId"
_QUERY_ID_PROPERTY = "sql.streaming.queryId"
_CLIENT_ID = "kanal-spark-sink"
FLUSH_TIMEOUT_S = 120.0


def _header_type_ok(field_type) -> bool:
    if not isinstance(field_type, ArrayType) or not isinstance(field_type.elementType, StructType):
        return False
    inner = {f.name: f.dataType for f in field_type.elementType.fields}
    return set(inner) == {"key", "value"} and isinstance(inner["key"], StringType) \
        and isinstance(inner["value"], BinaryType | StringType)


def check_sink_schema(schema: StructType, options: WriteOptions) -> None:
    """Refuse, before any task runs, columns the sink does not know or types it cannot write."""
    types = {f.name: f.dataType for f in schema.fields}
    allowed = {"key": (BinaryType, StringType), "value": (BinaryType, StringType), "topic": (StringType,),
               "partition": (IntegerType,)}
    problems = [f"unknown column {name!r}" for name in types if name not in (*allowed, "headers")]
    problems += [f"column {name} must be {' or '.join(t.__name__[:-4].lower() for t in kinds)}, not "
                 f"{types[name].simpleString()}" for name, kinds in allowed.items()
                 if name in types and not isinstance(types[name], kinds)]
    if "headers" in types and not _header_type_ok(types["headers"]):
        problems.append("column headers must be array<struct<key: string, value: binary>>")
    if "value" not in types:
        problems.append("a value column is required")
    if "topic" not in types and not options.topic:
        problems.append("rows have no topic column: give the option topic")
    if problems:
        raise KanalError(ErrorCode.INVALID_REQUEST, "kanal sink: " + "; ".join(problems)
                         + " (columns: key, value, topic, partition, headers)")


@dataclass
class SinkCommit(WriterCommitMessage):
    partition_id: int
    records: int
    skipped_batch: bool = False  # a replayed micro-batch this task had already committed


def _producer(options: WriteOptions, transactional_id: str = "") -> Producer:
    return Producer(
        ProducerConfig(
            options.bootstrap,
            acks="all",
            enable_idempotence=True,
            client_id=_CLIENT_ID,
            security=options.security,
            transactional_id=transactional_id,
        )
    )


def _as_bytes(value) -> bytes | None:
    return value.encode() if isinstance(value, str) else (None if value is None else bytes(value))


class _Failures:
    """The first delivery failure of a task's records (callbacks run on the producer's threads)."""

    def __init__(self) -> None:
        self.first: Exception | None = None

    def __call__(self, error, _metadata) -> None:
        if error is not None and self.first is None:
            self.first = error


def produce_rows(producer: Producer, rows: Iterator, options: WriteOptions) -> tuple[int, str]:
    """Queue every row; returns (records, the first record's topic). Raises on a row without a topic."""
    failures = _Failures()
    count, first_topic = 0, ""
    for row in rows:
        fields = row.asDict()
        topic = fields.get("topic") or options.topic
        if not topic:
            raise KanalError(
                ErrorCode.INVALID_REQUEST, "kanal sink: a row has a null topic and no topic option"
            )
        headers = [(h["key"], _as_bytes(h["value"])) for h in (fields.get("headers") or [])]
        producer.produce(topic, _as_bytes(fields["value"]), key=_as_bytes(fields.get("key")),
                         partition=fields.get("partition"), headers=headers or None, on_delivery=failures)
        first_topic = first_topic or topic
        count += 1
    if not producer.flush(FLUSH_TIMEOUT_S):
        raise KanalError(
            ErrorCode.REQUEST_TIMED_OUT, f"kanal sink: records not acknowledged in {FLUSH_TIMEOUT_S}s"
        )
    if failures.first is not None:
        raise failures.first
    return count, first_topic


def _task_partition() -> int:
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.partitionId() if context is not None else 0


class KanalBatchWriter(DataSourceWriter):
    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator) -> SinkCommit:
        producer = _producer(self.options)
        try:
            count, _ = produce_rows(producer, iterator, self.options)
        finally:
            producer.close()
        return SinkCommit(_task_partition(), count)


def committed_batches(options: WriteOptions, transactional_id: str) -> int:
    """How many micro-batches the task of this id has committed (its marker; 0 for none)."""
    with Admin(options.bootstrap, security=options.security) as admin:
        marks = admin.group_offsets(transactional_id)
    return max([offset for offset in marks.values() if offset >= 0], default=0)


class KanalStreamWriter(DataSourceStreamWriter):
    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator) -> SinkCommit:
        from pyspark import TaskContext

        context = TaskContext.get()
        batch = context.getLocalProperty(_BATCH_ID_PROPERTY) if context is not None else None
        query = context.getLocalProperty(_QUERY_ID_PROPERTY) if context is not None else None
        if context is None or batch is None or (query is None and not self.options.transactional_id_prefix):
            raise KanalError(
                ErrorCode.INVALID_REQUEST,
                "kanal sink: a stream task without Spark's batch and query ids; exactly-once needs them",
            )
        batch_id, partition_id = int(batch), context.partitionId()
        transactional_id = f"{self.options.transactional_id_prefix or f'kanal-sink-{query}'}-{partition_id}"
        producer = _producer(self.options, transactional_id)
        try:
            producer.init_transactions()  # fences an older attempt; its open transaction is finished first
            if committed_batches(self.options, transactional_id) > batch_id:
                for _ in iterator:  # Spark expects the input consumed
                    pass
                return SinkCommit(partition_id, 0, skipped_batch=True)
            producer.begin_transaction()
            try:
                count, topic = produce_rows(producer, iterator, self.options)
                if count:
                    producer.send_offsets_to_transaction({(topic, 0): batch_id + 1}, transactional_id)
                producer.commit_transaction(FLUSH_TIMEOUT_S)
            except BaseException:
                with contextlib.suppress(KanalError):  # fenced or already ended: nothing left to abort
                    producer.abort_transaction(FLUSH_TIMEOUT_S)
                raise
        finally:
            producer.close()
        return SinkCommit(partition_id, count)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: each task committed its own transaction (see the module docstring)."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo here: a task that failed left its transaction open; the retry's (or the replay's)
        init_transactions aborts it, and the transaction timeout does when neither comes."""
