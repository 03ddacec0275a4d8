"""GroupMembership: a consumer's side of the group protocol — finding the coordinator, JoinGroup and
SyncGroup (computing the assignment when this member leads), Heartbeat, LeaveGroup, OffsetCommit and
OffsetFetch. It holds the member id and generation; the Consumer decides when to rejoin and what to do
with the partitions (consumer.py).

Coordinator errors (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS) and calls that
fail with a retriable code (a broker that is down or does not answer in time) are retried here, finding
the coordinator again, until the call's deadline, then raised with the last code (clients/error_boundary.py
`retrying`); a call refused with a code that is not retriable (GROUP_AUTHORIZATION_FAILED...) is raised at
once. Membership errors (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS, FENCED_INSTANCE_ID)
go back to the caller as KanalError: they mean "rejoin" or, for a fenced static member, "stop".
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from kanal.clients.assignors import (
    assignor,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from kanal.clients.cluster_metadata import ClusterMetadata
from kanal.clients.error_boundary import call, retrying
from kanal.v1 import broker_pb2
from kanal.v1.error import ErrorCode, KanalError
from kanal.v1.topic_name import TopicPartition

log = logging.getLogger(__name__)
_COORDINATOR_ERRORS = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                       ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
_RETRY_BACKOFF_S = 0.1
# Errors after which the member must join again (with a fresh member id for the first two).
REJOIN_ERRORS = {ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION, ErrorCode.REBALANCE_IN_PROGRESS}


class GroupMembership:
    def __init__(self, metadata: ClusterMetadata, *, group_id: str, group_instance_id: str, client_id: str,
                 session_timeout_ms: int, rebalance_timeout_ms: int, assignors: Iterable[str],
                 request_timeout_ms: int) -> None:
        self._metadata = metadata
        self.group_id = group_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.assignors = [assignor(name) for name in assignors]
        self.request_timeout_s = request_timeout_ms / 1000
        self.member_id = ""
        self.generation = -1
        self.protocol = ""
        self._coordinator: str | None = None
        self.coordinator_id = -1
        self._lock = (
            threading.Lock()
        )  # one coordinator call at a time keeps member id and generation coherent

    @classmethod
    def for_admin(cls, metadata: ClusterMetadata, group_id: str, request_timeout_ms: int) -> GroupMembership:
        """A handle for calls about a group from outside it (describe, offsets, delete)."""
        return cls(
            metadata,
            group_id=group_id,
            group_instance_id="",
            client_id="kanal-admin",
            session_timeout_ms=1,
            rebalance_timeout_ms=1,
            assignors=(),
            request_timeout_ms=request_timeout_ms,
        )

    def __repr__(self) -> str:
        return (f"<GroupMembership {self.group_id} member={self.member_id or '-'} gen={self.generation} "
                f"protocol={self.protocol or '-'} coordinator={self._coordinator}>")

    @property
    def cooperative(self) -> bool:
        chosen = next((a for a in self.assignors if a.name == self.protocol), None)
        return chosen is not None and chosen.rebalance_protocol == "cooperative"

    # ---- calls to the coordinator ----

    def _find_coordinator(self) -> str:
        """The group's coordinator, looked up when not known; a KanalError when the lookup fails (a broker
        that cannot be reached is forgotten by find_coordinator, so the next try asks another)."""
        if self._coordinator is None:
            reply = self._metadata.find_coordinator(self.group_id, broker_pb2.COORDINATOR_GROUP,
                                                    self.request_timeout_s)
            if reply.error != ErrorCode.NONE:
                raise KanalError(reply.error, f"FindCoordinator for group {self.group_id!r}: "
                                              f"{reply.error_message or ErrorCode.Name(reply.error)}")
            self._coordinator = reply.endpoint
            self.coordinator_id = reply.node_id
        return self._coordinator

    def call(
        self, method: str, request, *, timeout_s: float | None = None, rpc_timeout_s: float | None = None
    ):
        """Call the coordinator, following it when it moves, until the deadline; the reply may carry a
        membership error for the caller to handle."""

        def attempt(_remaining_s: float):
            endpoint = self._find_coordinator()
            reply = call(getattr(self._metadata.stub(endpoint), method), request,
                         timeout_s=rpc_timeout_s or self.request_timeout_s, what=f"{method} at {endpoint}")
            error = _call_error(reply)
            if error in _COORDINATOR_ERRORS:
                raise KanalError(error, f"{method} at {endpoint}: {ErrorCode.Name(error)}")
            return reply

        def on_retry(error: KanalError) -> None:
            log.info("group %s: %s; trying again", self.group_id, error)
            if error.code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                self._coordinator = None  # moved, or its broker is down: look it up again

        return retrying(attempt, timeout_s=timeout_s if timeout_s is not None else self.request_timeout_s,
                        backoff_s=_RETRY_BACKOFF_S, on_retry=on_retry)

    # ---- joining ----

    def join(self, topics: list[str], owned: list[TopicPartition],
             partition_counts: Callable[[list[str]], dict[str, int]]) -> list[TopicPartition]:
        """Join (or rejoin) and sync; returns this member's assignment. Raises KanalError with a
        REJOIN_ERRORS code when the group moved on meanwhile (call again), FENCED_INSTANCE_ID when
        another instance took this static membership."""
        with self._lock:
            # Only cooperative assignors need what the member owns and since when; eager subscriptions stay
            # identical across restarts, so a restarted static member rejoins without a rebalance.
            protocols = [broker_pb2.GroupProtocol(name=a.name, metadata=encode_subscription(
                topics, owned, generation=self.generation) if a.rebalance_protocol == "cooperative"
                else encode_subscription(topics)) for a in self.assignors]
            wait_s = self.rebalance_timeout_ms / 1000 + self.request_timeout_s
            while True:
                request = broker_pb2.JoinGroupRequest(
                    group_id=self.group_id, session_timeout_ms=self.session_timeout_ms,
                    rebalance_timeout_ms=self.rebalance_timeout_ms, member_id=self.member_id,
                    group_instance_id=self.group_instance_id, protocol_type="consumer", protocols=protocols,
                    client_id=self.client_id)
                reply = self.call("JoinGroup", request, timeout_s=wait_s, rpc_timeout_s=wait_s)
                if reply.error == ErrorCode.MEMBER_ID_REQUIRED:
                    self.member_id = reply.member_id
                    continue
                if reply.error == ErrorCode.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                    self.generation = -1
                    continue
                if reply.error == ErrorCode.REBALANCE_IN_PROGRESS:
                    continue
                if reply.error:
                    raise KanalError(reply.error, reply.error_message)
                break
            self.member_id = reply.member_id
            self.generation = reply.generation_id
            self.protocol = reply.protocol_name
            assignments = []
            if reply.leader == self.member_id and not reply.skip_assignment:
                assignments = self._assign(reply, partition_counts)
            sync = self.call("SyncGroup", broker_pb2.SyncGroupRequest(
                group_id=self.group_id, generation_id=self.generation, member_id=self.member_id,
                group_instance_id=self.group_instance_id, assignments=assignments, protocol_type="consumer",
                protocol_name=self.protocol), timeout_s=wait_s, rpc_timeout_s=wait_s)
            if sync.error:
                if sync.error in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
                    self._forget(sync.error)
                raise KanalError(sync.error, sync.error_message)
            return decode_assignment(sync.assignment)

    def _assign(
        self, reply: broker_pb2.JoinGroupResponse, partition_counts
    ) -> list[broker_pb2.SyncGroupAssignment]:
        chosen = assignor(reply.protocol_name)
        members = [decode_subscription(m.member_id, m.group_instance_id, m.metadata) for m in reply.members]
        topics = sorted({t for m in members for t in m.topics})
        plan = chosen.assign(partition_counts(topics), members)
        log.info("group %s generation %d: %s assigned %d members", self.group_id, reply.generation_id,
                 chosen.name, len(members))
        return [broker_pb2.SyncGroupAssignment(member_id=m, assignment=encode_assignment(parts))
                for m, parts in plan.items()]

    def _forget(self, code: int) -> None:
        if code == ErrorCode.UNKNOWN_MEMBER_ID:
            self.member_id = ""
        self.generation = -1

    # ---- while a member ----

    def heartbeat(self) -> int:
        """One heartbeat; returns its error code (NONE, or a reason to rejoin)."""
        if self.generation < 0:
            return ErrorCode.NONE
        reply = self.call("Heartbeat", broker_pb2.HeartbeatRequest(
            group_id=self.group_id, generation_id=self.generation, member_id=self.member_id,
            group_instance_id=self.group_instance_id))
        if reply.error in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
            self._forget(reply.error)
        return reply.error

    def leave(self) -> None:
        """Leave the group (dynamic members; a static member's session simply runs out, so a quick
        restart keeps its partitions)."""
        if self.group_instance_id or not self.member_id:
            return
        try:
            self.call("LeaveGroup", broker_pb2.LeaveGroupRequest(group_id=self.group_id, members=[
                broker_pb2.LeaveGroupRequest.Member(member_id=self.member_id)]))
        except KanalError as exc:
            log.info("leaving group %s: %s", self.group_id, exc)
        self.member_id = ""
        self.generation = -1

    def commit(self, offsets: dict[TopicPartition, int], *, as_member: bool = True) -> None:
        """Store `offsets` (the next offset to consume per partition). Raises KanalError: a REJOIN_ERRORS
        code when this member's generation is over (the commit was refused), or the first per-partition
        error."""
        if not offsets:
            return
        request = broker_pb2.OffsetCommitRequest(group_id=self.group_id, generation_id=-1)
        if as_member:
            request.generation_id = self.generation
            request.member_id = self.member_id
            request.group_instance_id = self.group_instance_id
        by_topic: dict[str, broker_pb2.OffsetCommitRequest.Topic] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            if topic not in by_topic:
                by_topic[topic] = request.topics.add(topic=topic)
            by_topic[topic].partitions.add(partition=partition, offset=offset, leader_epoch=-1)
        reply = self.call("OffsetCommit", request)
        if reply.error:
            if reply.error in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
                self._forget(reply.error)
            raise KanalError(reply.error, reply.error_message)
        for t in reply.topics:
            for p in t.partitions:
                if p.error:
                    raise KanalError(p.error, p.error_message or f"commit of {t.topic}-{p.partition} failed")

    def committed(self, partitions: Iterable[TopicPartition] | None = None) -> dict[TopicPartition, int]:
        """Committed offsets (-1 where none) of `partitions`, or of every partition the group committed.
        Stable ones only (require_stable): while a transaction that committed offsets of the group waits
        for its markers, its partitions are UNSTABLE_OFFSET_COMMIT and asked again after a backoff, until
        the request timeout; the committed offset a consumer starts from then includes every transaction
        its producer already committed (or aborted)."""
        request = broker_pb2.OffsetFetchRequest(group_id=self.group_id, require_stable=True)
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions or ():
            by_topic.setdefault(topic, []).append(partition)
        for topic, parts in sorted(by_topic.items()):
            request.topics.add(topic=topic, partitions=sorted(parts))

        def attempt(_remaining_s: float) -> dict[TopicPartition, int]:
            reply = self.call("OffsetFetch", request)
            if reply.error:
                raise KanalError(reply.error, reply.error_message)
            unstable = [o for o in reply.offsets if o.error == ErrorCode.UNSTABLE_OFFSET_COMMIT]
            failed = [
                o for o in reply.offsets if o.error not in (ErrorCode.NONE, ErrorCode.UNSTABLE_OFFSET_COMMIT)
            ]
            if failed:
                raise KanalError(
                    failed[0].error, f"OffsetFetch of {failed[0].topic}-{failed[0].partition} failed"
                )
            if unstable:  # retriable: asked again after the backoff, until the request timeout
                raise KanalError(
                    ErrorCode.UNSTABLE_OFFSET_COMMIT,
                    f"{unstable[0].topic}-{unstable[0].partition}: a transaction's offsets are still "
                    f"being completed after {self.request_timeout_s:.0f} s",
                )
            return {(o.topic, o.partition): o.offset for o in reply.offsets}

        return retrying(attempt, timeout_s=self.request_timeout_s, backoff_s=_RETRY_BACKOFF_S)


def _call_error(reply) -> int:
    """The error that decides whether to retry elsewhere: the reply's own, or for the per-group admin calls
    (always about one group here) that group's."""
    if isinstance(reply, broker_pb2.DescribeGroupsResponse):
        return reply.groups[0].error if reply.groups else ErrorCode.NONE
    if isinstance(reply, broker_pb2.DeleteGroupsResponse):
        return reply.results[0].error if reply.results else ErrorCode.NONE
    return reply.error
