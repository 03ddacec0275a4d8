"""The `kanal` source and sink (Structured Streaming and batch) against a real cluster, each option held to
what a plain reading with the Python consumer returns; a stream through a leader's SIGKILL and a restart
from its checkpoint (with the last micro-batch replayed) holding every acknowledged record exactly once.

Spark tests are slow: few tests, each checking whole row sets."""

from __future__ import annotations

import json
import threading
import time

import pytest

from kanal.clients.admin import TOPIC, Admin
from kanal.clients.cluster_metadata import ClusterMetadata
from kanal.clients.consumer import Consumer, ConsumerConfig
from kanal.clients.producer import Producer
from kanal.clients.producer_config import ProducerConfig
from kanal.spark.stream_options import EARLIEST, LATEST, ReadOptions
from kanal.spark.stream_source import BrokerOffsets
from kanal.v1.error import KanalError

from ..cluster.conftest import broker_node, create_topic, partition_info, start_cluster, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.cluster]

Row = tuple  # (key, value, topic, partition, offset, timestamp ms, headers)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = start_cluster(tmp_path_factory, "stream")
    yield c
    c.stop()


def plain_reading(bootstrap: str, partitions: list[tuple[str, int]], isolation: str = "read_committed",
                  start: dict | None = None, end: dict | None = None) -> list[Row]:
    """The records of `partitions` from `start` (default: the log start) to `end` (default: the last
    stable offset), read with the Python consumer."""
    offsets = BrokerOffsets(ReadOptions(bootstrap, assign=tuple(partitions), isolation_level=isolation))
    try:
        ends = {**offsets.offsets(partitions, LATEST), **(end or {})}
        starts = {**offsets.offsets(partitions, EARLIEST), **(start or {})}
    finally:
        offsets.close()
    out: list[Row] = []
    with Consumer(ConsumerConfig(bootstrap, auto_offset_reset="none", isolation_level=isolation,
                                 enable_auto_commit=False, fetch_max_wait_ms=100)) as consumer:
        consumer.assign(partitions)
        for tp in partitions:
            consumer.seek(tp, starts[tp])
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < ends[tp] for tp in partitions):
            assert time.monotonic() < deadline, "plain reading stalled"
            for r in consumer.poll(0.2):
                if r.offset < ends[(r.topic, r.partition)]:
                    out.append((r.key, r.value, r.topic, r.partition, r.offset, r.timestamp_ms,
                                tuple((k, v) for k, v in r.headers)))
    return sorted(out, key=lambda r: (r[2], r[3], r[4]))


def spark_rows(df) -> list[Row]:
    rows = []
    for r in df.collect():
        assert r.timestampType == 0
        rows.append((r.key, r.value, r.topic, r.partition, r.offset, round(r.timestamp.timestamp() * 1000),
                     tuple((h.key, h.value) for h in r.headers)))
    return sorted(rows, key=lambda r: (r[2], r[3], r[4]))


def produce(
    bootstrap: str, topic: str, count: int, tag: str, base_ms: int = 0, partition: int | None = None
) -> dict[tuple[int, int], bytes]:
    """`count` records a second apart in timestamp from `base_ms` (default: now - count s; within the
    topics' 7-day retention, which deletes by record time), to `partition` or as the partitioner puts them."""
    base_ms = base_ms or int(time.time() * 1000) - count * 1000
    acked = {}
    with Producer(ProducerConfig(bootstrap, acks="all", linger_ms=1)) as producer:
        futures = [
            (
                producer.produce(
                    topic,
                    f"{tag}-{i}".encode(),
                    key=f"k{i % 7}".encode() if i % 3 else None,
                    partition=partition,
                    headers=[("n", str(i).encode()), ("empty", None)] if i % 4 == 0 else None,
                    timestamp=base_ms + i * 1000,
                ),
                f"{tag}-{i}".encode(),
            )
            for i in range(count)
        ]
        producer.flush(60)
        for future, value in futures:
            meta = future.result(60)
            acked[(meta.partition, meta.offset)] = value
    return acked


