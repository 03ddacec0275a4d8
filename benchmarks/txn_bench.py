"""The cost of transactions (issue 22), against a one-broker cluster the benchmark starts itself.

    python benchmarks/txn_bench.py [--records 50000] [--rounds 5] [--record-bytes 100]

Cases, side by side in one run, alternating in each of --rounds rounds (medians; PERFORMANCE.md):
  produce_idempotent     kanal's Producer (acks=all, idempotent), produce_many() 1,000 records per call
  produce_transactional  the same records in transactions of 1,000 records: begin, produce_many(1,000),
                         commit (EndTxn, markers) per transaction
  produce_idempotent_flush_each
                         the idempotent producer waiting for each 1,000 records' acknowledgement
                         (produce_many + flush): what a transaction pays before EndTxn at the least, as
                         its records must be acknowledged before the commit is decided; the ratio of
                         this case to produce_idempotent bounds what any coordinator design can reach
  consume_read_uncommitted / consume_read_committed
                         kanal's Consumer reading the transactional topic from the start, at each isolation
                         level (read_committed also drops the markers and checks the aborted list)
Goal: produce_transactional >= 50 % of produce_idempotent's records/s. Prints one JSON object with
every round, the medians and the ratios. Every loop is bounded by record count and time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from kanal.clients.admin import Admin
from kanal.clients.consumer import Consumer, ConsumerConfig
from kanal.clients.producer import Producer
from kanal.clients.producer_config import ProducerConfig
from kanal.deploy.local_cluster import LocalCluster

RECORDS_PER_TXN = 1000
CASE_SECONDS_MAX = 300

BROKER_FLAGS = ["--offsets-topic-replication-factor", "1", "--transaction-state-replication-factor", "1",
                "--transaction-state-partitions", "5", "--offsets-topic-partitions", "5"]


def produce(bootstrap: str, topic: str, values: list[bytes], phases_ms: dict[str, float], *,
            transactional_id: str = "", flush_each: bool = False) -> float:
    """Records/s of producing `values`, 1,000 per call (and per transaction when transactional). A
    transactional run adds to `phases_ms` where a transaction's time goes, in ms per transaction: the
    application's calls (begin, produce_many, commit) and, inside them, the coordinator calls (the
    producer's call_seconds_total; AddPartitionsToTxn runs on the sender thread, inside produce or commit)."""
    producer = Producer(ProducerConfig(bootstrap, transactional_id=transactional_id))
    spent = {"begin": 0.0, "produce_many": 0.0, "commit": 0.0}
    try:
        if transactional_id:
            producer.init_transactions()
        started = time.perf_counter()
        deadline = started + CASE_SECONDS_MAX
        for i in range(0, len(values), RECORDS_PER_TXN):
            if time.perf_counter() > deadline:
                raise RuntimeError("produce case over its time bound")
            chunk = values[i:i + RECORDS_PER_TXN]
            if transactional_id:
                t0 = time.perf_counter()
                producer.begin_transaction()
                t1 = time.perf_counter()
                producer.produce_many(topic, chunk, partition=0)
                t2 = time.perf_counter()
                producer.commit_transaction()
                t3 = time.perf_counter()
                spent["begin"] += t1 - t0
                spent["produce_many"] += t2 - t1
                spent["commit"] += t3 - t2
            else:
                producer.produce_many(topic, chunk, partition=0)
                if flush_each and not producer.flush(CASE_SECONDS_MAX):
                    raise RuntimeError("records not acknowledged in time")
        if not producer.flush(CASE_SECONDS_MAX):
            raise RuntimeError("records not acknowledged in time")
        rate = len(values) / (time.perf_counter() - started)
        if transactional_id and producer._txn is not None:
            transactions = len(values) / RECORDS_PER_TXN
            for name, seconds in spent.items():
                phases_ms[name] = round(1000 * seconds / transactions, 3)
            for method, seconds in producer._txn.call_seconds_total.items():
                if method != "InitProducerId":
                    phases_ms[f"call_{method}"] = round(1000 * seconds / transactions, 3)
            for method, retries in producer._txn.call_retries_total.items():
                phases_ms[f"retries_{method}"] = round(retries / transactions, 3)
        return rate
    finally:
        producer.close()


