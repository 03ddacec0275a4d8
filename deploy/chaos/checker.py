"""The history checker: a pure function from a recorded history (history.py) to the anomalies it shows.

`check(events)` reads the events (in any order; it orders them by `time`) and returns a `CheckReport`
whose `violations` are sorted by the time of the event that completed their evidence, so `first` is the
earliest anomaly the history proves. Each violation names its kind, says what is wrong in one sentence and
carries the events that show it. The kinds, and the rule each one breaks:

| kind | rule |
|---|---|
| `lost` | an acknowledged record (acks=all) is in the final read of its partition at the offset it was acknowledged at; in a compacted topic (created with `cleanup.policy=compact`, or `compact,delete`) it may be gone only when the final read holds a later record of its key (compaction keeps each key's latest record) |
| `duplicate` | a value is stored once: never seen at two offsets of its partition (the producers are idempotent) |
| `reorder` | one producer's records of a partition are stored in the order it sent them (the value is `process:seq`) |
| `divergent` | every read of an offset (consumers' reads and acknowledgements) names the same record; below the final read's end, every in-sync replica's own log (`replica` events) holds the record the final read got from the leader |
| `vanished` | a record a consumer read is in the final read at that offset (consumers read below the high-water mark only) |
| `read_uncommitted` | a record a consumer read is the committed record at that offset: the same value **and** the same leader epoch as the final read (a copy that was later truncated and written again by a retry has the value but another epoch) |
| `commit_backwards` | a group's committed offset of a partition never moves below an acknowledged commit |
| `two_leaders` | one leader per partition leader epoch, in every broker's metadata |
| `two_controllers` | one active controller per controller epoch (Raft term), in every controller's view |
| `epoch_backwards` | a partition's records carry non-decreasing leader epochs, offset by offset (a record of an older epoch after a newer one is a deposed leader's write that survived) |
| `metadata_lost` | an acknowledged admin operation (a topic created or deleted, partitions added, a config set; a user or an ACL created or deleted, on the controllers) is in every node's final metadata, unless a later operation on the same thing may have undone it |
| `metadata_backwards` | a node's applied metadata offset never moves down while it runs, and every node's final metadata reaches the highest offset any node had applied during the run (committed metadata is never taken back) |
| `read_aborted` | no record of a transaction whose abort was acknowledged is in a read_committed read (the final read of the transactions' topic) |
| `txn_partial` | a transaction is atomic: a committed one (commit acknowledged) is whole in the read_committed read, and one whose outcome its producer could not know is whole or absent |
| `no_recovery` | once every fault is healed the cluster serves again within the recovery bound (the runner records what it waited for and the error) |
| `mirror_lost`, `mirror_extra`, `mirror_duplicate`, `mirror_reorder` | with the `mirror` fault (a `mirror` event names a source topic and its copy on the other cluster): each partition's copy, read read_committed, is the source partition's final log — every record of it (`mirror_lost`), nothing else (`mirror_extra`), each once (`mirror_duplicate`), in the source's order (`mirror_reorder`) |

Loss the rules allow: for a topic whose history turned `unclean.leader.election.enable` on, an acknowledged
record of a partition that later had an unclean election (a new leader epoch whose leader was not in the ISR
the brokers last showed, with itself alone as the ISR) may be gone; it is counted in `allowed_loss`, not
reported. Only records acknowledged before that election are exempt; with the setting off (the default)
every loss is a violation.

Records written with acks=1 and no idempotence (each `send` and `ack` of their producer says `acks` 1): the
leader alone acknowledged them, so their loss is allowed, and a retry may store one twice or out of its send
order. They are exempt from `lost`, `duplicate` and `reorder`, and their acknowledgements from `divergent`;
every other rule holds for them: what consumers read must be committed (`vanished`, `read_uncommitted`,
reads that disagree), and in-sync replicas must agree below the high-water mark. A leader cut off from its
followers goes on taking such writes, so they are what a deposed leader's long tail is made of.

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
from kanal.metadata.cleanup_policy import CleanupPolicy

KINDS = ("lost", "duplicate", "reorder", "divergent", "vanished", "read_uncommitted", "commit_backwards",
         "two_leaders", "two_controllers", "epoch_backwards", "metadata_lost", "metadata_backwards",
         "read_aborted", "txn_partial", "no_recovery", "mirror_lost", "mirror_extra", "mirror_duplicate",
         "mirror_reorder")
ADMIN_TYPES = ("create_topic", "delete_topic", "create_partitions", "alter_config")
# Users and ACLs, by the history field naming what they made or removed (checked on controllers only:
# a broker's Metadata answer holds neither).
SECURITY_TYPES = {"create_user": "user", "delete_user": "user", "create_acl": "acl", "delete_acl": "acl"}
UNCLEAN_KEY = "unclean.leader.election.enable"
# What an allowed unclean election may cause in its partition (the truncated records, reads of them, their
# offsets taken by other records).
TXN_OUTCOMES = ("committed", "aborted", "unknown")
LOSS_KINDS = ("lost", "divergent", "vanished", "read_uncommitted", "duplicate")

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
    allowed_loss: int = 0  # acknowledged records gone where an unclean election allowed it
    admin_acknowledged: int = 0  # acknowledged admin operations (checked against every node's metadata)
    # Transactions by how their producer saw them end: commit / abort acknowledged, or unknown (a failed
    # end call, or none: the producer was stopped or replaced with the transaction open).
    transactions: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TXN_OUTCOMES, 0))

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


def _writer(e: Event) -> str | None:
    """The producer that wrote a record (its value is `process:seq`), None for another value."""
    parsed = _seq(e["value"])
    return None if parsed is None else parsed[0]


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
    copies = {e["remote_topic"] for e in by_type["mirror"]}
    report.final_records = sum(1 for e in by_type["final"] if e["topic"] not in copies)
    deleted = {e["topic"] for e in by_type["delete_topic"]}
    compacted = {e["topic"] for e in by_type["create_topic"]
                 if e.get("ok") and _compacts(e.get("configs", {}).get("cleanup.policy", "delete"))}

    # Producers writing with acks=1 and no idempotence: their loss, duplicates and reordering are allowed.
    loose = {str(e["process"]) for e in (*by_type["send"], *by_type["ack"])
             if str(e.get("acks", "all")) == "1"}
    strict_acks = [e for e in by_type["ack"] if e["process"] not in loose]

    finals: Finals = defaultdict(dict)
    for e in by_type["final"]:
        previous = finals[_tp(e)].get(int(e["offset"]))
        if previous is not None and previous["value"] != e["value"]:
            found.append(Violation("divergent", f"{_name(e)} offset {e['offset']} read twice in the final "
                                   f"read with different records", (previous, e)))
        finals[_tp(e)].setdefault(int(e["offset"]), e)
    final_ends = {_tp(e): e for e in by_type["final_end"]}

    report.admin_acknowledged = sum(1 for t in (*ADMIN_TYPES, *SECURITY_TYPES) for e in by_type[t]
                                    if e.get("ok"))
    unclean_at = _unclean_elections(ordered)
    found += _lost(strict_acks, finals, final_ends, deleted, compacted)
    found += _metadata_lost([e for e in ordered if e["type"] in ADMIN_TYPES], by_type["metadata"])
    found += _security_lost([e for e in ordered if e["type"] in SECURITY_TYPES], by_type["metadata"])
    found += _metadata_backwards(by_type["metadata"], by_type["nemesis"])
    found += [Violation("no_recovery", f"the cluster did not recover after the faults healed: {e['detail']}",
                        (e,)) for e in by_type["no_recovery"]]
    found += _divergent(strict_acks, by_type["read"])
    found += _replicas_diverge(by_type["replica"], finals, final_ends)
    found += _vanished(by_type["read"], finals, final_ends, deleted)
    # A mirror's copy (on another cluster) is judged by _mirrored alone, each anomaly named once.
    own = {tp: records for tp, records in finals.items() if tp[0] not in copies}
    found += _duplicates([e for e in (*by_type["read"], *by_type["final"])
                          if e["topic"] not in copies and _writer(e) not in loose])
    found += _reordered(own, loose)
    found += _epochs_backwards(own)
    found += _commits_backwards(ordered)
    found += _two_leaders(by_type["leader"])
    found += _two_controllers(by_type["controller"])
    found += _transactions(by_type["txn_send"], by_type["txn_end"], finals, final_ends, report.transactions)
    found += _mirrored(by_type["mirror"], finals, final_ends)

    allowed = [v for v in found if v.kind in LOSS_KINDS and _loss_allowed(v, unclean_at)]
    report.allowed_loss = len(allowed)
    found = [v for v in found if v not in allowed]
    touched = {_tp(e) for e in (*by_type["ack"], *by_type["read"], *by_type["txn_send"])
               if e["topic"] not in deleted}
    for mirror in by_type["mirror"]:  # a source partition read to its end: its copy must be checked too
        touched |= {(mirror["remote_topic"], p) for t, p in final_ends if t == mirror["source_topic"]}
    report.unchecked = sorted(tp for tp in touched if tp not in final_ends)
    report.violations = sorted(found, key=lambda v: (v.time, KINDS.index(v.kind)))
    return report


def _transactions(sends: list[Event], ends: list[Event], finals: Finals, final_ends: FinalEnds,
                  outcomes: dict[str, int]) -> list[Violation]:
    """Each transaction's records (`txn_send`) against the read_committed final read of their topic: an
    acknowledged abort shows none of them (`read_aborted`), an acknowledged commit all of them, any other
    outcome all or none (`txn_partial`). A transaction with a partition the final read did not end is not
    judged (the partition is listed as unchecked). Counts each transaction's outcome into `outcomes`."""
    records: dict[tuple[str, int], list[Event]] = defaultdict(list)
    for e in sends:
        records[(str(e["process"]), int(e["txn"]))].append(e)
    outcome: dict[tuple[str, int], Event] = {}
    for e in ends:
        key = (str(e["process"]), int(e["txn"]))
        if e.get("ok") or key not in outcome:
            outcome[key] = e
    read = {str(e["value"]): e for tp in {_tp(s) for s in sends} for e in finals.get(tp, {}).values()}
    out = []
    for key, sent in sorted(records.items()):
        shown = [read[str(e["value"])] for e in sent if str(e["value"]) in read]
        missing = [e for e in sent if str(e["value"]) not in read]
        end = outcome.get(key)
        acknowledged = end is not None and end.get("ok")
        outcomes["unknown" if end is None or not acknowledged else
                 "committed" if end["action"] == "commit" else "aborted"] += 1
        what = f"transaction {key[1]} of {key[0]}"
        if any(_tp(e) not in final_ends for e in sent):
            continue
        evidence = tuple(sent) + ((end,) if end is not None else ())
        if end is not None and end.get("ok") and end["action"] == "abort":
            if shown:
                out.append(Violation("read_aborted", f"{what} was aborted, but read_committed reads "
                                     f"{len(shown)} of its {len(sent)} records", evidence + tuple(shown)))
        elif end is not None and end.get("ok") and end["action"] == "commit":
            if missing:
                out.append(Violation("txn_partial", f"{what} was committed, but {len(missing)} of its "
                                     f"{len(sent)} records are not in the read_committed read",
                                     evidence + tuple(shown)))
        elif shown and missing:
            out.append(Violation("txn_partial", f"{what} (outcome unknown to its producer) shows "
                                 f"{len(shown)} of its {len(sent)} records", evidence + tuple(shown)))
    return out