def test_options_and_sink_match_a_plain_reading(cluster, spark, tmp_path):
    boot = cluster.bootstrap
    create_topic(cluster, "opts", partitions=3)
    base_ms = int(time.time() * 1000) - 600_000
    produce(boot, "opts", 240, "a", base_ms)
    # An aborted transaction and a committed one: read_committed shows only the second.
    with Producer(ProducerConfig(boot, acks="all", transactional_id="opts-txn")) as tx:
        tx.init_transactions()
        for commit in (False, True):
            tx.begin_transaction()
            for i in range(30):
                tx.produce("opts", f"txn-{commit}-{i}".encode(), partition=i % 3)
            (tx.commit_transaction if commit else tx.abort_transaction)()
    every = [("opts", p) for p in range(3)]
    # The commit's markers reach the partitions' last stable offsets a moment after commit_transaction.
    plain = wait_until(lambda: len(rows := plain_reading(boot, every)) == 270 and rows, 60,
                       "the committed transaction to be readable")
    assert not [r for r in plain if r[1].startswith(b"txn-False")]

    def read(**options):
        reader = spark.read.format("kanal").option("kafka.bootstrap.servers", boot)
        for k, v in options.items():
            reader = reader.option(k, v)
        return spark_rows(reader.load())

    assert read(subscribe="opts") == plain
    assert read(subscribePattern="op.s", startingOffsets="earliest", endingOffsets="latest") == plain
    uncommitted = plain_reading(boot, every, "read_uncommitted")
    assert read(subscribe="opts", **{"kafka.isolation.level": "read_uncommitted"}) == uncommitted
    assert len(uncommitted) == 300
    assert read(assign=json.dumps({"opts": [0, 2]}), startingOffsets=json.dumps({"opts": {"0": 5, "2": -2}}),
                endingOffsets=json.dumps({"opts": {"0": 40, "2": -1}})) == plain_reading(
        boot, [("opts", 0), ("opts", 2)], start={("opts", 0): 5}, end={("opts", 0): 40})
    with pytest.raises(Exception, match="past the latest"):
        read(assign='{"opts":[1]}', endingOffsets='{"opts":{"1":100000}}')
    at = base_ms + 120_000
    by_time = [r for r in plain if not r[1].startswith(b"txn") and r[5] >= at]
    firsts = {p: min(r[4] for r in by_time if r[3] == p) for p in range(3)}
    assert read(subscribe="opts", startingTimestamp=str(at)) == [r for r in plain if r[4] >= firsts[r[3]]]

    # A stream with maxOffsetsPerTrigger: every micro-batch within the limit, all of them the plain reading;
    # then a partition increase and new records, picked up from the new partition's start.
    sizes: list[int] = []
    got: list = []
    batch_ids: list[int] = []

    def keep(batch_df, batch_id):
        rows = spark_rows(batch_df)
        sizes.append(len(rows))
        got.extend(rows)
        batch_ids.append(batch_id)

    def settled(count: int) -> bool:
        # `count` rows and the query's progress past the last batch that brought some, so no foreachBatch
        # callback runs when the query is stopped (a stop during one waited for ever once, in
        # test_metadata_stream).
        progress = query.lastProgress
        return len(got) >= count and progress is not None and progress["batchId"] >= max(batch_ids)

    stream = (spark.readStream.format("kanal").option("bootstrap", boot).option("subscribe", "opts")
              .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "50").load())
    query = (stream.writeStream.foreachBatch(keep).option("checkpointLocation", str(tmp_path / "ck-opts"))
             .trigger(processingTime="100 milliseconds").start())
    try:
        wait_until(lambda: len(got) >= 270 or query.exception(), 240, "the stream to read 270 records")
        with Admin(boot) as admin:
            admin.create_partitions("opts", 4)
        def new_partition_led_everywhere() -> bool:
            # Every broker: the producer below takes its metadata from whichever answers first, and one that
            # has not applied the increase would have it put every record in the old partitions.
            for node in cluster.brokers:
                md = ClusterMetadata(node.endpoint, request_timeout_ms=2000)
                try:
                    parts = md.refresh(["opts"]).topics.get("opts") or []
                except KanalError:
                    return False
                finally:
                    md.close()
                if not any(p.partition == 3 and p.leader >= 0 for p in parts):
                    return False
            return True

        wait_until(new_partition_led_everywhere, 30, "a leader for opts-3 on every broker")
        produce(boot, "opts", 40, "b", partition=3)
        wait_until(lambda: settled(310) or query.exception(), 240, "the stream to read the new records")
    finally:
        query.stop()
    assert query.exception() is None
    assert max(sizes) <= 50
    assert sorted(got, key=lambda r: (r[2], r[3], r[4])) == plain_reading(boot, [*every, ("opts", 3)])
    assert sum(r[3] == 3 for r in got) == 40  # the new partition, read from its start

    # The batch sink: every row once, keys, headers, explicit partitions, topics from a column or the option.
    create_topic(cluster, "sunk", partitions=2)
    rows = [
        (
            f"v{i}".encode(),
            f"k{i}" if i % 2 else None,
            "sunk" if i % 3 else None,
            i % 2 if i % 5 else None,
            [("h", f"{i}".encode())] if i % 4 == 0 else [],
        )
        for i in range(200)
    ]
    df = spark.createDataFrame(rows, "value binary, key string, topic string, partition int, "
                                     "headers array<struct<key: string, value: binary>>")
    df.write.format("kanal").option("bootstrap", boot).option("topic", "sunk").mode("append").save()
    written = plain_reading(boot, [("sunk", 0), ("sunk", 1)])
    assert sorted(r[1] for r in written) == sorted(v for v, *_ in rows)
    by_value = {r[1]: r for r in written}
    for value, key, _, partition, headers in rows:
        stored = by_value[value]
        assert stored[0] == (key.encode() if key else None)
        assert partition is None or stored[3] == partition
        assert stored[6] == tuple(headers)
    with pytest.raises(Exception, match="unknown column 'extra'"):
        spark.createDataFrame([(b"x", 1)], "value binary, extra int").write.format("kanal") \
            .option("bootstrap", boot).option("topic", "sunk").mode("append").save()


