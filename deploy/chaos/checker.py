"""The history checker: a pure function from a recorded history (history.py) to the anomalies it shows.

`check(events)` reads the events (in any order; it orders them by `time`) and returns a `CheckReport`
whose `violations` are sorted by the time of the event that completed their evidence, so `first` is the
earliest anomaly the history proves. Each violation names its kind, says what is wrong in one sentence and
carries the events that show it. The kinds, and the rule each one breaks:

| kind | rule |
|---|---|
| `lost` | an acknowledged record (acks=all) is in the final read of its partition at the offset it was acknowledged at |
| `duplicate` | a value is stored once: never seen at two offsets of its partition (the producers are idempotent) |
| `reorder` | one producer's records of a partition are stored in the order it sent them (the value is `process:seq`) |
| `divergent` | every read of an offset (consumers' reads and acknowledgements) names the same record; below the final read's end, every in-sync replica's own log (`replica` events) holds the record the final read got from the leader |
| `vanished` | a record a consumer read is in the final read at that offset (consumers read below the high-water mark only) |
| `commit_backwards` | a group's committed offset of a partition never moves below an acknowledged commit |
| `two_leaders` | one leader per partition leader epoch, in every broker's metadata |
| `two_controllers` | one active controller per controller epoch (Raft term), in every controller's view |
| `epoch_backwards` | a partition's records carry non-decreasing leader epochs, offset by offset (a record of an older epoch after a newer one is a deposed leader's write that survived) |

Records of a topic that was deleted during the run are exempt from `lost` and `vanished` (deleting a topic
deletes them). A partition that has acknowledged or read records but no `final_end` event cannot be
checked for loss: it is listed in `unchecked`, never silently passed.
"""  # noqa: E501 (a Markdown table keeps each row on one line)

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import TypeVar

from kanal.deploy.chaos.history import Event

KINDS = ("lost", "duplicate", "reorder", "divergent", "vanished", "commit_backwards", "two_leaders",
         "two_controllers", "epoch_backwards")

TopicPartition = tuple[str, int]
# The closing read: each partition's records by offset, and its `final_end` event.
Finals = dict[TopicPartition, dict[int, Event]]
FinalEnds = dict[TopicPartition, Event]
Key = TypeVar("Key", bound=Hashable)


@dataclass(frozen=True)
class Violation:
    kind: str
    message: str
    events: tuple[Event, ...]

    @property
    def time(self) -> float:
        """When the evidence was complete: the time of its latest event."""
        return max(float(e["time"]) for e in self.events)

    def __str__(self) -> str:
        shown = "\n".join(f"    {_describe(e)}" for e in sorted(self.events, key=lambda e: e["time"]))
        return f"{self.kind} at t={self.time:.3f}s: {self.message}\n{shown}"


@dataclass
class CheckReport:
    violations: list[Violation] = field(default_factory=list)
    acknowledged: int = 0
    sent: int = 0
    read: int = 0
    final_records: int = 0
    unchecked: list[TopicPartition] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def first(self) -> Violation | None:
        return self.violations[0] if self.violations else None

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(KINDS, 0)
        for v in self.violations:
            out[v.kind] += 1
        return out


def _describe(event: Event) -> str:
    rest = {k: v for k, v in event.items() if k not in ("type", "time", "process")}
    fields = " ".join(f"{k}={v}" for k, v in rest.items())
    return f"t={float(event['time']):.3f} {event['process']} {event['type']} {fields}"


def _tp(event: Event) -> TopicPartition:
    return (str(event["topic"]), int(event["partition"]))


def _seq(value: str) -> tuple[str, int] | None:
    """`process:seq` -> (process, seq); None for a value the workload did not write that way."""
    process, sep, seq = str(value).rpartition(":")
    if not sep or not seq.isdigit():
        return None
    return process, int(seq)


