"""Spark sources, `kanal analytics` and `kanal audit` over a real cluster with a known transactional
history (issue 22): plain records, two committed transactions, an aborted one between them, and a
transaction left open at the end, on a two-partition topic. Every source's rows are compared with what was
produced, at both isolation levels, from files and through brokers; the analytics counts and the audit's
transactional-producer table with the truth."""

from __future__ import annotations

import pytest

from kanal.clients.producer import Producer
from kanal.clients.producer_config import ProducerConfig
from kanal.spark.analytics import run_analytics
from kanal.spark.audit import run_audit
from kanal.v1 import broker_pb2
from kanal.v1.error import ErrorCode

from ..cluster.conftest import create_topic, start_cluster, wait_until
from ..cluster.test_transactions import coordinator_call, visible_ends

pytestmark = [pytest.mark.spark, pytest.mark.cluster]

TOPIC = "txn-spark"
PARTITIONS = 2
MARKERS = 3 * PARTITIONS  # three ended transactions, each on both partitions


def _values(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(n)]


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """Yield (cluster, truth): truth maps each kind of record to the values produced as that kind."""
    cluster = start_cluster(tmp_path_factory, "txn-spark")
    open_producer = None
    try:
        create_topic(cluster, TOPIC, partitions=PARTITIONS)
        truth = {"plain": _values("plain", 6), "committed": _values("c1", 10) + _values("c3", 4),
                 "aborted": _values("ab", 8), "open": _values("open", 5)}
        with Producer(ProducerConfig(cluster.bootstrap, acks="all", linger_ms=0)) as plain:
            for i, v in enumerate(truth["plain"]):
                plain.produce(TOPIC, v, partition=i % PARTITIONS)
            assert plain.flush(30)
        with Producer(ProducerConfig(cluster.bootstrap, transactional_id="spark-a", linger_ms=0)) as producer:
            producer.init_transactions()
            for prefix, n, commit in (("c1", 10, True), ("ab", 8, False), ("c3", 4, True)):
                producer.begin_transaction()
                for i, v in enumerate(_values(prefix, n)):
                    producer.produce(TOPIC, v, partition=i % PARTITIONS)
                if commit:
                    producer.commit_transaction()
                else:
                    producer.flush()
                    producer.abort_transaction()
        # Every marker is written once read_committed sees as far as read_uncommitted (nothing open).
        wait_until(
            lambda: (
                visible_ends(cluster, TOPIC, PARTITIONS, "read_committed")
                == visible_ends(cluster, TOPIC, PARTITIONS, "read_uncommitted")
            ),
            30,
            "every marker written",
        )
        open_producer = Producer(ProducerConfig(cluster.bootstrap, transactional_id="spark-b", linger_ms=0,
                                                transaction_timeout_ms=900_000))
        open_producer.init_transactions()
        open_producer.begin_transaction()
        for i, v in enumerate(truth["open"]):
            open_producer.produce(TOPIC, v, partition=i % PARTITIONS)
        assert open_producer.flush(30)
        yield cluster, truth
    finally:
        if open_producer is not None:
            open_producer.close()
        cluster.stop()


def _read(spark, cluster, isolation: str, live: bool):
    reader = spark.read.format("kanal-log").option("topics", TOPIC).option("isolationLevel", isolation)
    df = reader.option("bootstrap", cluster.bootstrap).load() if live else reader.load(str(cluster.data_dir))
    rows = df.select("value", "producer_id", "_corrupt").collect()
    assert [r["_corrupt"] for r in rows if r["_corrupt"] is not None] == []
    return sorted(r["value"] for r in rows)


@pytest.mark.parametrize("live", [False, True], ids=["files", "brokers"])
def test_each_isolation_level_gives_exactly_the_records_it_should(history, spark, live):
    cluster, truth = history
    committed = sorted(truth["plain"] + truth["committed"])
    assert _read(spark, cluster, "read_committed", live) == committed, "no aborted or open record, no marker"
    everything = sorted(v for values in truth.values() for v in values)
    assert _read(spark, cluster, "read_uncommitted", live) == everything, "every data record, no marker"
    default = spark.read.format("kanal-log").option("topics", TOPIC)
    df = (
        default.option("bootstrap", cluster.bootstrap).load() if live else default.load(str(cluster.data_dir))
    )
    assert df.count() == len(everything), "read_uncommitted is the default, as Kafka's"


def test_a_bad_isolation_level_is_refused(history, spark):
    cluster, _ = history
    with pytest.raises(Exception, match="isolationLevel must be one of"):
        spark.read.format("kanal-log").option("isolationLevel", "committed").load(
            str(cluster.data_dir)
        ).count()


@pytest.mark.parametrize("live", [False, True], ids=["files", "brokers"])
def test_analytics_counts_transactional_records_by_outcome(history, spark, tmp_path, live):
    cluster, truth = history
    where = {"bootstrap": cluster.bootstrap} if live else {"data_dir": cluster.data_dir}
    result = run_analytics(spark, out_dir=tmp_path, topics=[TOPIC], **where)
    [row] = result.tables["transactions"].collect()
    assert row.asDict() == {
        "topic": TOPIC,
        "partitions": PARTITIONS,
        "plain_records": len(truth["plain"]),
        "committed_records": len(truth["committed"]),
        "aborted_records": len(truth["aborted"]),
        "open_records": len(truth["open"]),
        "control_records": MARKERS,
    }
    records = sum(r["records"] for r in result.tables["partition_stats"].collect())
    assert records == len(truth["plain"]) + len(truth["committed"]), (
        "only what read_committed shows is a record"
    )
    assert list((tmp_path / "transactions").glob("*.parquet"))


def test_audit_lists_transactional_producers(history, spark, tmp_path):
    cluster, _ = history
    described = coordinator_call(cluster, "spark-b", "DescribeTransactions",
                                 broker_pb2.DescribeTransactionsRequest(transactional_ids=["spark-b"]))
    assert described.transactions[0].error == ErrorCode.NONE
    state = described.transactions[0].state
    result = run_audit(spark, cluster.data_dir, tmp_path)
    producers = {
        r["transactional_id"]: r.asDict() for r in result.tables["transactional_producers"].collect()
    }
    assert set(producers) == {"spark-a", "spark-b"}
    a, b = producers["spark-a"], producers["spark-b"]
    assert (a["state"], a["transactions_started"], a["commits"], a["aborts"]) == ("COMPLETE_COMMIT", 3, 2, 1)
    assert (b["state"], b["transactions_started"], b["commits"], b["aborts"]) == ("ONGOING", 1, 0, 0)
    assert sorted(b["partitions"]) == [f"{TOPIC}-{p}" for p in range(PARTITIONS)]
    assert (b["producer_id"], b["producer_epoch"], b["timeout_ms"]) == (
        state.producer_id,
        state.producer_epoch,
        900_000,
    )
    assert a["producer_id"] != b["producer_id"] and a["producer_id"] > 0
    states = result.tables["transaction_states"].where("transactional_id = 'spark-a'").orderBy("offset")
    assert [r["state"] for r in states.collect()] == [
        "EMPTY",
        *[
            "ONGOING",
            "PREPARE_COMMIT",
            "COMPLETE_COMMIT",
            "ONGOING",
            "PREPARE_ABORT",
            "COMPLETE_ABORT",
            "ONGOING",
            "PREPARE_COMMIT",
            "COMPLETE_COMMIT",
        ],
    ]
    assert list((tmp_path / "transactional_producers").glob("*.parquet"))
