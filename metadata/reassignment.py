"""Partition reassignment decisions (Kafka's KIP-455, in KRaft's shape): start, progress, cancel, list.

A reassignment moves a partition from its replicas C to a target T in three steps, each one record
(PartitionReassignmentRecord, metadata.proto) so a controller failover at any point resumes from the log:

1. start (`decide_alter_partition_reassignments`): replicas = T then C - T, adding = T - C, removing =
   C - T. Leader and ISR are unchanged. The brokers of the adding replicas create them as followers of
   the leader (broker/replica_manager.py reconciles replicas with the image) and copy its log.
2. catch-up: each adding replica joins the ISR through the leader's ordinary AlterPartition (the
   ISR-expansion rules of alter_partition.py; nothing special here).
3. completion (`decide_reassignment_progress`, run by the active controller's loop): once every target
   replica is in the ISR, replicas = T, the ISR keeps only T, and a leader outside T hands over to the
   first target replica in the ISR (live, since a led partition's ISR is). The brokers of the removed
   replicas delete their logs when they apply the record. Acknowledged records are safe: the new leader
   is in the ISR, so it holds everything below the high-water mark.

A start whose target replicas are all in the ISR already (a reorder, a shrink) completes in the same
decision. Cancelling (`cancel`) goes back to C - the adding replicas (Kafka's rule: the order becomes T's
members of C, then the removing ones), the ISR keeping only those.

Per target, checked in this order; a refused target writes nothing:

1. the topic and partition exist                  else UNKNOWN_TOPIC_OR_PARTITION
2. cancel: a reassignment is in progress          else NO_REASSIGNMENT_IN_PROGRESS
3. replicas: at least one, distinct, each a registered broker
                                                  else INVALID_REPLICA_ASSIGNMENT (naming them)
4. no other reassignment is in progress           else REASSIGNMENT_IN_PROGRESS (the same target again
                                                  is a retry: success, nothing written)
5. the same partition appears once                else INVALID_REQUEST
"""

from __future__ import annotations

from collections.abc import Iterable

from kanal.metadata.decision import Decision, Stamp
from kanal.metadata.ids import NO_LEADER, BrokerId
from kanal.metadata.image import MetadataImage, PartitionState, TopicImage
from kanal.v1 import metadata_pb2, operations_pb2
from kanal.v1.error import ErrorCode, KanalError

_Result = operations_pb2.PartitionOperationResult


def decide_alter_partition_reassignments(
    image: MetadataImage,
    request: operations_pb2.AlterPartitionReassignmentsRequest,
    *,
    now_ms: int,
    principal: str,
    request_id: str,
) -> Decision[operations_pb2.AlterPartitionReassignmentsResponse]:
    """Start or cancel reassignments, target by target."""
    stamp = Stamp(now_ms, principal, request_id)
    records: list[metadata_pb2.MetadataRecord] = []
    results = []
    seen: set[tuple[str, int]] = set()
    for target in request.targets:
        key = (target.topic, target.partition)
        try:
            if key in seen:
                raise KanalError(ErrorCode.INVALID_REQUEST, "partition named more than once in this request")
            seen.add(key)
            topic, partition = _find(image, target.topic, target.partition)
            record: metadata_pb2.PartitionReassignmentRecord | None
            if target.cancel:
                record = _cancel(image, topic, partition)
            else:
                record = _start(image, topic, partition, tuple(target.replicas))
        except KanalError as exc:
            results.append(_Result(topic=target.topic, partition=target.partition, error=exc.code,
                                   error_message=exc.message))
            continue
        if record is not None:
            records.append(stamp.record(partition_reassignment=record))
        results.append(_Result(topic=target.topic, partition=target.partition, error=ErrorCode.NONE))
    return Decision(records, operations_pb2.AlterPartitionReassignmentsResponse(results=results))


def decide_reassignment_progress(
    image: MetadataImage, *, now_ms: int, principal: str = "controller", request_id: str
) -> Decision[list[tuple[str, int]]]:
    """Complete every reassignment whose target replicas are all in the ISR (run by the active
    controller's loop; a new active controller picks up where the old one was). The reply lists them."""
    stamp = Stamp(now_ms, principal, request_id)
    records = []
    done = []
    for topic, partition in image.iter_partitions():
        if not partition.reassigning:
            continue
        record = _completion(topic, partition)
        if record is not None:
            records.append(stamp.record(partition_reassignment=record))
            done.append((topic.name, int(partition.partition_id)))
    return Decision(records, done)


