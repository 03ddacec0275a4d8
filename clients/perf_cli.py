"""`kanal perf produce|consume`: load generators with kafka-producer-perf-test's and
kafka-consumer-perf-test's measures.

`perf produce` queues records 1,000 at a time with `produce_many` (or one `produce()` call each with
`--per-record`) and times every record from its call to its acknowledgement: a record's latency is its
batch's acknowledgement time minus the time its call queued it, counted in a LatencyHistogram, so
p50/p95/p99/p99.9/max cover every record. `--throughput N` caps the rate at N records/s (-1, the default:
no cap), as Kafka's flag does. `perf consume` reads a topic from its start and stops at exactly
`--num-records` records (or when the topic has no more for 3 s, or at `--max-seconds`); its latency is
receive time minus each record's timestamp (end to end while a producer runs; the records' age when
reading what is already there). Both show a progress line on stderr (not with `--quiet`) and end with one
JSON summary on stdout.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
from collections.abc import Callable

from kanal.clients.admin import Admin
from kanal.clients.consumer import Consumer, ConsumerConfig
from kanal.clients.latency_histogram import LatencyHistogram
from kanal.clients.producer import Producer
from kanal.clients.producer_config import ProducerConfig, delivery_timeout_covering
from kanal.security.channel_security import ClientSecurity

CHUNK_RECORDS = 1000
IDLE_STOP_S = 3.0
# args -> (bootstrap, security): the client commands' connection settings (kanal.clients.cli)
Connection = Callable[[argparse.Namespace], tuple[str, ClientSecurity | None]]


def add_perf_parser(sub, common: argparse.ArgumentParser, connection: Connection,
                    admin_for: Callable[[argparse.Namespace], Admin], positive_int, positive_float) -> None:
    perf = sub.add_parser("perf", help="load generators: perf produce, perf consume").add_subparsers(
        dest="action", required=True, metavar="ACTION")
    c = perf.add_parser("produce", parents=[common], help="produce records as fast as allowed; JSON summary "
                                                          "(kafka-producer-perf-test)")
    c.add_argument("topic", help="the topic to write to (it must exist)")
    c.add_argument(
        "--num-records", type=positive_int, default=1_000_000, help="records to send (default 1,000,000)"
    )
    c.add_argument("--record-size", type=positive_int, default=100, help="value size in bytes (default 100)")
    c.add_argument("--throughput", type=int, default=-1, metavar="RECORDS_S",
                   help="cap the rate at this many records per second (-1, the default: no cap)")
    c.add_argument(
        "--acks", choices=["0", "1", "all"], default="1", help="acknowledgements to wait for (default 1)"
    )
    c.add_argument("--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"],
                   help="batch compression (default none)")
    c.add_argument(
        "--max-seconds", type=positive_float, default=60, help="stop sending after this long (default 60)"
    )
    c.add_argument("--quiet", action="store_true", help="no progress line on stderr")
    c.add_argument("--per-record", action="store_true",
                   help="call produce() once per record (default: produce_many() once per 1,000 records)")
    c.add_argument("--client-id", default=None,
                   help="the client id brokers key quotas on (default kanal-perf-producer)")
    c.set_defaults(func=lambda args: perf_produce(args, connection))
    c = perf.add_parser("consume", parents=[common], help="read a topic from its start; JSON summary "
                                                          "(kafka-consumer-perf-test)")
    c.add_argument("topic", help="the topic to read")
    c.add_argument("--num-records", type=positive_int, default=1_000_000,
                   help="stop after exactly this many records (default 1,000,000)")
    c.add_argument("--max-seconds", type=positive_float, default=60, help="stop after this long (default 60)")
    c.add_argument("--quiet", action="store_true", help="no progress line on stderr")
    c.add_argument("--client-id", default=None,
                   help="the client id brokers key quotas on (default kanal-perf-consumer)")
    add_client_rack_flag(c)
    c.set_defaults(func=lambda args: perf_consume(args, connection, admin_for))


def add_client_rack_flag(parser: argparse.ArgumentParser) -> None:
    """--client-rack, defaulting to $KANAL_CLIENT_RACK: the consumer commands' client.rack."""
    parser.add_argument("--client-rack", default=os.environ.get("KANAL_CLIENT_RACK", ""),
                        help="this consumer's rack or zone (client.rack; default $KANAL_CLIENT_RACK): "
                             "brokers with a rack-aware replica selector send it to a replica in its rack")


