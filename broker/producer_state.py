"""ProducerStateTable: idempotent-producer state of one partition, for deduplicating retried batches.

For each producer id that wrote to the partition the table keeps the producer epoch and the metadata of
its last `BATCHES_PER_PRODUCER_MAX` (5) batches: first and last sequence, base and last offset. Five,
because an idempotent producer keeps at most five requests in flight per partition (Kafka's
max.in.flight.requests.per.connection <= 5), so a retry is always of one of its last five batches.

The leader, for every producer batch, in one critical section (the partition lock):

    verdict = table.validate(producer_id, producer_epoch, base_sequence, last_offset_delta)
    Append     -> info = log.append(...); table.record(..., info.base_offset, max_timestamp_ms)
    Duplicate  -> answer NONE with the original batch's base offset (as Kafka's brokers do); no append
    Reject     -> answer the error; no append

Followers and log replay call `record` for every batch they store, without `validate`: the log is the
truth, and a replica rebuilt from it must end up with exactly the leader's table.

Validation rules (same epoch = the epoch already registered for the producer id):

| case                                                   | verdict                                   |
|--------------------------------------------------------|-------------------------------------------|
| producer_id 0 (not idempotent)                         | Append, nothing tracked                   |
| negative id / epoch / sequence, sequence > 2^31-1       | Reject INVALID_RECORD                     |
| unknown producer id, base_sequence 0                   | Append (a new producer)                   |
| unknown producer id, base_sequence != 0                | Reject UNKNOWN_PRODUCER_ID (see below)    |
| epoch older than registered                            | Reject INVALID_PRODUCER_EPOCH (a zombie)  |
| epoch newer than registered, base_sequence 0           | Append (the producer bumped its epoch)    |
| epoch newer than registered, base_sequence != 0        | Reject OUT_OF_ORDER_SEQUENCE_NUMBER       |
| same epoch, same first and last sequence as one of the | Duplicate(original base and last offset)  |
| last five batches                                      |                                           |
| same epoch, base_sequence = last sequence + 1 (wrapping| Append                                    |
| 2^31-1 -> 0)                                           |                                           |
| same epoch, anything else (a gap, an overlap, a retry  | Reject OUT_OF_ORDER_SEQUENCE_NUMBER       |
| older than the last five)                              |                                           |
| same epoch, no batch yet (a transaction marker moved   | Append at base_sequence 0, else Reject    |
| the producer to it: `record`)                          | OUT_OF_ORDER_SEQUENCE_NUMBER              |
| a transaction marker (`validate_marker`) whose         | Reject TRANSACTION_COORDINATOR_FENCED     |
| coordinator epoch is below the highest of a marker     | (any other marker: Append)                |
| stored for the producer id                             |                                           |

A batch's sequences are base_sequence .. base_sequence + last_offset_delta (mod 2^31), as in Kafka: they
count offsets, not records, so a batch keeps its sequence range after compaction removed records from it.

Unknown producer with a non-zero sequence. Kafka before 2.5 answered UNKNOWN_PRODUCER_ID here; since
KIP-360 it accepts any sequence from an unknown producer, because Kafka dropped a producer's state when
retention deleted its last batch, so a live producer could become unknown through no fault of its own.
kanal keeps producer state across retention (it lives in snapshots and is only forgotten after
`producer_id_expiration_ms` without a batch, ProducerActivity), so an unknown producer sending sequence
N > 0 means its earlier batches are not in this log, or it was idle long enough to be forgotten. Writing
the batch would hide a gap, so kanal answers UNKNOWN_PRODUCER_ID. kanal's producer (idempotence only with
acks=all, so no acknowledged batch can be missing) then moves that partition to a new epoch at sequence 0,
which is accepted, and sends the batch again (clients/producer.py, `_new_epoch`); it does the same after
OUT_OF_ORDER_SEQUENCE_NUMBER when a batch before failed for good.

Rebuilding: `ProducerStateTable.rebuild(batches)` replays batches in log order (a broker restart, a new
leader, a follower that truncated its log): the result equals the table built incrementally. The shell
replays from the newest producer-state snapshot at or below the log end (producer_snapshot.py) instead of
from the log start. There is no incremental truncation: after a truncation the shell reloads the newest
snapshot at or below the new log end and replays, because the five-batch window cannot be rolled back.

Pure: no I/O, no clocks, no threads. One owner serialises calls (the partition lock).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import NewType

from kanal.broker.storage.ids import Offset
from kanal.metadata.ids import ProducerId
from kanal.v1.batch import ATTR_CONTROL, BatchHeader, coordinator_epoch_in, iter_entries, scan_batch
from kanal.v1.error import ErrorCode, KanalError, error_name

# An idempotent producer's epoch, bumped by InitProducerId; an older epoch is a fenced zombie.
ProducerEpoch = NewType("ProducerEpoch", int)
# A per-(producer id, partition) record counter, 0 .. SEQUENCE_MAX, wrapping to 0.
SequenceNumber = NewType("SequenceNumber", int)

# The RecordBatch.producer_id of batches from producers that are not idempotent (records.proto).
NO_PRODUCER_ID = ProducerId(0)
SEQUENCE_MAX = SequenceNumber(2**31 - 1)
# Kafka's max.in.flight.requests.per.connection bound for idempotence; see the module docstring.
BATCHES_PER_PRODUCER_MAX = 5
# A producer no marker was stored for yet (coordinator epochs start at 0).
NO_COORDINATOR_EPOCH = -1


def add_sequence(sequence: int, delta: int) -> SequenceNumber:
    """`sequence + delta` on the wrapping sequence ring (2^31-1 + 1 = 0)."""
    return SequenceNumber((sequence + delta) % (SEQUENCE_MAX + 1))


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """What the table remembers of one stored batch."""

    first_sequence: SequenceNumber
    last_sequence: SequenceNumber
    base_offset: Offset
    last_offset: Offset


@dataclass(slots=True)
class ProducerEntry:
    """One producer id's state in this partition: its epoch and its last batches, oldest first."""

    producer_id: ProducerId
    producer_epoch: ProducerEpoch
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=BATCHES_PER_PRODUCER_MAX))
    # max_timestamp_ms of its last batch (the producer's clock); kept in snapshots. Expiry goes by the
    # broker's clock instead (ProducerActivity).
    last_timestamp_ms: int = 0
    # The highest coordinator epoch (the transaction coordinator's leader epoch of its __transaction_state
    # partition) of a marker stored for this producer; NO_COORDINATOR_EPOCH before any. A marker from an
    # older coordinator is refused (`validate_marker`). Kept in snapshots, rebuilt by replay.
    coordinator_epoch: int = -1

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ProducerEntry):
            return NotImplemented
        return (self.producer_id, self.producer_epoch, list(self.batches), self.last_timestamp_ms,
                self.coordinator_epoch) == (other.producer_id, other.producer_epoch, list(other.batches),
                                            other.last_timestamp_ms, other.coordinator_epoch)

    def __repr__(self) -> str:
        last = self.batches[-1] if self.batches else None
        tail = f"last_seq={last.last_sequence} last_offset={last.last_offset}" if last else "empty"
        return (f"<ProducerEntry id={self.producer_id} epoch={self.producer_epoch} {tail} "
                f"batches={len(self.batches)} coordinator_epoch={self.coordinator_epoch}>")

    @property
    def last_sequence(self) -> SequenceNumber:
        return self.batches[-1].last_sequence

    def find_duplicate(self, first_sequence: int, last_sequence: int) -> BatchMetadata | None:
        for batch in self.batches:
            if batch.first_sequence == first_sequence and batch.last_sequence == last_sequence:
                return batch
        return None


