"""End-to-end latency of the `kanal` Structured Streaming source: a producer writes at a fixed rate (2,000
records/s by default) into a local 3-broker cluster; a streaming query (`spark.readStream.format("kanal")`,
100 ms processing-time trigger, local[2]) hands each micro-batch to foreachBatch, which notes the wall
clock when the batch reaches the driver. A record's latency is that time minus the timestamp the producer
stamped in it (both clocks are this machine's). Prints one JSON object with p50/p99/max in ms.

    python benchmarks/spark_stream_bench.py [--rate 2000] [--seconds 30] [--trigger-ms 100] \
        [--master local[2]]

The first 5 s are warm-up (the query's first batches start Python workers): records stamped before it
ended are not counted, however late they arrive. The producer is paced in 10 ms steps, acks=all, linger
5 ms. What a latency holds: producer linger and acknowledgement, the trigger's wait, ListOffsets at the
leaders, one Spark job (task start-up, a consumer per partition fetching its range), and the rows' trip
to the driver.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from kanal.clients.producer import Producer
from kanal.clients.producer_config import ProducerConfig
from kanal.deploy.local_cluster import LocalCluster
from kanal.spark.session import kanal_session

WARM_UP_S = 5.0
PARTITIONS = 2
_STEP_S = 0.01


def _produce(bootstrap: str, topic: str, rate: int, seconds: float, stop: threading.Event) -> int:
    sent = 0
    with Producer(ProducerConfig(bootstrap, acks="all", linger_ms=5)) as producer:
        start = time.monotonic()
        while not stop.is_set() and time.monotonic() - start < seconds:
            due = int((time.monotonic() - start) * rate)
            while sent < due:
                producer.produce(topic, b"x" * 100, timestamp=int(time.time() * 1000))
                sent += 1
            time.sleep(_STEP_S)
        producer.flush(60)
    return sent


def run(rate: int, seconds: float, trigger_ms: int, master: str) -> dict:
    root = Path(tempfile.mkdtemp(prefix="kanal-stream-bench-"))
    cluster = LocalCluster(root / "cluster", controllers=3, brokers=3)
    cluster.start(timeout_s=120)
    spark = kanal_session(master, "kanal-stream-bench", shuffle_partitions=2)
    seen: list[tuple[float, float]] = []  # (producer's timestamp, arrival at the driver), ms
    try:
        from kanal.clients.admin import Admin

        with Admin(cluster.bootstrap) as admin:
            admin.create_topic("bench", PARTITIONS, 3)
        deadline = time.monotonic() + 60
        while True:  # every partition led before the clock starts
            with Admin(cluster.bootstrap) as admin:
                if all(p.leader >= 0 for p in admin.describe_topic("bench").partitions):
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("no leaders for the benchmark topic")
            time.sleep(0.1)

        def note(batch_df, _batch_id) -> None:
            stamps = [r.ts for r in batch_df.selectExpr("unix_millis(timestamp) as ts").collect()]
            now_ms = time.time() * 1000
            seen.extend((ts, now_ms) for ts in stamps if ts is not None)

        stream = (spark.readStream.format("kanal").option("kafka.bootstrap.servers", cluster.bootstrap)
                  .option("subscribe", "bench").option("startingOffsets", "latest").load())
        query = (stream.writeStream.foreachBatch(note).option("checkpointLocation", str(root / "checkpoint"))
                 .trigger(processingTime=f"{trigger_ms} milliseconds").start())
        stop = threading.Event()
        warm = _produce(cluster.bootstrap, "bench", rate, WARM_UP_S, stop)
        # Records stamped from here on are measured; warm-up records that arrive later are not (they carry
        # the query's start-up, which the warm-up is there to leave out).
        measured_from_ms = time.time() * 1000
        sent = _produce(cluster.bootstrap, "bench", rate, seconds, stop)
        deadline = time.monotonic() + 120
        while len(seen) < warm + sent and time.monotonic() < deadline and query.exception() is None:
            time.sleep(0.1)
        query.stop()
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        measured = sorted(now - ts for ts, now in seen if ts >= measured_from_ms)
        quantiles = statistics.quantiles(measured, n=100) if len(measured) >= 2 else [0.0] * 99
        return {"rate_records_per_s": rate, "trigger_ms": trigger_ms, "seconds": seconds, "master": master,
                "records_sent": sent, "records_measured": len(measured),
                "latency_ms": {"p50": round(quantiles[49], 1), "p99": round(quantiles[98], 1),
                               "max": round(measured[-1], 1) if measured else None}}
    finally:
        spark.stop()
        cluster.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=2000, help="records per second the producer writes")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long the measured run lasts")
    parser.add_argument("--trigger-ms", type=int, default=100, help="the query's processing-time trigger")
    parser.add_argument("--master", default="local[2]", help="Spark master")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.rate, args.seconds, args.trigger_ms, args.master), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
