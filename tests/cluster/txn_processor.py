"""A consume-transform-produce processor as its own process, for tests that SIGKILL it (issue 22).

    python txn_processor.py BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID INSTANCE RUN

It reads INPUT read_committed in group GROUP (static member INSTANCE, so a restart takes the partitions
over at once), and for each poll writes `<input value>|<run>|<txn>` to OUTPUT (RUN tells this process from
its predecessors) and commits the consumed offsets inside one transaction: exactly once.
init_transactions comes before the group join, so a transaction its predecessor left open is aborted,
and one it committed is complete (its offsets visible), before this instance reads its starting offsets.
Each step is one JSON line on stdout:
  {"event": "ready", "producer_id": P, "epoch": E}
  {"event": "begin", "txn": N, "count": C}
  {"event": "committed", "txn": N}
  {"event": "aborted", "txn": N, "error": NAME}
An abortable error aborts and rewinds to the group's committed offsets; a fatal one exits 2.
"""

from __future__ import annotations

import faulthandler
import json
import signal
import sys

from kanal.clients.consumer import Consumer, ConsumerConfig
from kanal.clients.producer import Producer
from kanal.clients.producer_config import ProducerConfig
from kanal.clients.transactions import TransactionFatalError
from kanal.v1.error import KanalError

POLL_RECORDS_MAX = 10
TRANSACTIONS_MAX = 100_000  # a bound on the loop; the test stops the process long before
ABORT_TRIES_MAX = 10


def emit(**event) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def main() -> int:
    bootstrap, source, sink, group, tid, instance, run = sys.argv[1:8]
    faulthandler.register(
        signal.SIGUSR1, all_threads=True
    )  # the test asks for every thread's stack on a stall
    producer = Producer(
        ProducerConfig(
            bootstrap,
            transactional_id=tid,
            linger_ms=0,
            transaction_timeout_ms=10_000,
            request_timeout_ms=5_000,
            delivery_timeout_ms=30_000,
            max_block_ms=30_000,
        )
    )
    producer.init_transactions()
    emit(event="ready", producer_id=producer._txn.producer_id, epoch=producer._txn.producer_epoch)
    consumer = Consumer(
        ConsumerConfig(
            bootstrap,
            group_id=group,
            group_instance_id=instance,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=3000,
            heartbeat_interval_ms=300,
            max_poll_records=POLL_RECORDS_MAX,
            fetch_max_wait_ms=100,
            request_timeout_ms=5000,
        )
    )
    consumer.subscribe([source])
    for txn in range(TRANSACTIONS_MAX):
        records = consumer.poll(0.5)
        if not records:
            continue
        emit(event="begin", txn=txn, count=len(records))
        try:
            producer.begin_transaction()
            for r in records:
                producer.produce(sink, r.value + f"|{run}|{txn}".encode(), key=r.key)
            positions = {}
            for r in records:
                positions[(r.topic, r.partition)] = r.offset + 1
            producer.send_offsets_to_transaction(positions, group)
            producer.commit_transaction()
            emit(event="committed", txn=txn)
        except TransactionFatalError as exc:
            emit(event="fatal", txn=txn, error=exc.name)
            return 2
        except KanalError as exc:
            emit(event="aborted", txn=txn, error=exc.name)
            for _ in range(ABORT_TRIES_MAX):  # the coordinator may be failing over: each try waits max_block
                try:
                    producer.abort_transaction()
                    break
                except TransactionFatalError:
                    return 2
                except KanalError as again:
                    emit(event="abort_failed", txn=txn, error=again.name)
            else:
                return 3
            committed = consumer.committed(consumer.assignment())
            for tp in consumer.assignment():
                offset = committed.get(tp)
                if offset is None:
                    consumer.seek_to_beginning([tp])
                else:
                    consumer.seek(tp, offset)
    return 0


if __name__ == "__main__":
    sys.exit(main())