def _compacts(policy: str) -> bool:
    """Whether a created topic's cleanup.policy compacts (`compact`, or `compact,delete` in either order):
    then an acknowledged record may be gone behind a later record of its key. A combined policy also
    deletes by retention, which could take a record with no later one of its key; the chaos workload sets
    no retention on its topics (7 days by default, far beyond a run), so that exemption is not made here.
    Text the cluster would not have admitted compacts nothing (such a create cannot have succeeded)."""
    try:
        return CleanupPolicy.parse(policy).compacts
    except ValueError:
        return False


def _name(e: Event) -> str:
    return f"{e['topic']}-{e['partition']}"


def _lost(acks: list[Event], finals: Finals, final_ends: FinalEnds, deleted: set[str],
          compacted: set[str]) -> list[Violation]:
    # Per compacted partition and key, the highest offset the final read holds a record of it at.
    latest_read: dict[tuple[TopicPartition, str], int] = {}
    for tp, records in finals.items():
        if tp[0] in compacted:
            for offset, e in records.items():
                key = (tp, str(e.get("key")))
                latest_read[key] = max(offset, latest_read.get(key, -1))
    out = []
    for ack in acks:
        tp = _tp(ack)
        if ack["topic"] in deleted or tp not in final_ends:
            continue
        offset, end = int(ack["offset"]), final_ends[tp]
        there = finals[tp].get(offset)
        if there is not None and there["value"] == ack["value"]:
            continue
        superseded = latest_read.get((tp, str(ack.get("key"))), -1) > offset
        if there is None and ack["topic"] in compacted and superseded:
            continue  # compacted away: a later record of its key is there
        if there is not None:
            why = f"the final read holds {there['value']!r} there"
            evidence = (ack, there)
        elif offset >= int(end["end_offset"]):
            why = f"the final read ends at {end['end_offset']}"
            evidence = (ack, end)
        elif ack["topic"] in compacted:
            why = f"compaction left no later record of its key {ack.get('key')!r}"
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
            read_epoch, final_epoch = read.get("leader_epoch"), there.get("leader_epoch")
            if read_epoch is not None and final_epoch is not None and int(read_epoch) != int(final_epoch):
                out.append(Violation(
                    "read_uncommitted",
                    f"{read['process']} read {read['value']!r} at {_name(read)} offset {read['offset']} "
                    f"in leader epoch {read_epoch}, where the final read holds it from epoch {final_epoch}: "
                    "it read a copy that was later truncated (and written again)", (read, there)))
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