class Progress:
    """The perf commands' progress line on stderr, at most once a second (none with --quiet)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.started = self.last = time.perf_counter()

    def show(self, records: int, nbytes: int, *, final: bool = False) -> None:
        now = time.perf_counter()
        if self.quiet or (now - self.last < 1 and not final):
            return
        self.last = now
        rate = records / (now - self.started)
        print(f"\r{records:>12,} records  {rate:>12,.0f} records/s  "
              f"{nbytes / (now - self.started) / 1e6:>8.1f} MB/s",
              end="", file=sys.stderr, flush=True)

    def end(self, records: int, nbytes: int) -> None:
        """The last line, whatever the time since the previous one, then a newline."""
        self.show(records, nbytes, final=True)
        if not self.quiet:
            print(file=sys.stderr)


def perf_summary(records: int, nbytes: int, elapsed_s: float, latencies: LatencyHistogram, **extra) -> dict:
    return {"records": records, "seconds": round(elapsed_s, 3), "records_s": round(records / elapsed_s),
            "mb_s": round(nbytes / elapsed_s / 1e6, 2), **latencies.summary_ms(), **extra}


class _AckTimer:
    """Times records from their produce call to their batch's acknowledgement (ProducerBatch.completed_s).
    Batches are let go as soon as they are done, so a long run holds only the batches in flight."""

    def __init__(self, histogram: LatencyHistogram) -> None:
        self.histogram = histogram
        self.pending: collections.deque = collections.deque()  # (batch, records of one call, queued at)
        self.failures: list[Exception] = []  # the first batch that failed for good ends the run in one line

    def queued(self, batch_counts, queued_s: float) -> None:
        self.pending.extend((batch, n, queued_s) for batch, n in batch_counts)
        self.collect()

    def collect(self) -> None:
        while self.pending and self.pending[0][0].done.is_set():
            batch, n, queued_s = self.pending.popleft()
            if batch.error is None:
                self.histogram.add(batch.completed_s - queued_s, n)
            elif not self.failures:
                self.failures.append(batch.error)

    def wait_all(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self.pending:
            self.pending[0][0].done.wait(max(0.0, deadline - time.monotonic()))
            if not self.pending[0][0].done.is_set():
                return
            self.collect()


def perf_produce(args, connection: Connection) -> int:
    bootstrap, security = connection(args)
    config = ProducerConfig(bootstrap=bootstrap, security=security, acks=args.acks,
                            enable_idempotence=args.acks == "all", compression=args.compression,
                            client_id=args.client_id or "kanal-perf-producer",
                            request_timeout_ms=args.request_timeout_ms,
                            delivery_timeout_ms=delivery_timeout_covering(args.request_timeout_ms,
                                                                          ProducerConfig.linger_ms))
    value = os.urandom(args.record_size)
    values = [value] * CHUNK_RECORDS
    histogram = LatencyHistogram()
    timer = _AckTimer(histogram)
    # with a cap, chunks small enough that the rate is smooth within a second
    chunk_max = CHUNK_RECORDS if args.throughput <= 0 else max(1, min(CHUNK_RECORDS, args.throughput // 20))
    sent = 0
    failures: list[Exception] = []

    def on_ack(queued_s: float):  # --per-record: one callback per record, as an application has
        def done(err, _meta) -> None:
            if err is None:
                histogram.add(time.monotonic() - queued_s)
            elif not failures:
                failures.append(err)
        return done

    with Producer(config) as producer:
        progress = Progress(args.quiet)
        while sent < args.num_records and time.perf_counter() - progress.started < args.max_seconds:
            if args.throughput > 0:  # pace: the next chunk waits until the cap allows it
                ahead_s = sent / args.throughput - (time.perf_counter() - progress.started)
                if ahead_s > 0:
                    time.sleep(ahead_s)
            chunk = min(chunk_max, args.num_records - sent)
            queued_s = time.monotonic()
            if args.per_record:
                for _ in range(chunk):
                    producer.produce(args.topic, value, on_delivery=on_ack(time.monotonic()))
            else:
                futures = producer.produce_many(
                    args.topic, values if chunk == CHUNK_RECORDS else values[:chunk]
                )
                timer.queued(futures.batch_counts(), queued_s)
            sent += chunk
            progress.show(sent, sent * args.record_size)
        producer.flush()
        timer.wait_all(60)
        elapsed = time.perf_counter() - progress.started
        throttle = producer.metrics()
    progress.end(sent, sent * args.record_size)
    if failures or timer.failures:
        raise (failures or timer.failures)[0]
    print(
        json.dumps(
            perf_summary(
                sent,
                sent * args.record_size,
                elapsed,
                histogram,
                record_size=args.record_size,
                acks=args.acks,
                latency_samples=histogram.count,
                api="produce" if args.per_record else "produce_many",
                **throttle,
            )
        )
    )
    return 0


def perf_consume(args, connection: Connection, admin_for: Callable[[argparse.Namespace], Admin]) -> int:
    with admin_for(args) as admin:
        partitions = [p.partition for p in admin.describe_topic(args.topic).partitions]
    bootstrap, security = connection(args)
    consumer = Consumer(
        ConsumerConfig(
            bootstrap=bootstrap,
            security=security,
            auto_offset_reset="earliest",
            max_poll_records=10_000,
            client_id=args.client_id or "kanal-perf-consumer",
            request_timeout_ms=args.request_timeout_ms,
            client_rack=args.client_rack,
        )
    )
    consumer.assign([(args.topic, p) for p in partitions])
    got = nbytes = 0
    histogram = LatencyHistogram()
    progress = Progress(args.quiet)
    idle_since = time.perf_counter()
    try:
        while got < args.num_records and time.perf_counter() - progress.started < args.max_seconds:
            records = consumer.poll(0.5)
            if not records:
                if time.perf_counter() - idle_since > IDLE_STOP_S:
                    break
                continue
            idle_since = time.perf_counter()
            records = records[:args.num_records - got]  # exactly the count asked, not the last poll's whole
            now_ms = time.time() * 1000
            for r in records:
                histogram.add(max(0.0, now_ms - r.timestamp_ms) / 1000)
            got += len(records)
            nbytes += sum(len(r.value or b"") for r in records)
            progress.show(got, nbytes)
        elapsed = time.perf_counter() - progress.started
        throttle = consumer.metrics()
    finally:
        consumer.close()
    progress.end(got, nbytes)
    print(json.dumps(perf_summary(got, nbytes, elapsed, histogram, **throttle)))
    return 0