@dataclass(frozen=True, slots=True)
class ProducerBatch:
    """The fields of one stored batch that producer state needs, for `record` and replay."""

    producer_id: ProducerId
    producer_epoch: ProducerEpoch
    base_sequence: SequenceNumber
    base_offset: Offset
    last_offset: Offset
    max_timestamp_ms: int
    # A transaction marker (records.proto, TRANSACTIONS): written by the broker, outside the producer's
    # sequences; it only carries the producer's epoch and its coordinator epoch forward (see `record`).
    control: bool = False
    # A marker's coordinator epoch (its control record's value); NO_COORDINATOR_EPOCH for other batches.
    coordinator_epoch: int = -1

    @classmethod
    def from_header(cls, header: BatchHeader, base_offset: int | None = None,
                    stored: bytes | memoryview | None = None) -> ProducerBatch:
        """From a scanned batch: a stored one carries its base offset; for producer bytes, pass the
        offset the append assigned. A control batch needs its bytes (`stored`, producer or stored form)
        for its coordinator epoch; markers are one small record, so parsing them costs little."""
        base = header.base_offset if base_offset is None else base_offset
        control = bool(header.attributes & ATTR_CONTROL)
        if control and stored is None:
            raise ValueError("a control batch's ProducerBatch needs its bytes (coordinator epoch)")
        return cls(
            ProducerId(header.producer_id),
            ProducerEpoch(header.producer_epoch),
            SequenceNumber(header.base_sequence),
            Offset(base),
            Offset(base + header.last_offset_delta),
            header.max_timestamp_ms,
            control,
            coordinator_epoch_in(stored) if control and stored is not None else NO_COORDINATOR_EPOCH,
        )


