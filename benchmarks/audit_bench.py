"""`kanal audit` over large metadata logs: wall time and the peak memory of the driver (the `kanal audit`
Python process and its Spark JVM) at each size, to show the driver's memory does not grow with the log.
Prints one JSON object.

    python benchmarks/audit_bench.py [--records 1000000,10000000] [--master local[2]]
                                     [--python OTHER_CHECKOUT/.venv/bin/python]

The log is written directly with the storage package: three brokers and a topic of 50 partitions, then
batches of 1,000 records, each with 50 ISR shrinks and 50 ISR expands (one per partition: an
under-replicated interval opened and closed) and 900 broker config changes, every batch applied with
kanal.metadata.apply_batch first so the log is one the controllers could have written. `--python` runs
the command with another checkout's interpreter (its own editable install) on the same files, for a
before/after. Memory is sampled every 0.2 s from /proc (VmRSS of each process of the command's tree);
`driver_python_rss_peak_mib` is the `kanal audit` process, `jvm_rss_peak_mib` the Spark JVM it started
(in local mode the executors run inside it: --driver-memory bounds its heap).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from kanal.broker.storage.log import Log
from kanal.broker.storage.log_config import LogConfig
from kanal.metadata import MetadataImage, apply_batch
from kanal.metadata.log_codec import encode_metadata_batch
from kanal.v1 import metadata_pb2 as m

T0 = 1_700_000_000_000
TOPIC_ID = "00000000-0000-4000-8000-0000000000b1"
PARTITIONS = 50
BATCH_RECORDS = 1000
CONFIG = LogConfig(segment_bytes_max=256 * 1024 * 1024, batch_bytes_max=4 * 1024 * 1024, retention_ms=None)
SAMPLE_INTERVAL_S = 0.2


def _record(i: int, **body) -> m.MetadataRecord:
    return m.MetadataRecord(time_ms=T0 + i, principal="User:bench", request_id=f"r{i // 10}", **body)


def setup_batches() -> list[m.MetadataBatch]:
    brokers = [m.MetadataBatch(controller_epoch=1, records=[_record(b, register_broker=m.RegisterBrokerRecord(
        broker_id=b, incarnation_id=f"inc-{b}", broker_epoch=b + 1, endpoint=f"127.0.0.1:{9000 + b}"))])
        for b in range(3)]
    topic = m.MetadataBatch(controller_epoch=1, records=[
        _record(3, topic=m.TopicRecord(name="bench", topic_id=TOPIC_ID)),
        *[_record(3, partition=m.PartitionRecord(topic_id=TOPIC_ID, partition_id=p, replicas=[0, 1, 2],
                                                 isr=[0, 1, 2], leader=p % 3)) for p in range(PARTITIONS)]])
    return [*brokers, topic]


def churn_batch() -> m.MetadataBatch:
    """1,000 records that leave the image as they found it: each partition shrinks its ISR and expands it
    again; the rest are config changes."""
    records = []
    for p in range(PARTITIONS):
        follower = (p + 1) % 3
        isr_without = [b for b in (0, 1, 2) if b != follower]
        records.append(_record(len(records), partition_change=m.PartitionChangeRecord(
            topic_id=TOPIC_ID, partition_id=p, isr=m.ReplicaList(broker_ids=isr_without),
            cause=m.CAUSE_ISR_SHRINK, reason="lagging")))
        records.append(_record(len(records), partition_change=m.PartitionChangeRecord(
            topic_id=TOPIC_ID, partition_id=p, isr=m.ReplicaList(broker_ids=[0, 1, 2]),
            cause=m.CAUSE_ISR_EXPAND, reason="caught up")))
    while len(records) < BATCH_RECORDS:
        records.append(_record(len(records), config=m.ConfigRecord(
            resource_type=m.CONFIG_RESOURCE_BROKER, resource_name=str(len(records) % 3), key="retention.ms",
            value=str(len(records)))))
    return m.MetadataBatch(controller_epoch=1, records=records)


def write_log(root: Path, records: int) -> None:
    """The controller's metadata log under root/controller-0, checked against apply_batch as written."""
    image = MetadataImage()
    log = Log.open(root / "controller-0" / "__cluster_metadata-0", CONFIG)
    setup = setup_batches()
    for batch in setup:
        apply_batch(image, batch, log.log_end_offset)
        log.append(encode_metadata_batch(batch), leader_epoch=1, now_ms=T0)
    churn = churn_batch()
    churn_bytes = encode_metadata_batch(churn)
    apply_batch(image, churn, log.log_end_offset)  # proves the churn fits; it leaves the image unchanged
    written = sum(len(b.records) for b in setup)
    while written + BATCH_RECORDS <= records:
        log.append(churn_bytes, leader_epoch=1, now_ms=T0)
        written += BATCH_RECORDS
    log.close()


def _tree(pid: int) -> list[int]:
    """pid and its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def _rss_mib(pid: int) -> tuple[str, float]:
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        with open(f"/proc/{pid}/comm") as f:
            name = f.read().strip()
        return name, int(fields.get("VmRSS", "0 kB").split()[0]) / 1024
    except (OSError, ValueError):
        return "", 0.0


def run_audit(python: str, data_dir: Path, out: Path, master: str) -> dict:
    cmd = [python, "-m", "kanal", "audit", "--data-dir", str(data_dir), "--out", str(out), "--master", master]
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peaks = {"driver_python_rss_peak_mib": 0.0, "jvm_rss_peak_mib": 0.0, "tree_rss_peak_mib": 0.0}
    done = threading.Event()

    def sample() -> None:
        while not done.wait(SAMPLE_INTERVAL_S):
            total = 0.0
            for pid in _tree(proc.pid):
                name, rss = _rss_mib(pid)
                total += rss
                if pid == proc.pid:
                    peaks["driver_python_rss_peak_mib"] = max(peaks["driver_python_rss_peak_mib"], rss)
                elif name == "java":
                    peaks["jvm_rss_peak_mib"] = max(peaks["jvm_rss_peak_mib"], rss)
            peaks["tree_rss_peak_mib"] = max(peaks["tree_rss_peak_mib"], total)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        stdout, stderr = proc.communicate(timeout=3600)
    finally:
        done.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    sampler.join()
    progress = [line for line in stderr.splitlines() if "replaying the metadata log" in line]
    return {"exit_status": proc.returncode, "seconds": round(time.monotonic() - started, 1),
            **{k: round(v) for k, v in peaks.items()}, "progress_lines": len(progress),
            "summary": stdout.splitlines()[:2], "stderr_tail": stderr.splitlines()[-3:]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", default="1000000,10000000", help="metadata log sizes, comma-separated")
    p.add_argument("--master", default="local[2]", help="Spark master URL")
    p.add_argument("--python", default=sys.executable, help="the interpreter that runs `kanal audit`")
    args = p.parse_args()
    results = []
    for records in [int(r) for r in args.records.split(",")]:
        work = Path(tempfile.mkdtemp(prefix="kanal-audit-bench-"))
        try:
            t = time.monotonic()
            write_log(work / "data", records)
            written_s = time.monotonic() - t
            log_bytes = sum(f.stat().st_size for f in (work / "data").rglob("*.log"))
            run = run_audit(args.python, work / "data", work / "out", args.master)
            results.append({"records": records, "log_mib": round(log_bytes / 2**20),
                            "write_s": round(written_s, 1), **run, "load_after": os.getloadavg()[0]})
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({"python": args.python, "master": args.master, "runs": results}, indent=1))


if __name__ == "__main__":
    main()
