"""A consumer-group member as its own process, for tests that SIGKILL members.

    python group_member.py BOOTSTRAP GROUP TOPIC [--instance ID] [--strategy NAME] [--session-ms N]

It processes records and commits by hand after each poll (enable_auto_commit off), and before giving
partitions up in on_revoke — the at-least-once pattern. Everything it does is one JSON line on stdout,
flushed before the next step, so a test reading the pipe knows what happened up to a SIGKILL:
  {"event": "assigned", "partitions": [[topic, p], ...], "generation": G}
  {"event": "revoked", "partitions": [...]}
  {"event": "record", "topic": t, "partition": p, "offset": o, "key": k, "value": v}
  {"event": "committed", "offsets": [[topic, p, offset], ...]}
It stops cleanly (commit, leave) on SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading

from kanal.clients.consumer import Consumer, ConsumerConfig
from kanal.v1.error import KanalError


def emit(**event) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("bootstrap")
    p.add_argument("group")
    p.add_argument("topic")
    p.add_argument("--instance", default="")
    p.add_argument("--strategy", default="range")
    p.add_argument("--session-ms", type=int, default=2000)
    args = p.parse_args()
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    consumer = Consumer(ConsumerConfig(
        bootstrap=args.bootstrap, group_id=args.group, group_instance_id=args.instance,
        auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=args.session_ms,
        heartbeat_interval_ms=max(50, args.session_ms // 6), max_poll_interval_ms=30_000,
        partition_assignment_strategy=(args.strategy,), client_id=f"member-{args.instance or 'dynamic'}",
        fetch_max_wait_ms=100))

    def commit(partitions) -> None:
        offsets = {tp: o for tp, o in consumer._positions(partitions).items()}  # what was processed
        if not offsets:
            return
        try:
            consumer.commit(offsets)
        except KanalError as exc:
            emit(event="commit_failed", error=exc.name)
            return
        emit(event="committed", offsets=[[t, q, o] for (t, q), o in sorted(offsets.items())])

    def on_revoke(partitions) -> None:
        commit(partitions)
        emit(event="revoked", partitions=sorted(partitions))

    def on_assign(partitions) -> None:
        emit(event="assigned", partitions=sorted(partitions), owned=sorted(consumer.assignment()),
             generation=consumer._group.generation)

    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke)
    while not stopping.is_set():
        records = consumer.poll(0.1)
        for r in records:
            emit(event="record", topic=r.topic, partition=r.partition, offset=r.offset,
                 key=(r.key or b"").decode(), value=(r.value or b"").decode())
        if records:
            commit(consumer.assignment())
    consumer.close()
    emit(event="closed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
