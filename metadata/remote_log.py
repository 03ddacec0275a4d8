"""Tiered storage's remote-log metadata: the rules a partition's remote log keeps, and AlterRemoteLog.

A partition's remote log (image.RemoteLog) lives in the metadata log, not in an internal topic
(docs/architecture.md, "Tiered storage: where remote-log metadata lives"). A leader that uploaded closed
segments records them with AlterRemoteLog; remote retention moves the remote log start the same way.
`apply` keeps the rules below for every RemoteLogSegmentRecord and RemoteLogStartRecord (a record that
breaks one is a broken invariant); the decision answers a request that would break one with an error.

Rules of a remote log (`check_segment`, `check_new_start`):

- Contiguous: a segment starts where the last one ends (`end_offset`); the first one, or the first after
  a start move emptied the log, anywhere at or above the start, which then moves to it (offsets below it
  were never uploaded: a log whose local retention deleted them before tiering was turned on). So the
  remote log is one range [start, end) with no gap a reader could fall into, and the next upload's
  place is known from the image alone.
- Well formed: end > base; the epoch entries start at base, strictly increase in offset (below end) and
  in epoch, and end at or below the uploader's leader epoch; the first is not below the previous
  segment's last epoch (epochs never go back along a log, or a divergence check over the remote part
  would find the wrong truncation point); aborted and open transactions lie where their names say.
- The start only moves forward, and at most to the end while the log holds segments; segments that end
  at or below it leave the log. A start that reaches the end leaves no segment and stays recorded.

AlterRemoteLog (`decide_alter_remote_log`). Whole request: the broker must be registered with the epoch
it sends (else STALE_BROKER_EPOCH). Items are decided in order, each against the state the earlier
items leave, and a failed item writes nothing. Per item, in this order:

1. the partition exists                            else UNKNOWN_TOPIC_OR_PARTITION
2. the item's leader epoch is the partition's      else FENCED_LEADER_EPOCH: a deposed (zombie) leader's
                                                   upload is refused when the controller decides, so no
                                                   reader ever sees a segment its epoch lineage disowns
3. the requester leads it and is not fenced        else NOT_LEADER_OR_FOLLOWER
4. the topic's effective remote.storage.enable     else INVALID_CONFIG
5. the item is well formed                         else INVALID_REQUEST (no change; no segment; a
                                                   segment's topic, partition, leader epoch or broker
                                                   not the item's; a rule of "well formed" above)
6. its offsets fit the remote log                  else OFFSET_OUT_OF_RANGE (not contiguous; a new start
                                                   outside [start, end])

A segment recorded already, field for field, answers NONE and writes nothing, as does a new start equal
to the current one: a leader resends a request whose reply it lost, and must not be told it failed.

Cost: O(the request's segments, epoch entries and transactions) plus O(log segments of a partition) per
segment for a bisection; nothing scans the image's topics or remote logs (tests/metadata/
test_decision_cost.py). Applying a segment copies the partition's segment tuple (image values are
immutable): a pointer copy per segment of that partition, microseconds at the ~1e5 live segments per
cluster this design is sized for.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import NamedTuple

from kanal.metadata.config_resource import effective_topic_config
from kanal.metadata.decision import Decision, Stamp
from kanal.metadata.ids import BrokerId, PartitionId, TopicId
from kanal.metadata.image import EpochStart, MetadataImage, RemoteLog, RemoteSegment, TopicImage
from kanal.metadata.topic_config_rules import REMOTE_STORAGE_ENABLE
from kanal.v1 import controller_pb2, metadata_pb2
from kanal.v1.error import ErrorCode, KanalError

# The remote log of a partition none of whose segments was ever recorded.
NO_REMOTE_LOG = RemoteLog((), 0)

_Item = controller_pb2.AlterRemoteLogResponse.Item


class RemoteTail(NamedTuple):
    """What the rules need of a remote log: its range and the last segment's last epoch (None: no
    segment). O(1) to take, so a decision can follow a partition's log across a request's items without
    copying its segments."""

    log_start_offset: int
    end_offset: int
    last_epoch: int | None

    @classmethod
    def of(cls, log: RemoteLog) -> RemoteTail:
        last = log.segments[-1].last_epoch if log.segments else None
        return cls(log.log_start_offset, log.end_offset, last)

    def after_segment(self, segment: RemoteSegment) -> RemoteTail:
        start = self.log_start_offset if self.last_epoch is not None else segment.base_offset
        return RemoteTail(start, segment.end_offset, segment.last_epoch)

    def after_start(self, start: int) -> RemoteTail:
        if start >= self.end_offset:
            return RemoteTail(start, start, None)
        return RemoteTail(start, self.end_offset, self.last_epoch)


# -- the rules (apply and the decision both keep them) ---------------------------------------------------


def check_segment(tail: RemoteTail, segment: RemoteSegment) -> None:
    """Raise KanalError (INVALID_REQUEST, OFFSET_OUT_OF_RANGE) unless `segment` may follow `tail`."""
    _check_segment_shape(segment)
    if tail.last_epoch is None:
        if segment.base_offset < tail.log_start_offset:
            raise KanalError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"segment {_range(segment)} starts below the remote log start {tail.log_start_offset}",
            )
    elif segment.base_offset != tail.end_offset:
        raise KanalError(
            ErrorCode.OFFSET_OUT_OF_RANGE,
            f"segment {_range(segment)} does not start at the remote log end {tail.end_offset}",
        )
    if tail.last_epoch is not None and segment.epochs[0].epoch < tail.last_epoch:
        raise KanalError(
            ErrorCode.INVALID_REQUEST,
            f"segment {_range(segment)} starts in epoch {segment.epochs[0].epoch}, below the previous "
            f"segment's last epoch {tail.last_epoch}",
        )


def _check_segment_shape(s: RemoteSegment) -> None:
    where = f"segment {_range(s)}"
    if not 0 <= s.base_offset < s.end_offset:
        raise KanalError(ErrorCode.INVALID_REQUEST, f"{where}: needs 0 <= base offset < end offset")
    if s.size_bytes <= 0 or s.meta_bytes < 0 or s.max_timestamp_ms < -1:
        raise KanalError(
            ErrorCode.INVALID_REQUEST,
            f"{where}: size {s.size_bytes} B (> 0), meta {s.meta_bytes} B (>= 0), "
            f"max timestamp {s.max_timestamp_ms} (>= -1)",
        )
    if s.leader_epoch < 0 or s.broker_id < 0:
        raise KanalError(ErrorCode.INVALID_REQUEST, f"{where}: negative leader epoch or broker id")
    if not s.epochs or s.epochs[0].start_offset != s.base_offset:
        raise KanalError(ErrorCode.INVALID_REQUEST, f"{where}: its first epoch entry must start at its base")
    previous: EpochStart | None = None
    for entry in s.epochs:
        if entry.epoch < 0 or entry.start_offset >= s.end_offset:
            raise KanalError(ErrorCode.INVALID_REQUEST, f"{where}: epoch entry {tuple(entry)} out of range")
        if previous is not None and not (
            entry.epoch > previous.epoch and entry.start_offset > previous.start_offset
        ):
            # An epoch cache has one entry per epoch, both fields increasing; anything else cannot be
            # turned back into one by a replica that starts from the remote log.
            raise KanalError(
                ErrorCode.INVALID_REQUEST,
                f"{where}: epoch entries {tuple(previous)}, {tuple(entry)} do not both increase",
            )
        previous = entry
    if s.epochs[-1].epoch > s.leader_epoch:
        raise KanalError(
            ErrorCode.INVALID_REQUEST,
            f"{where}: holds epoch {s.epochs[-1].epoch}, above its uploader's leader epoch {s.leader_epoch}",
        )
    last_marker = -1
    for txn in s.aborted_transactions:
        if txn.producer_id < 0 or not 0 <= txn.first_offset <= txn.last_offset:
            raise KanalError(ErrorCode.INVALID_REQUEST, f"{where}: aborted transaction {tuple(txn)}")
        if not s.base_offset <= txn.last_offset < s.end_offset or txn.last_offset <= last_marker:
            raise KanalError(
                ErrorCode.INVALID_REQUEST,
                f"{where}: aborted transaction markers must lie inside it, by increasing offset",
            )
        last_marker = txn.last_offset
    producers: set[int] = set()
    for open_txn in s.open_transactions:
        if open_txn.producer_id < 0 or not 0 <= open_txn.first_offset < s.end_offset:
            raise KanalError(ErrorCode.INVALID_REQUEST, f"{where}: open transaction {tuple(open_txn)}")
        producers.add(open_txn.producer_id)
    if len(producers) != len(s.open_transactions):
        raise KanalError(ErrorCode.INVALID_REQUEST, f"{where}: two open transactions of one producer")


def check_new_start(tail: RemoteTail, start: int) -> None:
    """Raise KanalError (OFFSET_OUT_OF_RANGE) unless a RemoteLogStartRecord may move the start to `start`:
    forward, and not past the end while the log holds segments (what `apply` keeps; the decision asks
    for [start, end] and writes nothing for the current start)."""
    if start <= tail.log_start_offset:
        raise KanalError(
            ErrorCode.OFFSET_OUT_OF_RANGE,
            f"new remote log start {start} is not above the current one {tail.log_start_offset}",
        )
    if tail.last_epoch is not None and start > tail.end_offset:
        raise KanalError(
            ErrorCode.OFFSET_OUT_OF_RANGE, f"new remote log start {start} is past the end {tail.end_offset}"
        )


def with_segment(log: RemoteLog, segment: RemoteSegment) -> RemoteLog:
    """`log` with `segment` appended (checked by check_segment)."""
    start = log.log_start_offset if log.segments else segment.base_offset
    return RemoteLog(log.segments + (segment,), start)


def with_start(log: RemoteLog, start: int) -> RemoteLog:
    """`log` from `start` on (checked by check_new_start): the segments ending at or below it leave."""
    first_kept = bisect_right(log.segments, start, key=_end_offset)
    return RemoteLog(log.segments[first_kept:], start)


def is_recorded(log: RemoteLog, segment: RemoteSegment) -> bool:
    """Whether `log` holds this very segment (by bisection on base offsets, not a scan)."""
    i = bisect_left(log.segments, segment.base_offset, key=_base_offset)
    return i < len(log.segments) and log.segments[i] == segment


def remote_storage_enabled(image: MetadataImage, topic: TopicImage) -> bool:
    """The topic's effective remote.storage.enable, at the levels the controller reads (topic, then the
    cluster default, then the built-in default false), typed by the topic config table."""
    return bool(effective_topic_config(image, topic.name)[REMOTE_STORAGE_ENABLE])


def _base_offset(segment: RemoteSegment) -> int:
    return segment.base_offset


def _end_offset(segment: RemoteSegment) -> int:
    return segment.end_offset


def _range(segment: RemoteSegment) -> str:
    return f"[{segment.base_offset}, {segment.end_offset})"


# -- the decision ----------------------------------------------------------------------------------------


def decide_alter_remote_log(
    image: MetadataImage,
    request: controller_pb2.AlterRemoteLogRequest,
    *,
    now_ms: int,
    principal: str,
    request_id: str,
) -> Decision[controller_pb2.AlterRemoteLogResponse]:
    """Record a leader's uploaded segments and remote log start moves, item by item."""
    stamp = Stamp(now_ms, principal, request_id)
    reg = image.brokers.get(BrokerId(request.broker_id))
    if reg is None or reg.broker_epoch != request.broker_epoch:
        return Decision([], controller_pb2.AlterRemoteLogResponse(
            error=ErrorCode.STALE_BROKER_EPOCH,
            error_message=f"broker {request.broker_id} is not registered with epoch {request.broker_epoch}",
        ))
    records: list[metadata_pb2.MetadataRecord] = []
    items: list[controller_pb2.AlterRemoteLogResponse.Item] = []
    # Each partition's remote log as the items decided so far leave it (the image's until one changes it).
    tails: dict[tuple[TopicId, PartitionId], RemoteTail] = {}
    enabled: dict[TopicId, bool] = {}
    for item in request.items:
        key = (TopicId(item.topic_id), PartitionId(item.partition_id))
        log = image.remote_logs.get(key, NO_REMOTE_LOG)
        tail = tails[key] if key in tails else RemoteTail.of(log)
        try:
            _check_leader(image, reg.fenced, request.broker_id, item, enabled)
            new_tail, new_records = _decide_item(log, tail, request.broker_id, item)
        except KanalError as exc:
            items.append(_reply_item(item, exc.code, exc.message, tail))
            continue
        tails[key] = new_tail
        records.extend(stamp.record(**body) for body in new_records)
        items.append(_reply_item(item, ErrorCode.NONE, "", new_tail))
    return Decision(records, controller_pb2.AlterRemoteLogResponse(items=items))