def test_fail_on_data_loss(cluster, spark):
    boot = cluster.bootstrap
    create_topic(cluster, "lossy", partitions=1, **{"segment.bytes": "8192"})
    for round_ in range(10):  # small batches: a batch must fit in a segment
        produce(boot, "lossy", 100, f"x{round_}")
    # Retention only once every record is in: one retention pass then deletes all it ever will, so the
    # log start cannot move between the readings compared below (a pass between two produce rounds would
    # leave more for a later one).
    with Admin(boot) as admin:
        admin.alter_configs(TOPIC, "lossy", {"retention.bytes": "8192"})
    offsets = BrokerOffsets(ReadOptions(boot, assign=(("lossy", 0),)))
    try:
        wait_until(lambda: offsets.offsets([("lossy", 0)], EARLIEST)[("lossy", 0)] > 0, 60,
                   "retention to delete lossy's first segments")
    finally:
        offsets.close()
    reader = (spark.read.format("kanal").option("bootstrap", boot).option("assign", '{"lossy":[0]}')
              .option("startingOffsets", '{"lossy":{"0":0}}'))
    with pytest.raises(Exception, match="data loss"):
        reader.load().collect()
    assert spark_rows(reader.option("failOnDataLoss", "false").load()) == plain_reading(boot, [("lossy", 0)])
    with pytest.raises(KanalError, match="endingOffsets applies to batch"):
        ReadOptions.parse({"bootstrap": boot, "subscribe": "x", "endingOffsets": "latest"}, streaming=True)


class Writer:
    """Produces unique values (acks=all) until stopped, bounded in count and time; records the acks."""

    def __init__(self, bootstrap: str, topic: str, count_max: int = 4000, time_max_s: float = 900.0) -> None:
        self.acked: dict[tuple[int, int], bytes] = {}
        self.errors = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._args = (bootstrap, topic, count_max, time_max_s)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _ack(self, value: bytes):
        def done(error, meta):
            with self._lock:
                if error is None:
                    self.acked[(meta.partition, meta.offset)] = value
                else:
                    self.errors += 1
        return done

    def _run(self) -> None:
        bootstrap, topic, count_max, time_max_s = self._args
        until = time.monotonic() + time_max_s
        with Producer(
            ProducerConfig(bootstrap, acks="all", linger_ms=5, delivery_timeout_ms=60_000)
        ) as producer:
            for i in range(count_max):
                if self._stop.is_set() or time.monotonic() > until:
                    break
                value = f"w-{i}".encode()
                try:
                    producer.produce(topic, value, key=str(i).encode(), on_delivery=self._ack(value))
                except KanalError:
                    with self._lock:
                        self.errors += 1
                time.sleep(0.004)  # a steady ~250 records/s, not a flood, on a loaded machine
            producer.flush(90)

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(120)

    def count(self) -> int:
        with self._lock:
            return len(self.acked)


