"""A follower's start at the leader's local log start on a tiered log (issue 44; Kafka's
buildRemoteLogAuxState, KIP-405): the state a replica needs at an offset S without copying the log below it.

A leader of a tiered partition answers a follower's fetch below its local log start S with
OFFSET_OUT_OF_RANGE and S as `log_start_offset` (what is only in remote storage is never copied back to a
replica's disk). A follower that is that far behind (a replica a reassignment adds, or one down longer
than local retention) restarts its log empty at S, but an empty restart would leave it without what the
offsets below S decided:

- the leader epochs that began below S (divergence checks after a later leader change, and the epoch of
  its last batch that the follower names in every fetch);
- the idempotence state at S (a producer's sequences, should this replica lead);
- the transactions open at S (the last stable offset, read_committed consumers, markers to come).

All three are in remote storage's description of the log: the epochs of every remote segment are in the
metadata image (RemoteSegment.epochs), and the producer snapshot and transaction checkpoint at a
segment's end are in its `.meta` object (storage/remote_segment_meta.py). The leader's local start is
always the end of a remote segment when anything was deleted locally (replicas delete only whole,
uploaded segments), so the `.meta` of the segment ending at S holds the state at S.

Decided under the partition's lock (`plan_restart`, pure), read off the event loop (`read_aux_state`: one
small GET, in the remote reader's pool), applied under the lock again (`Partition.restart_from_remote`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from kanal.broker.producer_snapshot import decode_snapshot
from kanal.broker.producer_state import ProducerStateTable
from kanal.broker.storage.remote_segment_meta import RemoteSegmentMeta
from kanal.broker.storage.transaction_checkpoint import decode_checkpoint
from kanal.broker.storage.transaction_index import TransactionIndex
from kanal.metadata.image import RemoteLog, RemoteSegment
from kanal.v1.error import ErrorCode, KanalError

if TYPE_CHECKING:
    from kanal.broker.remote_fetch import RemoteReader


class RestartKind(StrEnum):
    """How a follower far behind a tiered leader restarts its log at the leader's local start."""

    EMPTY = "empty"  # the leader's local start is the whole log's start: nothing below it to know
    REMOTE = "remote"  # a remote segment ends there: start with the aux state its `.meta` holds
    WAIT = "wait"  # this broker's metadata does not show the remote log reaching there yet


@dataclass(frozen=True, slots=True)
class RestartPlan:
    kind: RestartKind
    reason: str
    segment: RemoteSegment | None = None  # REMOTE: the remote segment ending at the leader's local start


def plan_restart(remote: RemoteLog | None, start: int) -> RestartPlan:
    """How a follower of a tiered partition restarts at the leader's local log start `start`, given the
    partition's remote log in its applied metadata.

    WAIT rather than an empty restart whenever the image cannot tell: the leader deletes locally only below
    the remote end of the metadata it applied, so a start past this image's remote end means this broker has
    not applied those records yet; they arrive in the same order the leader saw them."""
    if remote is None or start > remote.end_offset:
        end = "none" if remote is None else remote.end_offset
        return RestartPlan(RestartKind.WAIT, f"the remote log in this broker's metadata ends at {end}, below "
                                             f"the leader's local log start {start}")
    first = remote.segments[0].base_offset if remote.segments else remote.log_start_offset
    if start <= first:
        return RestartPlan(RestartKind.EMPTY, f"the leader's local log start {start} is not above the remote "
                                              f"log's start {first}: the whole log starts there")
    for segment in remote.segments:
        if segment.end_offset == start:
            return RestartPlan(RestartKind.REMOTE, f"remote segment [{segment.base_offset}, "
                                                   f"{segment.end_offset}) ends there", segment)
    return RestartPlan(RestartKind.WAIT, f"no remote segment ends at the leader's local log start {start} "
                                         f"(remote log {remote!r})")


def remote_epochs(remote: RemoteLog, end_offset: int) -> list[tuple[int, int]]:
    """(leader epoch, start offset) of the epochs with records in the remote segments ending at or below
    `end_offset`, in order, each epoch once at its first offset: what a LeaderEpochCache holds for them."""
    out: list[tuple[int, int]] = []
    for segment in remote.segments:
        if segment.end_offset > end_offset:
            break
        for epoch, start in segment.epochs:
            if not out or epoch > out[-1][0]:
                out.append((int(epoch), start))
    return out


@dataclass(frozen=True, slots=True)
class AuxStateSpec:
    """What a restart from remote storage needs to read, decided under the partition's lock."""

    topic_id: str
    partition: int
    leader_id: int
    start: int  # the leader's local log start: `segment.end_offset`
    segment: RemoteSegment
    remote: RemoteLog  # the remote log in the image the decision saw


class RemoteAuxStateNeeded(Exception):
    """Raised by Partition.apply_fetched for a restart only remote storage can give the state of: the
    fetcher reads it off the event loop (`read_aux_state`) and applies it (Partition.restart_from_remote)."""

    def __init__(self, spec: AuxStateSpec) -> None:
        super().__init__(f"aux state of {spec.topic_id}-{spec.partition} at {spec.start}")
        self.spec = spec


@dataclass(frozen=True, slots=True)
class AuxState:
    """A replica's state at `start` with nothing stored below it."""

    start: int
    epochs: tuple[tuple[int, int], ...]  # (leader epoch, start offset), every one below `start`
    producers: ProducerStateTable  # at `start`
    transactions: TransactionIndex  # open transactions at `start`, next offset `start`


def aux_state(spec: AuxStateSpec, meta: RemoteSegmentMeta) -> AuxState:
    """The aux state at `spec.start` from the `.meta` object of the segment ending there; CORRUPT_MESSAGE
    when the object describes another end (it must never seed state at the wrong offset)."""
    if meta.end_offset != spec.start:
        segment = spec.segment
        raise KanalError(ErrorCode.CORRUPT_MESSAGE, f"the .meta of remote segment [{segment.base_offset}, "
                                                    f"{segment.end_offset}) ends at {meta.end_offset}")
    offset, producers = decode_snapshot(meta.producer_snapshot)
    checkpoint = decode_checkpoint(meta.transactions)
    if offset != spec.start or checkpoint.next_offset != spec.start:
        raise KanalError(ErrorCode.CORRUPT_MESSAGE,
                         f"the .meta of remote segment ending at {spec.start} holds state at {offset} "
                         f"(producers) and {checkpoint.next_offset} (transactions)")
    if producers.next_offset < spec.start:
        producers.advance_to(spec.start)
    return AuxState(spec.start, tuple(remote_epochs(spec.remote, spec.start)), producers,
                    TransactionIndex(dict(checkpoint.ongoing), [], spec.start))


def read_aux_state(reader: RemoteReader, spec: AuxStateSpec) -> AuxState:
    """Read and decode the `.meta` object `spec` names (remote I/O: call it off the event loop).
    RemoteStorageError (retriable when storage is down) or KanalError (a damaged object) on failure."""
    return aux_state(spec, reader.meta(spec.topic_id, spec.partition, spec.segment).meta)