def producer_batches_in(entries: bytes | memoryview) -> Iterator[ProducerBatch]:
    """The batches of a buffer of log entries (what Log.read returns), for replay. Reads headers only
    (and a marker's one record); the CRCs were checked when the log was appended to and recovered."""
    for entry in iter_entries(entries, verify_crc=False):
        yield ProducerBatch.from_header(scan_batch(entry.batch), entry.suffix.base_offset, entry.batch)


@dataclass(frozen=True, slots=True)
class Append:
    """Store the batch, then `record` it."""


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A retry of a stored batch: answer NONE with these offsets (broker.proto); do not store it."""

    base_offset: Offset
    last_offset: Offset


@dataclass(frozen=True, slots=True)
class Reject:
    """Refuse the batch with this error; nothing is stored."""

    error: int  # an ErrorCode
    message: str

    def __repr__(self) -> str:
        return f"<Reject {error_name(self.error)}: {self.message}>"

    def to_error(self) -> KanalError:
        return KanalError(self.error, self.message)


Verdict = Append | Duplicate | Reject
APPEND = Append()


class ProducerStateTable:
    def __init__(self) -> None:
        self._producers: dict[ProducerId, ProducerEntry] = {}
        # Every batch below this offset has been recorded (batches must be recorded in log order).
        self._next_offset = Offset(0)

    def __repr__(self) -> str:
        return f"<ProducerStateTable producers={len(self._producers)} next_offset={self._next_offset}>"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ProducerStateTable):
            return NotImplemented
        return self._next_offset == other._next_offset and self._producers == other._producers

    def __len__(self) -> int:
        return len(self._producers)

    @property
    def next_offset(self) -> Offset:
        """One past the last recorded batch: where replay continues."""
        return self._next_offset

    def entry(self, producer_id: int) -> ProducerEntry | None:
        return self._producers.get(ProducerId(producer_id))

    def entries(self) -> list[ProducerEntry]:
        """Every producer's entry, by producer id."""
        return [self._producers[pid] for pid in sorted(self._producers)]

    # ---- the produce path ----

    def validate(
        self, producer_id: int, producer_epoch: int, base_sequence: int, last_offset_delta: int
    ) -> Verdict:
        """Decide what to do with a producer batch before it is appended (table in the module docstring).
        Changes nothing."""
        if producer_id == NO_PRODUCER_ID:
            return APPEND
        if (
            producer_id < 0
            or producer_epoch < 0
            or not 0 <= base_sequence <= SEQUENCE_MAX
            or last_offset_delta < 0
        ):
            return Reject(
                ErrorCode.INVALID_RECORD,
                f"producer id {producer_id}, epoch {producer_epoch}, base sequence {base_sequence} or "
                f"last offset delta {last_offset_delta} is out of range",
            )
        entry = self._producers.get(ProducerId(producer_id))
        if entry is None:
            if base_sequence == 0:
                return APPEND
            return Reject(
                ErrorCode.UNKNOWN_PRODUCER_ID,
                f"producer {producer_id} is unknown here and sent sequence {base_sequence}, not 0: its "
                "earlier batches are not in this log",
            )
        if producer_epoch < entry.producer_epoch:
            return Reject(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"producer {producer_id} epoch {producer_epoch} is older than {entry.producer_epoch}",
            )
        if producer_epoch > entry.producer_epoch:
            if base_sequence != 0:
                return Reject(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                              f"producer {producer_id} new epoch {producer_epoch} must start at sequence 0, "
                              f"not {base_sequence}")
            return APPEND
        if not entry.batches:  # a transaction marker moved it to this epoch: sequences start again
            if base_sequence == 0:
                return APPEND
            return Reject(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                          f"producer {producer_id} epoch {producer_epoch} must start at sequence 0, not "
                          f"{base_sequence}")
        last_sequence = add_sequence(base_sequence, last_offset_delta)
        original = entry.find_duplicate(base_sequence, last_sequence)
        if original is not None:
            return Duplicate(original.base_offset, original.last_offset)
        expected = add_sequence(entry.last_sequence, 1)
        if base_sequence != expected:
            return Reject(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                          f"producer {producer_id} epoch {producer_epoch} sent sequence {base_sequence}, "
                          f"expected {expected}")
        return APPEND

    def validate_marker(self, producer_id: int, coordinator_epoch: int) -> Verdict:
        """A transaction marker (WriteTxnMarkers): TRANSACTION_COORDINATOR_FENCED when a marker from a newer
        coordinator of the producer's transactional id was stored already, so a deposed coordinator that
        still runs can never end a transaction here differently from its successor. Changes nothing."""
        entry = self._producers.get(ProducerId(producer_id))
        if entry is not None and coordinator_epoch < entry.coordinator_epoch:
            return Reject(
                ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                f"marker of producer {producer_id} from coordinator epoch {coordinator_epoch}, older than "
                f"{entry.coordinator_epoch} of a marker stored already",
            )
        return APPEND

    def validate_header(self, header: BatchHeader) -> Verdict:
        """`validate` for a scanned producer batch."""
        return self.validate(header.producer_id, header.producer_epoch, header.base_sequence,
                             header.last_offset_delta)

    def record(self, batch: ProducerBatch) -> None:
        """Remember a stored batch (after a leader append, a follower append, or in replay). Never
        rejects: the log is the truth. A batch with another epoch than the registered one starts the
        producer afresh with that epoch (in a log written by validating leaders it is always newer)."""
        if batch.base_offset < self._next_offset or batch.last_offset < batch.base_offset:
            # Recording out of log order would make the table differ from a replay of the log.
            raise ValueError(
                f"batch [{batch.base_offset}, {batch.last_offset}] recorded out of order: the table "
                f"already covers offsets below {self._next_offset}"
            )
        self._next_offset = Offset(batch.last_offset + 1)
        if batch.producer_id == NO_PRODUCER_ID:
            return
        if batch.control:
            # A marker carries a newer epoch (the coordinator ended a fenced producer's transaction) onto
            # the partition, so the zombie's later batches here are INVALID_PRODUCER_EPOCH (Kafka does the
            # same); it never touches the sequence window.
            known = self._producers.get(batch.producer_id)
            coordinator_epoch = max(
                batch.coordinator_epoch, known.coordinator_epoch if known else NO_COORDINATOR_EPOCH
            )
            if known is None or known.producer_epoch < batch.producer_epoch:
                self._producers[batch.producer_id] = ProducerEntry(batch.producer_id, batch.producer_epoch,
                                                                   last_timestamp_ms=batch.max_timestamp_ms,
                                                                   coordinator_epoch=coordinator_epoch)
            else:
                known.coordinator_epoch = coordinator_epoch
            return
        delta = batch.last_offset - batch.base_offset
        meta = BatchMetadata(batch.base_sequence, add_sequence(batch.base_sequence, delta),
                             batch.base_offset, batch.last_offset)
        entry = self._producers.get(batch.producer_id)
        if entry is None or entry.producer_epoch != batch.producer_epoch:
            # A new epoch starts the sequences afresh; the coordinator epoch stays (it is the coordinator's).
            entry = ProducerEntry(
                batch.producer_id,
                batch.producer_epoch,
                coordinator_epoch=entry.coordinator_epoch if entry else NO_COORDINATOR_EPOCH,
            )
            self._producers[batch.producer_id] = entry
        entry.batches.append(meta)  # the deque's maxlen drops the oldest of six
        entry.last_timestamp_ms = batch.max_timestamp_ms

    def advance_to(self, offset: int) -> None:
        """Note that the log holds no further batches below `offset` (the shell skipped recording some,
        e.g. a follower that started its log at the leader's log start)."""
        if offset < self._next_offset:
            raise ValueError(f"cannot move the table back from {self._next_offset} to {offset}")
        self._next_offset = Offset(offset)

    # ---- rebuilding and forgetting ----

    @classmethod
    def rebuild(
        cls, batches: Iterable[ProducerBatch], *, start: ProducerStateTable | None = None
    ) -> ProducerStateTable:
        """Replay batches in log order, on top of `start` (a loaded snapshot; it is changed) or an empty
        table."""
        table = start if start is not None else cls()
        for batch in batches:
            table.record(batch)
        return table

    @classmethod
    def from_entries(cls, entries: Iterable[ProducerEntry], next_offset: int) -> ProducerStateTable:
        """A table holding exactly these entries (a snapshot being loaded)."""
        table = cls()
        for entry in entries:
            if entry.producer_id in table._producers:
                raise ValueError(f"producer {entry.producer_id} appears twice")
            if not entry.batches and entry.coordinator_epoch == NO_COORDINATOR_EPOCH:
                raise ValueError(f"producer {entry.producer_id} has neither batches nor a marker")
            table._producers[entry.producer_id] = entry
        table._next_offset = Offset(next_offset)
        return table

    def forget(self, producer_ids: Iterable[int]) -> None:
        """Drop these producers (expired: see ProducerActivity). A later batch from one of them with
        sequence != 0 gets UNKNOWN_PRODUCER_ID; one at sequence 0 starts it afresh."""
        for pid in producer_ids:
            self._producers.pop(ProducerId(pid), None)

    def producer_ids(self) -> list[ProducerId]:
        return list(self._producers)