def _reordered(finals: Finals, loose: set[str]) -> list[Violation]:
    """One producer's records of a partition out of its send order (producers in `loose` may reorder)."""
    out = []
    for records in finals.values():
        last: dict[str, tuple[Event, int]] = {}  # process -> its record with the highest sequence so far
        for offset in sorted(records):
            e = records[offset]
            parsed = _seq(e["value"])
            if parsed is None:
                continue
            process, seq = parsed
            if process in loose:
                continue
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


def _mirrored(mirrors: list[Event], finals: Finals, final_ends: FinalEnds) -> list[Violation]:
    """Each partition's copy against its source's final log (values are unique: `process:seq`)."""
    out = []
    for mirror in mirrors:
        source, remote = mirror["source_topic"], mirror["remote_topic"]
        for (topic, p), end in sorted(final_ends.items()):
            if topic != source or (remote, p) not in final_ends:
                continue  # an unread copy is listed as unchecked
            src = [finals[(source, p)][o] for o in sorted(finals.get((source, p), {}))]
            copy = [finals[(remote, p)][o] for o in sorted(finals.get((remote, p), {}))]
            src_values, copy_values = [e["value"] for e in src], [e["value"] for e in copy]
            if src_values == copy_values:
                continue
            evidence = (mirror, end, final_ends[(remote, p)])
            in_copy, in_src = set(copy_values), set(src_values)
            missing = [e for e in src if e["value"] not in in_copy]
            extra = [e for e in copy if e["value"] not in in_src]
            twice = sorted({v for v in copy_values if copy_values.count(v) > 1})
            where = f"{remote}[{p}], the copy of {source}[{p}],"
            if missing:
                out.append(Violation("mirror_lost", f"{where} lacks {len(missing)} of the source's records "
                                     f"(first {missing[0]['value']!r} at offset {missing[0]['offset']})",
                                     (missing[0], *evidence)))
            if extra:
                out.append(Violation("mirror_extra", f"{where} holds {len(extra)} records the source's log "
                                     f"does not (first {extra[0]['value']!r})", (extra[0], *evidence)))
            if twice:
                out.append(Violation("mirror_duplicate", f"{where} holds {len(twice)} records twice (first "
                                     f"{twice[0]!r})", evidence))
            if not (missing or extra or twice):
                out.append(Violation("mirror_reorder", f"{where} holds the source's records in another "
                                     "order", evidence))
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