def test_stream_through_leader_kill_and_restart_exactly_once(cluster, spark, tmp_path):
    """in → Spark (kanal source → kanal sink) → out, while a producer writes to `in`; the leader of in-0
    is SIGKILLed; the query is stopped, its last commit deleted (so the restart replays that micro-batch
    through source and sink), and restarted from its checkpoint. Every acknowledged record of `in` is in
    `out` exactly once, and `out` holds nothing else."""
    boot = cluster.bootstrap
    create_topic(cluster, "in", partitions=2)
    create_topic(cluster, "out", partitions=2)
    checkpoint = tmp_path / "ck"

    def start():
        source = (
            spark.readStream.format("kanal")
            .option("kafka.bootstrap.servers", boot)
            .option("subscribe", "in")
            .option("startingOffsets", "earliest")
            .load()
        )
        out = source.selectExpr(
            "concat(cast(partition as string), ':', cast(offset as string)) as key", "value", "partition"
        )
        return (
            out.writeStream.format("kanal")
            .option("bootstrap", boot)
            .option("topic", "out")
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="200 milliseconds")
            .start()
        )

    def out_count() -> int:
        return len(plain_reading(boot, [("out", 0), ("out", 1)]))

    # On this loaded machine Spark sometimes gives up on a Python worker it started ("failed to connect
    # back", a fixed 10 s in Spark): the query dies as an application's would, and is restarted from its
    # checkpoint as an application's would be, a few times at most. Any other failure fails the test.
    restarts = []
    query = None

    def running():
        nonlocal query
        if query is not None and query.exception() is not None:
            if "failed to connect back" not in str(query.exception()) or len(restarts) >= 3:
                raise AssertionError(f"the query failed: {query.exception()}")
            restarts.append(str(query.exception())[:80])
            query = start()
        return query

    def stopped_cleanly() -> None:
        failure = query.exception()
        assert failure is None or "failed to connect back" in str(failure), f"the query failed: {failure}"

    def copied_at_least(count: int) -> bool:
        running()
        return out_count() >= count

    writer = Writer(boot, "in")
    victim = broker_node(cluster, partition_info(cluster, "in", 0).leader)
    query = start()
    try:
        wait_until(lambda: copied_at_least(300), 240, "the query to copy 300 records")
        victim.kill()
        wait_until(lambda: partition_info(cluster, "in", 0).leader not in (-1, victim.node_id), 60,
                   "a new leader for in-0")
        acked_then = writer.count()
        wait_until(lambda: writer.count() >= acked_then + 200 or not writer.thread.is_alive(), 240,
                   "200 records acknowledged after the failover")
        acked_now = writer.count()
        try:
            wait_until(lambda: copied_at_least(acked_now), 400, "the query to go on past the failover")
        except AssertionError as exc:
            print(f"{exc}: {acked_now} acknowledged ({acked_then} at the kill); restarts {restarts}; "
                  f"{query.lastProgress}; {query.status}")
            raise
    finally:
        query.stop()
    stopped_cleanly()
    # The restart replays the last micro-batch Spark did not record as committed; delete the last record so
    # one replayed batch is certain (the stop may also have interrupted one): its sink tasks must find it
    # committed in kanal and write nothing.
    committed = sorted(
        (p for p in (checkpoint / "commits").iterdir() if p.name.isdigit()), key=lambda p: int(p.name)
    )
    if committed:
        committed[-1].unlink()
        crc = committed[-1].with_name(f".{committed[-1].name}.crc")
        if crc.exists():
            crc.unlink()
    print(f"micro-batches committed before the restart: {len(committed)}")
    cluster.start_node(victim, timeout_s=60)
    query = start()
    try:
        wait_until(
            lambda: writer.count() >= 1500 or not writer.thread.is_alive(), 240, "1,500 acknowledged records"
        )
        writer.stop()
        source_records = plain_reading(boot, [("in", 0), ("in", 1)])
        wait_until(lambda: copied_at_least(len(source_records)), 240, "the query to copy every record")
    finally:
        writer.stop()
        query.stop()
    stopped_cleanly()
    print(f"query restarts after Spark worker timeouts: {restarts}")
    by_place = {(r[3], r[4]): r[1] for r in source_records}
    lost = {k: v for k, v in writer.acked.items() if by_place.get(k) != v}
    assert not lost, (
        f"{len(lost)} acknowledged records not in `in` as acknowledged, e.g. {sorted(lost.items())[:3]}"
    )
    copied = plain_reading(boot, [("out", 0), ("out", 1)])
    keys = [r[0].decode() for r in copied]
    assert len(keys) == len(set(keys)), "a record copied twice"
    assert {tuple(map(int, k.split(":"))): r[1] for k, r in zip(keys, copied)} == by_place
    for r in copied:  # the partition column was honoured
        assert r[3] == int(r[0].decode().split(":")[0])