class ProducerActivity:
    """When this replica last stored a batch of each producer, by the broker's clock, and which producers
    have been idle for `producer_id_expiration_ms` (Kafka's producer.id.expiration.ms): forgetting them is
    what bounds a partition's ProducerStateTable.

    Why not the batches' own timestamps: a producer may set them to any time, and one replaying last
    year's data would be forgotten at once and lose deduplication of its retries. Kept beside the table,
    not in it: the table must equal a replay of the log, which holds no append times. Not in snapshots
    either: after a restart or a replay, every producer in the table counts as seen then, which can only
    lengthen its life."""

    def __init__(self) -> None:
        self._last_seen_ms: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._last_seen_ms)

    def seen(self, producer_id: int, now_ms: int) -> None:
        if producer_id != NO_PRODUCER_ID:
            self._last_seen_ms[producer_id] = now_ms

    def expired(self, producer_ids: Iterable[int], now_ms: int, producer_id_expiration_ms: int) -> list[int]:
        """Of the producers the table holds, those idle for at least `producer_id_expiration_ms`; they are
        forgotten here too, as is any producer the table no longer holds. One not seen yet (the table was
        loaded or rebuilt) counts as seen now."""
        if producer_id_expiration_ms < 0:
            raise ValueError(f"producer_id_expiration_ms must be >= 0, got {producer_id_expiration_ms}")
        last_seen = {pid: self._last_seen_ms.get(pid, now_ms) for pid in producer_ids}
        expired = sorted(pid for pid, t in last_seen.items() if now_ms - t >= producer_id_expiration_ms)
        for pid in expired:
            del last_seen[pid]
        self._last_seen_ms = last_seen
        return expired