def _check_leader(
    image: MetadataImage,
    fenced: bool,
    broker_id: int,
    item: controller_pb2.AlterRemoteLogRequest.Item,
    enabled: dict[TopicId, bool],
) -> None:
    topic = image.topic_by_id(item.topic_id)
    partition = image.partition(item.topic_id, item.partition_id)
    if topic is None or partition is None:
        raise KanalError(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"partition {item.topic_id}/{item.partition_id} is unknown"
        )
    if item.leader_epoch != partition.leader_epoch:
        raise KanalError(
            ErrorCode.FENCED_LEADER_EPOCH,
            f"leader epoch {item.leader_epoch} is not the current {partition.leader_epoch}",
        )
    if partition.leader != broker_id or fenced:
        raise KanalError(
            ErrorCode.NOT_LEADER_OR_FOLLOWER,
            f"broker {broker_id}{' (fenced)' if fenced else ''} does not lead {topic.name}-"
            f"{item.partition_id} (its leader is {partition.leader})",
        )
    if topic.topic_id not in enabled:
        enabled[topic.topic_id] = remote_storage_enabled(image, topic)
    if not enabled[topic.topic_id]:
        raise KanalError(ErrorCode.INVALID_CONFIG, f"topic {topic.name} has {REMOTE_STORAGE_ENABLE}=false")