def check(events: list[Event]) -> CheckReport:
    ordered = sorted(events, key=lambda e: float(e["time"]))
    report = CheckReport()
    found: list[Violation] = []
    by_type: dict[str, list[Event]] = defaultdict(list)
    for e in ordered:
        by_type[e["type"]].append(e)
    report.sent = len(by_type["send"])
    report.acknowledged = len(by_type["ack"])
    report.read = len(by_type["read"])
    report.final_records = len(by_type["final"])
    deleted = {e["topic"] for e in by_type["delete_topic"]}

    finals: Finals = defaultdict(dict)
    for e in by_type["final"]:
        previous = finals[_tp(e)].get(int(e["offset"]))
        if previous is not None and previous["value"] != e["value"]:
            found.append(Violation("divergent", f"{_name(e)} offset {e['offset']} read twice in the final "
                                   f"read with different records", (previous, e)))
        finals[_tp(e)].setdefault(int(e["offset"]), e)
    final_ends = {_tp(e): e for e in by_type["final_end"]}

    found += _lost(by_type["ack"], finals, final_ends, deleted)
    found += _divergent(by_type["ack"], by_type["read"])
    found += _replicas_diverge(by_type["replica"], finals, final_ends)
    found += _vanished(by_type["read"], finals, final_ends, deleted)
    found += _duplicates([*by_type["read"], *by_type["final"]])
    found += _reordered(finals)
    found += _epochs_backwards(finals)
    found += _commits_backwards(ordered)
    found += _two_leaders(by_type["leader"])
    found += _two_controllers(by_type["controller"])

    touched = {_tp(e) for e in (*by_type["ack"], *by_type["read"]) if e["topic"] not in deleted}
    report.unchecked = sorted(tp for tp in touched if tp not in final_ends)
    report.violations = sorted(found, key=lambda v: (v.time, KINDS.index(v.kind)))
    return report


def _name(e: Event) -> str:
    return f"{e['topic']}-{e['partition']}"


def _lost(acks: list[Event], finals: Finals, final_ends: FinalEnds, deleted: set[str]) -> list[Violation]:
    out = []
    for ack in acks:
        tp = _tp(ack)
        if ack["topic"] in deleted or tp not in final_ends:
            continue
        offset, end = int(ack["offset"]), final_ends[tp]
        there = finals[tp].get(offset)
        if there is not None and there["value"] == ack["value"]:
            continue
        if there is not None:
            why = f"the final read holds {there['value']!r} there"
            evidence = (ack, there)
        elif offset >= int(end["end_offset"]):
            why = f"the final read ends at {end['end_offset']}"
            evidence = (ack, end)
        else:
            why = "the final read has no record at that offset"
            evidence = (ack, end)
        out.append(
            Violation(
                "lost", f"{ack['value']!r} acknowledged at {_name(ack)} offset {offset}, but {why}", evidence
            )
        )
    return out


def _divergent(acks: list[Event], reads: list[Event]) -> list[Violation]:
    """Consumers' reads and acknowledgements of one offset disagree (the final read is judged by _lost and
    _vanished, which name the more specific anomaly)."""
    out = []
    seen: dict[tuple[str, int, int], Event] = {}
    for e in sorted([*acks, *reads], key=lambda e: float(e["time"])):
        key = (*_tp(e), int(e["offset"]))
        first = seen.setdefault(key, e)
        if first["value"] != e["value"]:
            out.append(
                Violation(
                    "divergent",
                    f"{_name(e)} offset {e['offset']} holds {first['value']!r} "
                    f"({first['type']} by {first['process']}) and {e['value']!r} ({e['type']} by "
                    f"{e['process']})",
                    (first, e),
                )
            )
            seen[key] = e  # report each change once
    return out


def _replicas_diverge(replicas: list[Event], finals: Finals, final_ends: FinalEnds) -> list[Violation]:
    """An in-sync replica's log disagrees with the leader's (the final read) below the high-water mark:
    once per replica and partition, at the first offset where they differ."""
    out = []
    reported: set[tuple[object, str, int]] = set()
    for e in replicas:
        tp = _tp(e)
        key = (e["broker"], *tp)
        if key in reported or tp not in final_ends or int(e["offset"]) >= int(final_ends[tp]["end_offset"]):
            continue
        there = finals[tp].get(int(e["offset"]))
        if there is not None and there["value"] != e["value"]:
            reported.add(key)
            out.append(
                Violation(
                    "divergent",
                    f"broker {e['broker']}'s own log of {_name(e)} holds {e['value']!r} "
                    f"at offset {e['offset']}, where the final read (from the leader) got "
                    f"{there['value']!r}",
                    (there, e),
                )
            )
    return out


def _vanished(
    reads: list[Event], finals: Finals, final_ends: FinalEnds, deleted: set[str]
) -> list[Violation]:
    out = []
    for read in reads:
        tp = _tp(read)
        if read["topic"] in deleted or tp not in final_ends:
            continue
        there = finals[tp].get(int(read["offset"]))
        if there is not None and there["value"] == read["value"]:
            continue
        evidence = (read, there if there is not None else final_ends[tp])
        now = f"holds {there['value']!r}" if there is not None else "has nothing"
        out.append(Violation("vanished", f"{read['process']} read {read['value']!r} at {_name(read)} offset "
                             f"{read['offset']}, where the final read {now}", evidence))
    return out


