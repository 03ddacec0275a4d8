"""ReplicaHistory: which replica of a partition holds the current history, where the others part from it,
and how far the history is committed. A pure core: the copies' states in, a plan out (copy_plan.py does
the file reading).

A copy's history is its leader-epoch checkpoint (`<epoch> <start offset>` pairs,
kanal.broker.storage.leader_epoch_cache) clipped to [log start, log end): offset o was written under the
epoch of the last entry starting at or below o. One leader per epoch writes each offset once, so two
copies hold the same record at o exactly when they hold o under the same epoch.

Rules (Kafka's, as a follower applies them when it truncates after a leader change):

- **The current history** is the copy with the latest epoch, then the longest log (ties: the ISR
  leader's copy, then the directory name). A leader epoch only grows, and a leader's epoch is written
  into its log with its first append, so the latest epoch on disk is the newest leader's.
- **Agreement.** Copy c agrees with the current history r up to the first offset, in the range both
  hold, where their epochs differ (`agreement_end`); past min(log ends) nothing is compared. c
  **diverges** when it holds offsets past that point: records its leader wrote that no later leader
  kept (a dead ex-leader's acks=1 tail). They were never committed and are never read; the divergence
  is reported.
- **Committed end.** A record is committed once every in-sync replica holds it (the high-water mark is
  the minimum log end over the ISR). The broker does not checkpoint its high-water mark to disk, so the
  files cannot say where it was; the rule uses what they do say: with the metadata log's image at hand,
  committed end = min over the ISR members' copies of their agreement with r (a copy whose end could not
  be read exactly, because its last segment is damaged, does not count while an intact one does). Every
  record an acks=all producer saw acknowledged is below it, and every record below it is on every
  in-sync replica, so it survives any clean election. Without the image (no controller directory next to
  the data), or when no ISR member's copy is present, the current history is read to its end, and the
  reason is a note.
- **Topic incarnations.** A name deleted and re-created is a new topic id; copies recording another id
  than the current one (`partition.metadata`) belong to the earlier topic and are never mixed in. With the
  image, the current id is the image's (a name the image does not hold was deleted: nothing is read);
  without it, the id whose `partition.metadata` was written last. A copy recording no id (written before
  ids were recorded) is taken to be the current incarnation, as a broker adopts it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class CopyState:
    """One replica of one partition as its files describe it."""

    directory: str
    epochs: tuple[tuple[int, int], ...]  # (leader epoch, start offset), both increasing, clipped to the log
    log_start: int
    log_end: int  # one past the last offset found
    log_end_exact: bool = True  # False: the last segment is damaged, so log_end is only a lower bound
    broker_id: int | None = None  # from the node's meta.properties (None: not found)
    topic_id: str | None = None  # from partition.metadata (None: not recorded)
    topic_id_written_ns: int = 0  # mtime of partition.metadata: which incarnation is newest, without an image

    @property
    def latest_epoch(self) -> int:
        return self.epochs[-1][0] if self.epochs else -1

    def epoch_at(self, offset: int) -> int:
        """The epoch `offset` was written under (-1 when it is below every entry)."""
        found = -1
        for epoch, start in self.epochs:
            if start > offset:
                break
            found = epoch
        return found

    def __repr__(self) -> str:
        epochs = ", ".join(f"{e}@{o}" for e, o in self.epochs)
        return (f"<CopyState {self.directory} broker={self.broker_id} [{self.log_start}, {self.log_end}"
                f"{'' if self.log_end_exact else '+'}) epochs=[{epochs}]>")


@dataclass(frozen=True, slots=True)
class PartitionFacts:
    """What the metadata image says about a partition (absent: no image was found)."""

    topic_id: str | None  # the current topic id of this name; None: the image holds no such topic
    isr: tuple[int, ...] = ()
    leader: int = -1
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class Alternate:
    """A copy that may stand in for the current one over [its log start, agree_end)."""

    directory: str
    agree_end: int


@dataclass(frozen=True, slots=True)
class PartitionPlan:
    """How to read one partition: the current copy from read_from to committed_end (exclusive), the
    other copies that agree with it for damaged ranges, and what was noticed (divergences, copies left
    out, the rule used)."""

    topic: str
    partition: int
    primary: str | None  # None: nothing to read (a deleted topic's leftovers)
    read_from: int
    committed_end: int
    alternates: tuple[Alternate, ...] = ()
    notes: tuple[tuple[int, str], ...] = field(default=())  # (offset, text)
    divergent: tuple[str, ...] = ()  # directories of copies that diverge


def agreement_end(copy: CopyState, reference: CopyState) -> int:
    """The first offset both hold under different epochs, else the shorter log end."""
    lo = max(copy.log_start, reference.log_start)
    hi = min(copy.log_end, reference.log_end)
    if lo >= hi:
        return hi  # nothing in common to compare: no evidence of divergence
    points = sorted(
        {lo, *(s for _, s in copy.epochs if lo < s < hi), *(s for _, s in reference.epochs if lo < s < hi)}
    )
    for point in points:
        if copy.epoch_at(point) != reference.epoch_at(point):
            return point
    return hi


def current_history(copies: Sequence[CopyState], leader: int = -1) -> CopyState:
    """The copy holding the current history (module docstring)."""
    if not copies:
        raise ValueError("no copies to choose from")
    return max(copies, key=lambda c: (c.latest_epoch, c.log_end, c.broker_id == leader and leader >= 0,
                                      c.log_end_exact, _reverse_name(c.directory)))


def _reverse_name(name: str) -> tuple[int, ...]:
    # max() picks the largest key; ties between equal copies go to the smallest directory name.
    return tuple(-ord(ch) for ch in name)


def _incarnation(topic: str, partition: int, copies: Sequence[CopyState], facts: PartitionFacts | None
                 ) -> tuple[list[CopyState], list[tuple[int, str]], str | None]:
    """The copies of the current topic id, notes on the others, and the id (None when unknown)."""
    ids = {c.topic_id for c in copies if c.topic_id is not None}
    notes: list[tuple[int, str]] = []
    current: str | None
    if facts is not None:
        if facts.topic_id is None:
            for c in copies:
                recorded = f" (topic id {c.topic_id})" if c.topic_id else ""
                notes.append(
                    (
                        c.log_start,
                        (
                            f"{topic}-{partition}: {c.directory}{recorded} is left over from a topic "
                            f"the metadata log deleted; not read"
                        ),
                    )
                )
            return [], notes, None
        current = facts.topic_id
    elif len(ids) > 1:
        current = max(
            (c for c in copies if c.topic_id is not None), key=lambda c: c.topic_id_written_ns
        ).topic_id
        notes.append((0, (f"{topic}-{partition}: copies of {len(ids)} topic ids and no metadata "
                         f"log to say which is current: the newest partition.metadata's ({current}) is "
                         "read")))
    else:
        current = next(iter(ids), None)
    kept = []
    for c in copies:
        if c.topic_id is None or c.topic_id == current:
            kept.append(c)
        else:
            notes.append(
                (
                    c.log_start,
                    (
                        f"{topic}-{partition}: {c.directory} belongs to topic id {c.topic_id}, an "
                        f"earlier topic of this name (current id {current}); not read"
                    ),
                )
            )
    return kept, notes, current


def plan_partition(topic: str, partition: int, copies: Sequence[CopyState], facts: PartitionFacts | None
                   ) -> PartitionPlan:
    """Which copy to read, to which offset, with which stand-ins (module docstring). `facts`: the
    image's view of the partition, None without an image."""
    kept, notes, _ = _incarnation(topic, partition, copies, facts)
    if not kept:
        return PartitionPlan(topic, partition, None, 0, 0, notes=tuple(notes))
    leader = facts.leader if facts is not None else -1
    ref = current_history(kept, leader)
    agree = {c.directory: (ref.log_end if c is ref else agreement_end(c, ref)) for c in kept}
    divergent = []
    for c in kept:
        end = agree[c.directory]
        if c is not ref and end < c.log_end:
            divergent.append(c.directory)
            notes.append((end, (
                f"{topic}-{partition}: DIVERGENT copy {c.directory}{_broker(c)} parts from the "
                f"current history ({ref.directory}{_broker(ref)}, leader epoch {ref.latest_epoch}) "
                f"at offset {end}: its offsets {end}..{c.log_end - 1} (epoch {c.epoch_at(end)}) were "
                "never committed and are not read")))
    committed, why = _committed_end(ref, kept, agree, facts)
    if why:
        notes.append((committed, f"{topic}-{partition}: {why}"))
    elif committed < ref.log_end:
        notes.append((committed, (
            f"{topic}-{partition}: offsets {committed}..{ref.log_end - 1} of "
            f"{ref.directory}{_broker(ref)} are not on every in-sync replica yet (not committed): "
            "not read")))
    alternates = sorted((Alternate(c.directory, min(agree[c.directory], committed)) for c in kept
                         if c is not ref and agree[c.directory] > c.log_start),
                        key=lambda a: (-a.agree_end, a.directory))
    return PartitionPlan(topic, partition, ref.directory, ref.log_start, committed, tuple(alternates),
                         tuple(sorted(notes)), tuple(divergent))


def _committed_end(ref: CopyState, kept: Sequence[CopyState], agree: dict[str, int],
                   facts: PartitionFacts | None) -> tuple[int, str]:
    """The committed end and, when the ISR rule could not be applied, why."""
    if facts is None:
        return ref.log_end, ""  # the whole-directory note says once that no metadata log was found
    in_sync = [c for c in kept if c.broker_id is not None and c.broker_id in facts.isr]
    exact = [c for c in in_sync if c.log_end_exact] or in_sync
    if not exact:
        return ref.log_end, (
            f"no copy of an in-sync replica (ISR {list(facts.isr)}) is here: "
            f"read to the end of {ref.directory}{_broker(ref)}, which may hold records not committed"
        )
    return min(agree[c.directory] for c in exact), ""


def _broker(c: CopyState) -> str:
    return f" (broker {c.broker_id})" if c.broker_id is not None else ""