def _unclean_elections(ordered: list[Event]) -> dict[TopicPartition, list[Event]]:
    """Per partition, each observed election of a leader from outside the ISR brokers last showed (a new
    leader epoch whose ISR is that leader alone) while its topic allowed unclean election (the last
    setting that may have been made before it; off by default, as in Kafka). Views from histories without
    `isr` are not judged. Used only to allow loss: sampled views can take a clean election for an unclean
    one, which may excuse a loss on such a topic, never accuse."""
    allowed: dict[str, bool] = {}
    last_isr: dict[TopicPartition, tuple[int, set[int]]] = {}  # newest epoch seen and its latest ISR
    out: dict[TopicPartition, list[Event]] = defaultdict(list)
    for e in ordered:
        if e["type"] in ("create_topic", "alter_config"):
            setting = (e.get("configs") or {}).get(UNCLEAN_KEY)
            if e["type"] == "alter_config" and e.get("key") == UNCLEAN_KEY:
                setting = str(e.get("value", ""))
            if setting is not None:
                on, topic = setting.lower() == "true", str(e["topic"])
                # An attempt that may have happened counts when it turns the setting on.
                allowed[topic] = on if e.get("ok") else (on or allowed.get(topic, False))
        if e["type"] != "leader" or "isr" not in e or int(e["leader"]) < 0:
            continue
        tp, epoch, isr = _tp(e), int(e["epoch"]), {int(b) for b in e["isr"]}
        before = last_isr.get(tp)
        if before is not None and epoch < before[0]:
            continue  # a lagging broker's view
        if (before is not None and epoch > before[0] and before[1] and int(e["leader"]) not in before[1]
                and isr == {int(e["leader"])} and allowed.get(str(e["topic"]), False)):
            out[tp].append(e)
        last_isr[tp] = (epoch, isr)
    return out