def list_partition_reassignments(
    image: MetadataImage, request: operations_pb2.ListPartitionReassignmentsRequest
) -> operations_pb2.ListPartitionReassignmentsResponse:
    """The named partitions' replica sets, or every partition being reassigned."""
    out = []
    if request.partitions:
        for ref in sorted(request.partitions, key=lambda r: (r.topic, r.partition)):
            topic = image.topics.get(ref.topic)
            if topic is None or not 0 <= ref.partition < len(topic.partitions):
                out.append(operations_pb2.PartitionReassignmentState(
                    topic=ref.topic, partition=ref.partition, error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            out.append(_state(topic, topic.partitions[ref.partition]))
    else:
        for name in sorted(image.topics):
            topic = image.topics[name]
            out.extend(_state(topic, p) for p in topic.partitions if p.reassigning)
    return operations_pb2.ListPartitionReassignmentsResponse(partitions=out)


def _state(topic: TopicImage, p: PartitionState) -> operations_pb2.PartitionReassignmentState:
    return operations_pb2.PartitionReassignmentState(
        topic=topic.name, partition=p.partition_id, replicas=p.replicas, adding_replicas=p.adding_replicas,
        removing_replicas=p.removing_replicas, isr=p.isr, leader=p.leader)


def _find(image: MetadataImage, name: str, partition_id: int) -> tuple[TopicImage, PartitionState]:
    topic = image.topics.get(name)
    if topic is None or not 0 <= partition_id < len(topic.partitions):
        raise KanalError(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"partition {name}-{partition_id} does not exist"
        )
    return topic, topic.partitions[partition_id]


def check_target(image: MetadataImage, where: str, replicas: tuple[int, ...]) -> None:
    """INVALID_REPLICA_ASSIGNMENT unless `replicas` are at least one distinct, registered broker."""
    if not replicas:
        raise KanalError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"{where}: no replicas given")
    duplicates = sorted({b for b in replicas if replicas.count(b) > 1})
    if duplicates:
        raise KanalError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         f"{where}: duplicate replica(s) {duplicates} in {list(replicas)}")
    unknown = [b for b in replicas if BrokerId(b) not in image.brokers]
    if unknown:
        raise KanalError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         f"{where}: unknown broker(s) {unknown} (registered: {sorted(image.brokers)})")


def _start(image: MetadataImage, topic: TopicImage, partition: PartitionState,
           target: tuple[int, ...]) -> metadata_pb2.PartitionReassignmentRecord | None:
    where = f"{topic.name}-{partition.partition_id}"
    check_target(image, where, target)
    wanted = tuple(BrokerId(b) for b in target)
    if partition.reassigning:
        if partition.target_replicas == wanted:
            return None  # a retry of the start that is in progress
        raise KanalError(
            ErrorCode.REASSIGNMENT_IN_PROGRESS,
            f"{where} is being reassigned to {list(partition.target_replicas)}; cancel that first",
        )
    if partition.replicas == wanted:
        return None
    current = partition.replicas
    started = PartitionState(
        partition.partition_id,
        wanted + tuple(b for b in current if b not in wanted),
        partition.isr,
        partition.leader,
        partition.leader_epoch,
        partition.partition_epoch,
        partition.isr_directory_ids,
        tuple(b for b in wanted if b not in current),
        tuple(b for b in current if b not in wanted),
        partition.recovering,
    )
    # A reorder or a shrink onto replicas already in sync completes at once.
    finished = _completion(topic, started, reason="reassignment started and complete")
    if finished is not None:
        return finished
    return _record(
        topic,
        started.partition_id,
        started.replicas,
        started.adding_replicas,
        started.removing_replicas,
        f"reassignment started: {list(current)} -> {list(wanted)}",
    )


def _completion(topic: TopicImage, p: PartitionState,
                reason: str = "reassignment complete") -> metadata_pb2.PartitionReassignmentRecord | None:
    """The completing record when every target replica is in the ISR of a led partition; else None."""
    target = p.target_replicas
    if p.leader == NO_LEADER or not set(target) <= set(p.isr):
        return None
    return _settle(topic, p, target, f"{reason}: replicas {list(target)}")


def _cancel(image: MetadataImage, topic: TopicImage,
            partition: PartitionState) -> metadata_pb2.PartitionReassignmentRecord:
    where = f"{topic.name}-{partition.partition_id}"
    if not partition.reassigning:
        raise KanalError(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, f"{where} has no reassignment in progress")
    original = tuple(b for b in partition.replicas if b not in partition.adding_replicas)
    if not set(original) & set(partition.isr):
        raise KanalError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         f"{where}: no replica of {list(original)} is in sync (isr {list(partition.isr)}); "
                         "cancelling would leave no replica holding every acknowledged record")
    return _settle(topic, partition, original, f"reassignment cancelled: back to {list(original)}")


def _settle(topic: TopicImage, p: PartitionState, replicas: tuple[BrokerId, ...],
            reason: str) -> metadata_pb2.PartitionReassignmentRecord:
    """`p` ends with exactly `replicas` (at least one of them in its ISR): the ISR keeps only them and a
    leader outside them hands over to the first of them in the ISR."""
    record = _record(topic, p.partition_id, replicas, (), (), reason)
    isr = tuple(b for b in p.isr if b in replicas)
    if isr != p.isr:
        record.isr.broker_ids.extend(isr)
        record.isr_directory_ids.extend(p.recorded_directory(b) for b in isr)
    if p.leader != NO_LEADER and p.leader not in replicas:
        record.leader = next(b for b in replicas if b in isr)
        record.reason += f"; leader {p.leader} -> {record.leader}"
    return record


def _record(topic: TopicImage, partition_id: int, replicas: Iterable[int], adding: Iterable[int],
            removing: Iterable[int], reason: str) -> metadata_pb2.PartitionReassignmentRecord:
    return metadata_pb2.PartitionReassignmentRecord(
        topic_id=topic.topic_id,
        partition_id=partition_id,
        replicas=list(replicas),
        adding_replicas=list(adding),
        removing_replicas=list(removing),
        reason=reason,
    )
