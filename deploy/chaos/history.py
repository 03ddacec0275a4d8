"""The recorded history of a chaos run: one JSON object per line, in the order events happened.

Every event has `type` (below), `time` (seconds since the run began, float, from the recorder's monotonic
clock) and `process` (who did it: `producer-0`, `consumer-1`, `admin`, `monitor`, `nemesis`, `final`).
Other fields by type (`topic` and `partition` name a partition; `value` is the record's value as text):

| type | fields | meaning |
|---|---|---|
| `send` | topic, partition, value; key for a keyed record | a producer queued the record (an invocation); `ack`, `fail` and `final` carry the record's `key` too when it has one (the compacted topic) |
| `ack` | topic, partition, value, offset | the broker acknowledged it at `offset` (acks=all) |
| `fail` | topic, partition, value, error | the producer gave up on it: indeterminate, it may be stored |
| `read` | topic, partition, offset, value, leader_epoch | a consumer of a group read it |
| `commit` | group, topic, partition, offset | an offset commit the coordinator acknowledged |
| `committed` | group, topic, partition, offset, invoked | a committed offset fetched (asked at time `invoked`) |
| `txn_send` | txn, topic, partition, value | a transactional producer took the record into its transaction `txn` (a number of its own) |
| `txn_end` | txn, action (`commit` / `abort`), ok, error | the producer ended transaction `txn`; `ok` false: the call failed and the outcome is unknown to it |
| `final` | topic, partition, offset, value, leader_epoch | the closing read of every partition from its start (read_committed for the transactions' topic) |
| `final_end` | topic, partition, end_offset | the closing read of this partition reached `end_offset` |
| `replica` | broker, topic, partition, offset, value | a record in an in-sync replica's own log, read from its data directory after the final read (replicas.py) |
| `create_topic` / `delete_topic` | topic, ok, error; create: count, configs | a topic created (with `count` partitions and `configs`) / deleted; `ok`: the controller acknowledged it (false: indeterminate, it may have happened) |
| `create_partitions` | topic, count, ok, error | a topic's partitions raised to `count` |
| `alter_config` | topic, key, value, ok, error | a topic's config `key` set to `value` |
| `metadata` | node, offset, final; final: topics, configs_known | a node (`broker-N`, `controller-N`) has applied the metadata log up to `offset`; the monitor records each change, the final metadata read (`final` true) also every topic it holds (`topics`: name -> `{"partitions": n, "configs": {...}}`; `configs_known` false when the node's answer names no configs, a broker's) |
| `no_recovery` | detail | after every fault was healed the cluster did not come back within the recovery bound: what was waited for and the error |
| `leader` | observer, topic, partition, leader, epoch, isr | broker `observer`'s metadata names `leader` for `epoch`, with in-sync replicas `isr` (left out by older histories) |
| `controller` | observer, leader, epoch | controller `observer` names `leader` active in Raft term `epoch` |
| `nemesis` | fault, action (`start` / `stop` / `cut` / `skip` / `restart`), detail | a fault injected or healed; `cut`: a node's power cut (how many writes not fsynced it dropped: `detail` and `dropped_writes`, `node`); `skip`: a fault with no node to aim at; `restart`: a node that exited by itself started again |
| `mirror` | source_topic, remote_topic | the run mirrors `source_topic` into `remote_topic` on a second cluster (the `mirror` fault): its `final` events, read there, are the copy |
| `unavailable` | start, end | no producer got an acknowledgement from `start` to `end` (seconds) |

`leader_epoch` and `offset` are ints; an event may carry fields the checker does not read. The format is
stable: `kanal chaos check FILE` re-checks a history written by any version that wrote these fields.
`Event` is the table as a type; a history read back from a file is checked for the fields every event
has (`is_event`) and no others, so the checker converts the numbers it compares.
"""  # noqa: E501 (a Markdown table keeps each row on one line)

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, TypedDict, TypeGuard, Unpack


class MetadataTopic(TypedDict):
    """A topic as a node's metadata holds it (the final metadata read)."""

    partitions: int
    configs: dict[str, str]


class EventFields(TypedDict, total=False):
    """The fields beside `type`, `time` and `process`: which of them an event has depends on its type."""

    topic: str
    partition: int
    value: str
    offset: int
    leader_epoch: int | None  # None: the record's epoch was not known to the reader
    error: str
    group: str
    invoked: float
    end_offset: int
    broker: int
    ok: bool
    observer: int
    leader: int
    epoch: int
    fault: str
    action: str
    detail: str
    start: float
    end: float
    count: int
    configs: dict[str, str]
    key: str
    isr: list[int]
    node: str
    final: bool
    topics: dict[str, MetadataTopic]
    configs_known: bool
    dropped_writes: int
    source_topic: str
    remote_topic: str
    user: str  # create_user / delete_user: a SCRAM user's name
    acl: str  # create_acl / delete_acl: the entry as `kanal acls list` prints it (admin.acl_text)
    users: list[str]  # a controller's final metadata: every user with credentials
    acls: list[str]  # a controller's final metadata: every access-control entry, as `acl`
    txn: int  # txn_send / txn_end: the transaction's number, per producer
    acks: str  # send / ack of a producer writing with acks=1 and no idempotence: "1" (absent: acks=all)


class Event(EventFields):
    """One line of a history."""

    type: str
    time: float
    process: str

EVENT_TYPES = frozenset({
    "send", "ack", "fail", "read", "commit", "committed", "final", "final_end", "create_topic",
    "delete_topic", "leader", "controller", "nemesis", "unavailable", "replica", "create_partitions",
    "alter_config", "metadata", "no_recovery", "create_user", "delete_user", "create_acl", "delete_acl",
    "txn_send", "txn_end", "mirror",
})


class Recorder:
    """Appends events to a history, in memory and (when given a file) as JSON lines flushed as they come,
    so a run that is interrupted still leaves what it saw. Safe to call from several threads."""

    def __init__(self, out: IO[str] | None = None, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._out = out
        self._clock = clock
        self._start = clock()
        self._lock = threading.Lock()
        self.events: list[Event] = []

    def close(self) -> None:
        """Stop writing to the file (events are still kept in memory)."""
        with self._lock:
            self._out = None

    def now(self) -> float:
        return round(self._clock() - self._start, 6)

    def record(self, type_: str, process: str, **fields: Unpack[EventFields]) -> Event:
        if type_ not in EVENT_TYPES:
            raise ValueError(f"unknown history event type {type_!r}")
        with self._lock:
            event: Event = {"type": type_, "time": self.now(), "process": process, **fields}
            self.events.append(event)
            if self._out is not None:
                self._out.write(json.dumps(event, separators=(",", ":")) + "\n")
                self._out.flush()
        return event


def read_history(path: Path) -> list[Event]:
    """The events of a history file; a torn last line (the writer was killed mid-line) is ignored."""
    return list(parse_lines(Path(path).read_text().splitlines()))


def parse_lines(lines: Iterable[str]) -> Iterator[Event]:
    lines = [line for line in lines if line.strip()]
    for number, line in enumerate(lines, 1):
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):
                return
            raise ValueError(f"history line {number} is not JSON: {line[:80]!r}") from None
        if not is_event(event):
            raise ValueError(f"history line {number} is not a history event: {line[:80]!r}")
        yield event


def is_event(value: object) -> TypeGuard[Event]:
    """A JSON object with the fields every event has: a known `type`, a number `time` and a `process`."""
    return (
        isinstance(value, dict)
        and value.get("type") in EVENT_TYPES
        and isinstance(value.get("time"), int | float)
        and not isinstance(value.get("time"), bool)
        and isinstance(value.get("process"), str)
    )