def _loss_allowed(v: Violation, unclean_at: dict[TopicPartition, list[Event]]) -> bool:
    """A violation whose earliest event (the acknowledgement or read of what went) came before an allowed
    unclean election of its partition."""
    first = min(v.events, key=lambda e: float(e["time"]))
    if "topic" not in first or "partition" not in first:
        return False
    return any(float(first["time"]) < float(e["time"]) for e in unclean_at.get(_tp(first), []))


def _finals_by_node(metadata: list[Event]) -> dict[str, Event]:
    """Each node's last final metadata view."""
    out: dict[str, Event] = {}
    for e in metadata:
        if e.get("final"):
            out[str(e["node"])] = e
    return out


def _metadata_lost(ops: list[Event], metadata: list[Event]) -> list[Violation]:
    """Each acknowledged admin operation against each node's final metadata; one violation per operation,
    naming the nodes that lack it."""
    views = _finals_by_node(metadata)
    out = []
    for i, op in enumerate(ops):
        if not op.get("ok"):
            continue
        topic = str(op["topic"])
        later = ops[i + 1:]
        undone_by_delete = any(e["type"] == "delete_topic" and e["topic"] == topic for e in later)
        missing: list[tuple[Event, str]] = []
        for node, view in sorted(views.items()):
            held = (view.get("topics") or {}).get(topic)
            why = ""
            if op["type"] == "delete_topic":
                if held is not None:
                    why = "still holds it"
            elif undone_by_delete:
                continue
            elif held is None:
                why = "has no such topic"
            elif op["type"] in ("create_topic", "create_partitions") and held["partitions"] < int(
                    op.get("count", 0)):
                why = f"gives it {held['partitions']} partitions"
            elif op["type"] == "alter_config" and view.get("configs_known") and not any(
                    e["type"] == "alter_config" and e["topic"] == topic and e.get("key") == op.get("key")
                    for e in later) and held["configs"].get(str(op.get("key"))) != op.get("value"):
                why = f"has {op.get('key')}={held['configs'].get(str(op.get('key')))!r}"
            if why:
                missing.append((view, f"{node} (metadata offset {view['offset']}) {why}"))
        if missing:
            what = {"create_topic": f"creation of topic {topic!r}"
                    + (f" with {op['count']} partitions" if "count" in op else ""),
                    "delete_topic": f"deletion of topic {topic!r}",
                    "create_partitions": f"raising {topic!r} to {op.get('count')} partitions",
                    "alter_config": f"{topic!r} config {op.get('key')}={op.get('value')!r}"}[op["type"]]
            out.append(Violation(
                "metadata_lost",
                f"the {what} was acknowledged at t={float(op['time']):.3f}s, but "
                + "; ".join(text for _, text in missing),
                (op, *(view for view, _ in missing))))
    return out


