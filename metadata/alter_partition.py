"""AlterPartition decisions: a partition leader proposes a new ISR (a follower fell behind or caught up).

Whole request: the broker must be registered with the epoch it sends (else STALE_BROKER_EPOCH). Each
item is then checked in this order, and a failed item writes nothing:

1. the partition exists                          else UNKNOWN_TOPIC_OR_PARTITION
2. its leader epoch equals the item's             else FENCED_LEADER_EPOCH (the leader was replaced)
3. the requesting broker is its leader            else NOT_LEADER_OR_FOLLOWER
4. its partition epoch equals the item's          else INVALID_UPDATE_VERSION (the leader must refresh)
5. the new ISR has no duplicates, only assigned, live (unfenced) replicas, and the leader
                                                  else INELIGIBLE_REPLICA (INVALID_REQUEST for duplicates)
6. KIP-903 broker epochs: `new_isr_broker_epochs` is empty or one per member; a member the proposal
   adds comes with its current registration epoch, and every epoch given (not -1) is the member's
   current one                                    else INELIGIBLE_REPLICA
   (the leader saw that member fetch at an epoch that is not its registration now: the progress it
   vouches for is an earlier incarnation's, whose log a restart may have shortened; Kafka answers
   INELIGIBLE_REPLICA too. Removing members needs no epoch: shrinking is always safe.)
7. the same partition appears once in a request   else INVALID_REQUEST

An ISR equal to the current one is a retry whose first attempt was applied: no record, success. Otherwise
one PartitionChangeRecord sets the ISR, with each member's directory id (members that stay keep the one
recorded; an added member's is its current registration's: its log is on that disk, see election.py):
CAUSE_ISR_EXPAND when it adds a replica, CAUSE_ISR_SHRINK when it only removes. Items of a reply carry the ISR
and epochs in force after the records are applied (for failed items: the current ones, so the leader can
refresh without a metadata fetch).
"""

from __future__ import annotations

from kanal.metadata.decision import Decision, Stamp
from kanal.metadata.ids import BrokerId
from kanal.metadata.image import MetadataImage, PartitionState
from kanal.v1 import controller_pb2, metadata_pb2
from kanal.v1.error import ErrorCode, KanalError

_Item = controller_pb2.AlterPartitionResponse.Item


def decide_alter_partition(
    image: MetadataImage,
    request: controller_pb2.AlterPartitionRequest,
    *,
    now_ms: int,
    principal: str,
    request_id: str,
) -> Decision[controller_pb2.AlterPartitionResponse]:
    """Apply leaders' ISR proposals, item by item."""
    stamp = Stamp(now_ms, principal, request_id)
    reg = image.brokers.get(BrokerId(request.broker_id))
    if reg is None or reg.broker_epoch != request.broker_epoch:
        return Decision([], controller_pb2.AlterPartitionResponse(error=ErrorCode.STALE_BROKER_EPOCH))
    records = []
    items = []
    seen: set[tuple[str, int]] = set()
    for item in request.items:
        partition = image.partition(item.topic_id, item.partition_id)
        try:
            if partition is None:
                raise KanalError(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"partition {item.topic_id}/{item.partition_id} is unknown",
                )
            if (item.topic_id, item.partition_id) in seen:
                raise KanalError(ErrorCode.INVALID_REQUEST, "partition named more than once in this request")
            seen.add((item.topic_id, item.partition_id))
            new_isr = _check_item(image, request.broker_id, partition, item)
        except KanalError as exc:
            items.append(_reply_item(item, exc.code, partition))
            continue
        if new_isr == partition.isr:
            items.append(_reply_item(item, ErrorCode.NONE, partition))
            continue
        added = [b for b in new_isr if b not in partition.isr]
        removed = [b for b in partition.isr if b not in new_isr]
        cause = metadata_pb2.CAUSE_ISR_EXPAND if added else metadata_pb2.CAUSE_ISR_SHRINK
        reason = f"leader {request.broker_id}: isr {list(partition.isr)} -> {list(new_isr)}"
        if added:
            reason += f" (caught up: {added})"
        if removed:
            reason += f" (lagging: {removed})"
        change = metadata_pb2.PartitionChangeRecord(
            topic_id=item.topic_id, partition_id=item.partition_id, cause=cause, reason=reason
        )
        change.isr.broker_ids.extend(new_isr)
        change.isr_directory_ids.extend(
            partition.recorded_directory(b) if b in partition.isr else image.brokers[b].directory_id
            for b in new_isr
        )
        records.append(stamp.record(partition_change=change))
        items.append(
            _Item(
                topic_id=item.topic_id,
                partition_id=item.partition_id,
                isr=new_isr,
                leader_epoch=partition.leader_epoch,
                partition_epoch=partition.partition_epoch + 1,
            )
        )
    return Decision(records, controller_pb2.AlterPartitionResponse(items=items))