def _decide_item(
    log: RemoteLog, tail: RemoteTail, broker_id: int, item: controller_pb2.AlterRemoteLogRequest.Item
) -> tuple[RemoteTail, list[dict[str, object]]]:
    """The partition's tail after the item, and the record bodies it writes; KanalError when it fails."""
    change = item.WhichOneof("change")
    if change == "new_log_start":
        start = item.new_log_start.log_start_offset
        if start == tail.log_start_offset:
            return tail, []  # moved already: a resent request
        if not tail.log_start_offset <= start <= tail.end_offset:
            raise KanalError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"new remote log start {start} is outside the remote log "
                f"[{tail.log_start_offset}, {tail.end_offset}]",
            )
        check_new_start(tail, start)
        record = metadata_pb2.RemoteLogStartRecord(
            topic_id=item.topic_id,
            partition_id=item.partition_id,
            log_start_offset=start,
            reason=item.new_log_start.reason,
        )
        return tail.after_start(start), [{"remote_log_start": record}]
    if change != "segments_uploaded" or not item.segments_uploaded.segments:
        raise KanalError(ErrorCode.INVALID_REQUEST, "an item needs uploaded segments or a new log start")
    bodies: list[dict[str, object]] = []
    for given in item.segments_uploaded.segments:
        if (given.topic_id, given.partition_id, given.leader_epoch, given.broker_id) != (
            item.topic_id, item.partition_id, item.leader_epoch, broker_id
        ):
            raise KanalError(
                ErrorCode.INVALID_REQUEST,
                f"segment [{given.base_offset}, {given.end_offset}) names partition {given.topic_id}/"
                f"{given.partition_id}, epoch {given.leader_epoch}, broker {given.broker_id}: not the item's",
            )
        segment = RemoteSegment.from_record(given)
        if segment.end_offset > tail.log_start_offset and is_recorded(log, segment):
            continue  # recorded by an earlier copy of this request, and still in the remote log
        check_segment(tail, segment)
        tail = tail.after_segment(segment)
        bodies.append({"remote_log_segment": given})
    return tail, bodies


def _reply_item(
    item: controller_pb2.AlterRemoteLogRequest.Item, error: ErrorCode, message: str, tail: RemoteTail
) -> controller_pb2.AlterRemoteLogResponse.Item:
    return _Item(
        topic_id=item.topic_id,
        partition_id=item.partition_id,
        error=error,
        error_message=message,
        log_start_offset=tail.log_start_offset,
        end_offset=tail.end_offset,
    )