def _security_lost(ops: list[Event], metadata: list[Event]) -> list[Violation]:
    """Each acknowledged user or ACL creation (deletion) against each controller's final metadata: the user
    or entry must be there (gone), unless a later operation on the same one, acknowledged or not, may have
    undone it."""
    views = {node: v for node, v in _finals_by_node(metadata).items() if "users" in v}
    out = []
    for i, op in enumerate(ops):
        if not op.get("ok"):
            continue
        field_ = SECURITY_TYPES[op["type"]]
        name = str(op[field_])  # type: ignore[literal-required]
        if any(SECURITY_TYPES[e["type"]] == field_ and e.get(field_) == name for e in ops[i + 1:]):
            continue
        creates = op["type"].startswith("create_")
        missing = [view for _, view in sorted(views.items()) if (name in _held(view, field_)) != creates]
        if missing:
            why = "has no such " + field_ if creates else "still holds it"
            out.append(Violation(
                "metadata_lost",
                f"the {'creation' if creates else 'deletion'} of {field_} {name!r} was acknowledged at "
                f"t={float(op['time']):.3f}s, but "
                + "; ".join(f"{v['node']} (metadata offset {v['offset']}) {why}" for v in missing),
                (op, *missing)))
    return out


def _held(view: Event, field_: str) -> list[str]:
    """The users or the ACLs a controller's final metadata holds."""
    return view.get("users", []) if field_ == "user" else view.get("acls", [])