def _check_item(
    image: MetadataImage,
    broker_id: int,
    partition: PartitionState,
    item: controller_pb2.AlterPartitionRequest.Item,
) -> tuple[BrokerId, ...]:
    if item.leader_epoch != partition.leader_epoch:
        raise KanalError(
            ErrorCode.FENCED_LEADER_EPOCH,
            f"leader epoch {item.leader_epoch} is not the current {partition.leader_epoch}",
        )
    if partition.leader != broker_id:
        raise KanalError(
            ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {broker_id} is not the leader ({partition.leader})"
        )
    if item.partition_epoch != partition.partition_epoch:
        raise KanalError(
            ErrorCode.INVALID_UPDATE_VERSION,
            f"partition epoch {item.partition_epoch} is not the current {partition.partition_epoch}",
        )
    new_isr = tuple(BrokerId(b) for b in item.new_isr)
    if len(set(new_isr)) != len(new_isr):
        raise KanalError(ErrorCode.INVALID_REQUEST, f"proposed ISR {list(new_isr)} has duplicates")
    if broker_id not in new_isr:
        raise KanalError(ErrorCode.INELIGIBLE_REPLICA, f"proposed ISR {list(new_isr)} leaves out the leader")
    for b in new_isr:
        if b not in partition.replicas:
            raise KanalError(ErrorCode.INELIGIBLE_REPLICA, f"broker {b} is not an assigned replica")
        if not image.is_live(b):
            raise KanalError(ErrorCode.INELIGIBLE_REPLICA, f"broker {b} is fenced or not registered")
    _check_broker_epochs(image, partition, new_isr, tuple(item.new_isr_broker_epochs))
    return new_isr


# An epoch the leader does not know (the leader itself, a member that has not fetched yet).
UNKNOWN_BROKER_EPOCH = -1


def _check_broker_epochs(
    image: MetadataImage, partition: PartitionState, new_isr: tuple[BrokerId, ...], epochs: tuple[int, ...]
) -> None:
    if epochs and len(epochs) != len(new_isr):
        raise KanalError(ErrorCode.INVALID_REQUEST,
                         f"{len(epochs)} broker epochs for a proposed ISR of {len(new_isr)}")
    for i, b in enumerate(new_isr):
        epoch = epochs[i] if epochs else UNKNOWN_BROKER_EPOCH
        current = image.brokers[b].broker_epoch
        if epoch == UNKNOWN_BROKER_EPOCH:
            if b not in partition.isr:
                raise KanalError(
                    ErrorCode.INELIGIBLE_REPLICA,
                    f"broker {b} is added without the broker epoch it fetched at (current {current})",
                )
            continue
        if epoch != current:
            raise KanalError(ErrorCode.INELIGIBLE_REPLICA,
                             f"broker {b} fetched at broker epoch {epoch}, but its registration is now at "
                             f"epoch {current} (a restarted broker's earlier progress does not count)")


def _reply_item(
    item: controller_pb2.AlterPartitionRequest.Item, error: ErrorCode, partition: PartitionState | None
) -> controller_pb2.AlterPartitionResponse.Item:
    reply = _Item(topic_id=item.topic_id, partition_id=item.partition_id, error=error)
    if partition is not None:
        reply.isr.extend(partition.isr)
        reply.leader_epoch = partition.leader_epoch
        reply.partition_epoch = partition.partition_epoch
    return reply