def _duplicates(observations: list[Event]) -> list[Violation]:
    out = []
    where: dict[tuple[TopicPartition, str], dict[int, Event]] = defaultdict(dict)
    for e in observations:
        offsets = where[(_tp(e), str(e["value"]))]
        offsets.setdefault(int(e["offset"]), e)
        if len(offsets) == 2 and int(e["offset"]) in offsets and offsets[int(e["offset"])] is e:
            a, b = offsets.values()
            out.append(Violation("duplicate", f"{e['value']!r} is stored at offsets {a['offset']} and "
                                 f"{b['offset']} of {_name(e)}", (a, b)))
    return out


def _reordered(finals: Finals) -> list[Violation]:
    out = []
    for records in finals.values():
        last: dict[str, tuple[Event, int]] = {}  # process -> its record with the highest sequence so far
        for offset in sorted(records):
            e = records[offset]
            parsed = _seq(e["value"])
            if parsed is None:
                continue
            process, seq = parsed
            before = last.get(process)
            if before is not None and before[1] > seq:
                out.append(
                    Violation(
                        "reorder",
                        f"{process} sent {e['value']!r} before {before[0]['value']!r}, "
                        f"but {_name(e)} stores it at offset {offset}, after offset "
                        f"{before[0]['offset']}",
                        (before[0], e),
                    )
                )
            last[process] = (e, seq) if before is None or before[1] < seq else before
    return out


def _epochs_backwards(finals: Finals) -> list[Violation]:
    out = []
    for records in finals.values():
        newest: tuple[Event, int] | None = None  # the record of the highest epoch so far, and its epoch
        for offset in sorted(records):
            e = records[offset]
            written = e.get("leader_epoch")
            if written is None:
                continue
            epoch = int(written)
            if newest is not None and epoch < newest[1]:
                before = newest[0]
                out.append(
                    Violation(
                        "epoch_backwards",
                        f"{_name(e)} offset {offset} was written in leader epoch "
                        f"{epoch}, after offset {before['offset']} of epoch {newest[1]}",
                        (before, e),
                    )
                )
                break  # one per partition: what follows is the same story
            if newest is None or epoch > newest[1]:
                newest = (e, epoch)
    return out


def _commits_backwards(ordered: list[Event]) -> list[Violation]:
    """Events in time order. A `commit` below the highest acknowledged commit before it, or a `committed`
    fetch (asked at `invoked`) below the highest commit acknowledged before it was asked."""
    out = []
    acked: dict[tuple[str, str, int], list[Event]] = defaultdict(list)  # commits so far, in time order
    for e in ordered:
        if e["type"] not in ("commit", "committed"):
            continue
        key = (str(e["group"]), *_tp(e))
        since = (
            float(e["invoked"] if "invoked" in e else e["time"])
            if e["type"] == "committed"
            else float(e["time"])
        )
        earlier = [c for c in acked[key] if float(c["time"]) <= since]
        if earlier:
            top = max(earlier, key=lambda c: int(c["offset"]))
            if int(e["offset"]) < int(top["offset"]):
                what = "was committed" if e["type"] == "commit" else "was fetched as committed"
                out.append(
                    Violation(
                        "commit_backwards",
                        f"group {e['group']} {_name(e)}: {e['offset']} {what} "
                        f"after the commit of {top['offset']} was acknowledged",
                        (top, e),
                    )
                )
        if e["type"] == "commit":
            acked[key].append(e)
    return out


def _one_per_epoch(
    views: list[Event], kind: str, key: Callable[[Event], Key], describe: Callable[[Event, Event], str]
) -> list[Violation]:
    """Views (leader >= 0) grouped by `key(event)`; the first view naming another leader for a key is a
    violation, reported once per key."""
    out = []
    first: dict[Key, Event] = {}
    reported: set[Key] = set()
    for e in views:
        if int(e["leader"]) < 0:
            continue
        k = key(e)
        seen = first.setdefault(k, e)
        if int(seen["leader"]) != int(e["leader"]) and k not in reported:
            reported.add(k)
            out.append(Violation(kind, describe(seen, e), (seen, e)))
    return out


def _two_leaders(leaders: list[Event]) -> list[Violation]:
    return _one_per_epoch(
        leaders,
        "two_leaders",
        lambda e: (*_tp(e), int(e["epoch"])),
        lambda a, b: (
            f"{_name(b)} leader epoch {b['epoch']} has leader {a['leader']} (broker {a['observer']}'s "
            f"view) and {b['leader']} (broker {b['observer']}'s)"
        ),
    )


def _two_controllers(views: list[Event]) -> list[Violation]:
    """Raft elects at most one leader per term: any two views naming different leaders for one term."""
    return _one_per_epoch(
        views, "two_controllers", lambda e: int(e["epoch"]),
        lambda a, b: f"controller epoch {b['epoch']} has active controller {a['leader']} (controller "
                     f"{a['observer']}'s view) and {b['leader']} (controller {b['observer']}'s)")