def _metadata_backwards(metadata: list[Event], nemesis: list[Event]) -> list[Violation]:
    """A running node's applied metadata offset moving down (between two views with no fault on that node
    between them), and a node whose final metadata ends below the highest offset any node applied during
    the run. One violation per node."""
    out = []
    reported: set[str] = set()
    last: dict[str, Event] = {}
    highest: Event | None = None
    touched_at: dict[str, list[float]] = defaultdict(list)  # node -> times of nemesis events naming it
    for e in nemesis:
        for node in _nodes_named(str(e.get("detail", ""))):
            touched_at[node].append(float(e["time"]))
    for e in sorted(metadata, key=lambda e: float(e["time"])):
        node, offset = str(e["node"]), int(e["offset"])
        if e.get("final"):
            if highest is not None and offset < int(highest["offset"]) and node not in reported:
                reported.add(node)
                out.append(Violation(
                    "metadata_backwards",
                    f"{node}'s final metadata ends at offset {offset}, below offset {highest['offset']} "
                    f"that {highest['node']} had applied at t={float(highest['time']):.3f}s", (highest, e)))
            continue
        before = last.get(node)
        if before is not None and offset < int(before["offset"]) and node not in reported and not any(
                float(before["time"]) <= t <= float(e["time"]) for t in touched_at[node]):
            reported.add(node)
            out.append(Violation(
                "metadata_backwards",
                f"{node}'s applied metadata went from offset {before['offset']} down to {offset} "
                "while it ran",
                (before, e)))
        last[node] = e
        if highest is None or offset > int(highest["offset"]):
            highest = e
    return out


def _nodes_named(detail: str) -> set[str]:
    names = set()
    for word in detail.replace(",", " ").replace(":", " ").split():
        kind, _, number = word.partition("-")
        if kind in ("broker", "controller") and number.isdigit():
            names.add(word)
    return names


# ---- signals: what a run showed that is no verdict on its own ----

# A power cut that drops more writes not fsynced than this from one controller is flagged: a controller
# fsyncs what it acknowledges, so only what was in flight at the cut can go (0-2 writes measured on
# kanal's own code, 9-49 with a Raft journal that is never fsynced; issue 41).
CONTROLLER_CUT_DROPPED_WRITES_MAX = 8
# Faults that must stall acks=all for a while: every broker here follows every partition, so a broker that
# stops answering holds back each acknowledgement until the ISR drops it.
STALLING_FAULTS = ("kill/node", "pause/node", "power/node", "partition/isolate", "partition/leader-alone")


@dataclass(frozen=True)
class PowerCut:
    time: float
    node: str
    dropped_writes: int


@dataclass(frozen=True)
class Signals:
    power_cuts: tuple[PowerCut, ...]
    windows: tuple[tuple[float, float, str], ...]  # unavailability: start, end (seconds), fault in force
    suspicious: tuple[str, ...]  # what deserves a look although no rule is broken


def signals(events: list[Event]) -> Signals:
    """Power cuts with the writes each dropped, unavailability windows, and what is suspicious: a
    controller cut that dropped more unsynced writes than `CONTROLLER_CUT_DROPPED_WRITES_MAX`, or a run
    with broker faults that stall acks=all but no unavailability window at all."""
    ordered = sorted(events, key=lambda e: float(e["time"]))
    cuts = tuple(
        PowerCut(float(e["time"]), str(e["node"]), int(e["dropped_writes"]))
        for e in ordered
        if e["type"] == "nemesis" and e.get("action") == "cut" and "dropped_writes" in e and "node" in e
    )
    windows = tuple((float(e["start"]), float(e["end"]), str(e.get("fault", "")))
                    for e in ordered if e["type"] == "unavailable")
    suspicious = [
        f"the power cut of {c.node} at t={c.time:.1f}s dropped {c.dropped_writes} writes not fsynced "
        f"(a controller fsyncs what it acknowledges; more than {CONTROLLER_CUT_DROPPED_WRITES_MAX} is odd)"
        for c in cuts
        if c.node.startswith("controller-") and c.dropped_writes > CONTROLLER_CUT_DROPPED_WRITES_MAX
    ]
    stalling = [e for e in ordered if e["type"] == "nemesis" and e.get("action") == "start"
                and e.get("fault") in STALLING_FAULTS and "broker-" in str(e.get("detail", ""))]
    if stalling and not windows:
        suspicious.append(f"{len(stalling)} broker faults under acks=all ({stalling[0]['fault']} "
                          f"{stalling[0]['detail']} first) and no unavailability at all: were "
                          "acknowledgements given without the in-sync replicas?")
    return Signals(cuts, windows, tuple(suspicious))