def consume(bootstrap: str, topic: str, expected: int, isolation: str) -> float:
    consumer = Consumer(ConsumerConfig(bootstrap, auto_offset_reset="earliest", isolation_level=isolation,
                                       max_poll_records=10_000, fetch_max_wait_ms=50))
    try:
        consumer.assign([(topic, 0)])
        got = 0
        started = time.perf_counter()
        deadline = started + CASE_SECONDS_MAX
        while got < expected:
            if time.perf_counter() > deadline:
                raise RuntimeError(f"consumed {got} of {expected} in {CASE_SECONDS_MAX}s")
            got += len(consumer.poll(1.0))
        return got / (time.perf_counter() - started)
    finally:
        consumer.close()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--records", type=int, default=50_000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--record-bytes", type=int, default=100)
    args = p.parse_args()
    if not 1_000 <= args.records <= 5_000_000 or not 1 <= args.rounds <= 20:
        raise SystemExit("--records in [1000, 5000000], --rounds in [1, 20]")
    values = [(b"%08d" % i).ljust(args.record_bytes, b"x") for i in range(args.records)]
    with tempfile.TemporaryDirectory(prefix="kanal-txn-bench-") as root:
        cluster = LocalCluster(Path(root), controllers=1, brokers=1, broker_flags=BROKER_FLAGS)
        cluster.start(timeout_s=120)
        try:
            admin = Admin(cluster.bootstrap)
            rounds = []
            phase_rounds: list[dict[str, float]] = []
            for r in range(args.rounds):
                idem_topic, txn_topic = f"idem-{r}", f"txn-{r}"
                admin.create_topic(idem_topic, 1, 1)
                admin.create_topic(txn_topic, 1, 1)
                row: dict[str, float] = {}
                phases: dict[str, float] = {}
                # Alternate which goes first, so neither always meets a warmer (or busier) machine.
                order = ["idempotent", "flush_each", "transactional"]
                if r % 2:
                    order.reverse()
                for case in order:
                    if case == "idempotent":
                        row["produce_idempotent"] = produce(cluster.bootstrap, idem_topic, values, phases)
                    elif case == "flush_each":
                        row["produce_idempotent_flush_each"] = produce(
                            cluster.bootstrap, idem_topic, values, phases, flush_each=True
                        )
                    else:
                        row["produce_transactional"] = produce(cluster.bootstrap, txn_topic, values, phases,
                                                               transactional_id=f"bench-{r}")
                levels = ["read_uncommitted", "read_committed"] if r % 2 == 0 else ["read_committed",
                                                                                    "read_uncommitted"]
                for level in levels:
                    row[f"consume_{level}"] = consume(cluster.bootstrap, txn_topic, args.records, level)
                rounds.append({k: round(v) for k, v in row.items()})
                phase_rounds.append(phases)
            admin.close()
        finally:
            cluster.stop()
    medians = {k: round(statistics.median(r[k] for r in rounds)) for k in rounds[0]}
    result = {
        "records": args.records,
        "record_bytes": args.record_bytes,
        "records_per_transaction": RECORDS_PER_TXN,
        "rounds": rounds,
        "medians_records_s": medians,
        "transactional_ms_per_transaction_medians": {
            k: round(statistics.median(r.get(k, 0.0) for r in phase_rounds), 3) for k in phase_rounds[0]
        },
        "produce_transactional_over_idempotent": round(
            medians["produce_transactional"] / medians["produce_idempotent"], 3
        ),
        "produce_goal_met": medians["produce_transactional"] >= 0.5 * medians["produce_idempotent"],
        "produce_idempotent_flush_each_over_idempotent": round(
            medians["produce_idempotent_flush_each"] / medians["produce_idempotent"], 3
        ),
        "consume_read_committed_over_read_uncommitted": round(
            medians["consume_read_committed"] / medians["consume_read_uncommitted"], 3
        ),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
