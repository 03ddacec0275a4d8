"""The broker's authorization of every Broker call: `RequestGate` (the call's principal and host against
the broker's current image, with the `--authorizer` settings) and `gated`, the one decorator service.py
puts on each handler.

With the authorizer off (the default) `gated` calls the handler and nothing else changes. With it on,
the handler gets only what the caller may do; refused items come back in the reply with their
authorization error, as Kafka answers them:

| call | needs | refused |
|---|---|---|
| Produce | WRITE on the topic | per topic: TOPIC_AUTHORIZATION_FAILED on each partition |
| Fetch (consumer) | READ on the topic | per topic, as Produce |
| Fetch with replica_id | the caller IS `User:broker-<replica_id>`, and CLUSTER_ACTION on the cluster | whole call: CLUSTER_AUTHORIZATION_FAILED (so no follower position, no ISR change) |
| ListOffsets | DESCRIBE on the topic | per topic, as Produce |
| Metadata | DESCRIBE on each topic shown | listing all topics leaves the others out; a named one is TOPIC_AUTHORIZATION_FAILED whether or not it exists |
| InitProducerId | IDEMPOTENT_WRITE on the cluster, or WRITE on some topic (Kafka ≥ 2.8); with a transactional id, WRITE on it | whole call: CLUSTER_ / TRANSACTIONAL_ID_AUTHORIZATION_FAILED |
| FindCoordinator | DESCRIBE on the group; with key_type TRANSACTION, DESCRIBE on the transactional id | GROUP_ / TRANSACTIONAL_ID_AUTHORIZATION_FAILED in the reply |
| AddPartitionsToTxn | WRITE on the transactional id, WRITE on each topic, and READ on each of `group_ids` | id: in the reply; a topic: TOPIC_AUTHORIZATION_FAILED on its partitions, the others INVALID_REQUEST (not attempted), nothing added; a group: left out of the call (the reply does not name it, and the producer's AddOffsetsToTxn for it is refused) |
| AddOffsetsToTxn | WRITE on the transactional id, and READ on the group | in the reply |
| TxnOffsetCommit | WRITE on the transactional id, READ on the group, READ on each topic | id, group: in the reply; topic: per partition |
| EndTxn | WRITE on the transactional id | in the reply |
| WriteTxnMarkers | CLUSTER_ACTION on the cluster (brokers only) | whole call: CLUSTER_AUTHORIZATION_FAILED |
| DescribeTransactions | DESCRIBE on each transactional id | the others are left out (named: TRANSACTIONAL_ID_AUTHORIZATION_FAILED) |
| JoinGroup, SyncGroup, Heartbeat, LeaveGroup | READ on the group | GROUP_AUTHORIZATION_FAILED in the reply |
| OffsetCommit | READ on the group, and READ on each topic | group: in the reply; topic: per partition |
| OffsetFetch | DESCRIBE on the group, and on each topic | group: in the reply; topic: per partition, or left out when all are asked for |
| DescribeGroups | DESCRIBE on the group | per group |
| ListGroups | DESCRIBE on the cluster, else the groups it may DESCRIBE | the others are left out |
| DeleteGroups | DELETE on the group | per group |
| admin calls (forwarded) | metadata/admin_authorization.py | checked here, and again by the controller with the forwarded principal |

Implicit creation of topics does not exist in kanal (Metadata never creates a topic), so no call needs
CREATE but CreateTopics; the broker creates `__consumer_offsets` itself, as itself.

The check runs after the starting-broker refusal (an empty image would deny everything) and reads the
image the metadata follower last published (`MetadataFollower.image`, swapped whole, read without locks).
"""  # noqa: E501 (a Markdown table keeps each row on one line)

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any, TypeVar

import grpc

from kanal.metadata import MetadataImage
from kanal.metadata.access import Access, Admission, admitted, keep_only, narrowed
from kanal.metadata.acl import CLUSTER, CLUSTER_RESOURCE_NAME, GROUP, TOPIC, TRANSACTIONAL_ID
from kanal.metadata.admin_authorization import ADMIN_CALLS, admit_admin
from kanal.metadata.authorizer import AuthorizerConfig, broker_principal, has_any_allow
from kanal.security.call_identity import peer_host
from kanal.security.principal import call_principal
from kanal.v1 import broker_pb2, metadata_pb2
from kanal.v1.error import ErrorCode, KanalError

Handler = TypeVar("Handler", bound=Callable[..., Any])
_OP = metadata_pb2
TOPIC_REFUSED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_REFUSED = ErrorCode.GROUP_AUTHORIZATION_FAILED
CLUSTER_REFUSED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


class RequestGate:
    """The authorizer settings and the image to check calls against."""

    def __init__(self, config: AuthorizerConfig, image: Callable[[], MetadataImage]) -> None:
        self.config = config
        self._image = image

    @property
    def enabled(self) -> bool:
        return self.config.enabled

    def access(self, context: grpc.ServicerContext | grpc.aio.ServicerContext) -> Access:
        """The calling principal (bound by the listener's authenticator; ANONYMOUS without one) and host."""
        return Access(str(call_principal()), peer_host(context.peer()), self._image().acls, self.config)

    def admit(self, method: str, request: Any, context: Any) -> Admission:
        access = self.access(context)
        rule = BROKER_RULES.get(method)
        if rule is not None:
            return rule(request, access)
        return admit_admin(method, request, access)

    def __repr__(self) -> str:
        return f"<RequestGate {self.config!r}>"


def gated(handler: Handler) -> Handler:
    """Check a BrokerService handler's call (sync or coroutine) with the server's RequestGate: the
    handler gets the admitted request, the caller the reply with refused items put back. Sits inside
    the error boundary, so a call refused whole leaves as a gRPC status."""
    method = handler.__name__
    if method not in BROKER_RULES and method not in ADMIN_CALLS:
        raise ValueError(f"no authorization rule for Broker call {method}")

    if asyncio.iscoroutinefunction(handler):
        @functools.wraps(handler)
        async def checked_async(self: Any, request: Any, context: Any) -> Any:
            gate: RequestGate = self._server.gate
            if not gate.enabled:
                return await handler(self, request, context)
            self._refuse_until_ready()
            admission = gate.admit(method, request, context)
            reply = None if admission.request is None else await handler(self, admission.request, context)
            return admission.reply(reply)

        return checked_async  # type: ignore[return-value]

    @functools.wraps(handler)
    def checked(self: Any, request: Any, context: Any) -> Any:
        gate: RequestGate = self._server.gate
        if not gate.enabled:
            return handler(self, request, context)
        self._refuse_until_ready()
        admission = gate.admit(method, request, context)
        reply = None if admission.request is None else handler(self, admission.request, context)
        return admission.reply(reply)

    return checked  # type: ignore[return-value]


# -- rules -----------------------------------------------------------------------------------------------


def _split(request: Any, field: str, ok: Callable[[Any], bool], response_type: type,
           put_refused: Callable[[Any, Any], None]) -> Admission:
    """The handler gets the items `ok` accepts; `put_refused(reply, item)` adds each other item's
    refusal to the reply (the handler's, or an empty one when nothing was left for it)."""
    items = list(getattr(request, field))
    verdicts = [ok(item) for item in items]
    if all(verdicts):
        return admitted(request)

    def finish(reply: Any) -> Any:
        out = reply if reply is not None else response_type()
        for item, good in zip(items, verdicts):
            if not good:
                put_refused(out, item)
        return out

    return Admission(narrowed(request, field, verdicts), finish)


def _in_band(response_type: type, code: int, message: str) -> Admission:
    """A call refused whole, answered in the reply's `error` field (group calls, as Kafka does)."""
    return Admission(None, lambda _reply: response_type(error=code, error_message=message))


def _group_call(op: int, response_type: type, group_of: Callable[[Any], str]):
    def rule(request: Any, access: Access) -> Admission:
        group = group_of(request)
        if access.allows(op, GROUP, group):
            return admitted(request)
        return _in_band(response_type, GROUP_REFUSED, access.refusal(op, GROUP, group))

    return rule


def _produce(request: broker_pb2.ProduceRequest, access: Access) -> Admission:
    op = _OP.ACL_OPERATION_WRITE

    def refused(reply: broker_pb2.ProduceResponse, topic: broker_pb2.ProduceRequest.TopicData) -> None:
        message = access.refusal(op, TOPIC, topic.topic)
        reply.topics.add(topic=topic.topic, partitions=[
            broker_pb2.ProduceResponse.PartitionResult(partition=p.partition, error=TOPIC_REFUSED,
                                                       error_message=message, base_offset=-1)
            for p in topic.partitions])

    return _split(request, "topics", lambda t: access.allows(op, TOPIC, t.topic), broker_pb2.ProduceResponse,
                  refused)


def _fetch(request: broker_pb2.FetchRequest, access: Access) -> Admission:
    if request.HasField("replica_id") and request.replica_id >= 0:
        # Replica fetches move follower positions, the high-water mark and the ISR: only the broker of
        # that id may send them, whatever ACLs say about anyone else.
        own = broker_principal(request.replica_id)
        if access.principal != own:
            raise KanalError(
                CLUSTER_REFUSED,
                f"{access.principal} from {access.host} may not fetch as replica "
                f"{request.replica_id}: only {own} may",
            )
        access.require(_OP.ACL_OPERATION_CLUSTER_ACTION, CLUSTER, CLUSTER_RESOURCE_NAME, CLUSTER_REFUSED)
        return admitted(request)
    op = _OP.ACL_OPERATION_READ

    def refused(reply: broker_pb2.FetchResponse, topic: broker_pb2.FetchRequest.TopicRequest) -> None:
        message = access.refusal(op, TOPIC, topic.topic)
        reply.topics.add(
            topic=topic.topic,
            partitions=[
                broker_pb2.FetchResponse.PartitionData(
                    partition=p.partition, error=TOPIC_REFUSED, error_message=message, high_watermark=-1
                )
                for p in topic.partitions
            ],
        )

    return _split(
        request, "topics", lambda t: access.allows(op, TOPIC, t.topic), broker_pb2.FetchResponse, refused
    )


def _list_offsets(request: broker_pb2.ListOffsetsRequest, access: Access) -> Admission:
    op = _OP.ACL_OPERATION_DESCRIBE

    def refused(
        reply: broker_pb2.ListOffsetsResponse, topic: broker_pb2.ListOffsetsRequest.TopicQuery
    ) -> None:
        reply.topics.add(
            topic=topic.topic,
            partitions=[
                broker_pb2.ListOffsetsResponse.PartitionOffset(
                    partition=p.partition, error=TOPIC_REFUSED, offset=-1
                )
                for p in topic.partitions
            ],
        )

    return _split(
        request,
        "topics",
        lambda t: access.allows(op, TOPIC, t.topic),
        broker_pb2.ListOffsetsResponse,
        refused,
    )


def _metadata(request: broker_pb2.MetadataRequest, access: Access) -> Admission:
    named = bool(request.topics)
    op = _OP.ACL_OPERATION_DESCRIBE

    def finish(reply: broker_pb2.MetadataResponse) -> broker_pb2.MetadataResponse:
        shown = []
        for topic in reply.topics:
            if access.allows(op, TOPIC, topic.name):
                shown.append(topic)
            elif named:
                # Whether it exists is not the caller's business either (Kafka answers the same).
                shown.append(broker_pb2.TopicMetadata(name=topic.name, error=TOPIC_REFUSED))
        del reply.topics[:]
        reply.topics.extend(shown)
        return reply

    return Admission(request, finish)


def _init_producer_id(request: broker_pb2.InitProducerIdRequest, access: Access) -> Admission:
    if request.transactional_id:
        access.require(_OP.ACL_OPERATION_WRITE, TRANSACTIONAL_ID, request.transactional_id,
                       ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        return admitted(request)
    config = access.config
    if access.allows(_OP.ACL_OPERATION_IDEMPOTENT_WRITE, CLUSTER, CLUSTER_RESOURCE_NAME) or has_any_allow(
        access.acls,
        access.principal,
        access.host,
        _OP.ACL_OPERATION_WRITE,
        TOPIC,
        super_users=config.super_users,
        allow_everyone_if_no_acl_found=config.allow_everyone_if_no_acl_found,
    ):
        return admitted(request)
    raise KanalError(
        CLUSTER_REFUSED,
        f"{access.principal} from {access.host} may neither IDEMPOTENT_WRITE the "
        f"cluster nor WRITE any topic: no producer id",
    )


def _offset_commit(request: broker_pb2.OffsetCommitRequest, access: Access) -> Admission:
    group_op, op = _OP.ACL_OPERATION_READ, _OP.ACL_OPERATION_READ
    if not access.allows(group_op, GROUP, request.group_id):
        return _in_band(broker_pb2.OffsetCommitResponse, GROUP_REFUSED,
                        access.refusal(group_op, GROUP, request.group_id))

    def refused(reply: broker_pb2.OffsetCommitResponse, topic: broker_pb2.OffsetCommitRequest.Topic) -> None:
        message = access.refusal(op, TOPIC, topic.topic)
        reply.topics.add(topic=topic.topic, partitions=[
            broker_pb2.PartitionError(partition=p.partition, error=TOPIC_REFUSED, error_message=message)
            for p in topic.partitions])

    return _split(
        request,
        "topics",
        lambda t: access.allows(op, TOPIC, t.topic),
        broker_pb2.OffsetCommitResponse,
        refused,
    )


def _offset_fetch(request: broker_pb2.OffsetFetchRequest, access: Access) -> Admission:
    op = _OP.ACL_OPERATION_DESCRIBE
    if not access.allows(op, GROUP, request.group_id):
        return _in_band(
            broker_pb2.OffsetFetchResponse, GROUP_REFUSED, access.refusal(op, GROUP, request.group_id)
        )
    if not request.topics:  # every committed offset of the group: show those of describable topics
        def only_describable(reply: broker_pb2.OffsetFetchResponse) -> broker_pb2.OffsetFetchResponse:
            keep_only(reply.offsets, lambda o: access.allows(op, TOPIC, o.topic))
            return reply

        return Admission(request, only_describable)

    def refused(reply: broker_pb2.OffsetFetchResponse, topic: broker_pb2.TopicPartitions) -> None:
        for partition in topic.partitions:
            reply.offsets.add(topic=topic.topic, partition=partition, offset=-1, error=TOPIC_REFUSED)

    return _split(
        request,
        "topics",
        lambda t: access.allows(op, TOPIC, t.topic),
        broker_pb2.OffsetFetchResponse,
        refused,
    )


def _describe_groups(request: broker_pb2.DescribeGroupsRequest, access: Access) -> Admission:
    op = _OP.ACL_OPERATION_DESCRIBE
    return _split(
        request,
        "group_ids",
        lambda g: access.allows(op, GROUP, g),
        broker_pb2.DescribeGroupsResponse,
        lambda reply, g: reply.groups.add(group_id=g, error=GROUP_REFUSED),
    )


def _delete_groups(request: broker_pb2.DeleteGroupsRequest, access: Access) -> Admission:
    op = _OP.ACL_OPERATION_DELETE
    return _split(
        request,
        "group_ids",
        lambda g: access.allows(op, GROUP, g),
        broker_pb2.DeleteGroupsResponse,
        lambda reply, g: reply.results.add(group_id=g, error=GROUP_REFUSED),
    )


def _list_groups(request: broker_pb2.ListGroupsRequest, access: Access) -> Admission:
    op = _OP.ACL_OPERATION_DESCRIBE
    if access.allows(op, CLUSTER, CLUSTER_RESOURCE_NAME):
        return admitted(request)

    def only_describable(reply: broker_pb2.ListGroupsResponse) -> broker_pb2.ListGroupsResponse:
        keep_only(reply.groups, lambda g: access.allows(op, GROUP, g.group_id))
        return reply

    return Admission(request, only_describable)


TXN_REFUSED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def _find_coordinator(request: broker_pb2.FindCoordinatorRequest, access: Access) -> Admission:
    if request.key_type == broker_pb2.COORDINATOR_TRANSACTION:
        op = _OP.ACL_OPERATION_DESCRIBE
        if access.allows(op, TRANSACTIONAL_ID, request.key):
            return admitted(request)
        return _in_band(broker_pb2.FindCoordinatorResponse, TXN_REFUSED,
                        access.refusal(op, TRANSACTIONAL_ID, request.key))
    return _group_call(_OP.ACL_OPERATION_DESCRIBE, broker_pb2.FindCoordinatorResponse, lambda r: r.key)(
        request, access
    )


def _txn_id_refusal(request: Any, access: Access, response_type: type) -> Admission | None:
    """In-band TRANSACTIONAL_ID_AUTHORIZATION_FAILED unless the caller may WRITE the call's transactional
    id."""
    op, tid = _OP.ACL_OPERATION_WRITE, request.producer.transactional_id
    if access.allows(op, TRANSACTIONAL_ID, tid):
        return None
    return _in_band(response_type, TXN_REFUSED, access.refusal(op, TRANSACTIONAL_ID, tid))


def _add_partitions_to_txn(request: broker_pb2.AddPartitionsToTxnRequest, access: Access) -> Admission:
    refused = _txn_id_refusal(request, access, broker_pb2.AddPartitionsToTxnResponse)
    if refused is not None:
        return refused
    refused_groups = [g for g in request.group_ids if not access.allows(_OP.ACL_OPERATION_READ, GROUP, g)]
    if refused_groups:  # left out, not refused: the group's AddOffsetsToTxn gets the refusal, in the reply
        allowed_groups = [g for g in request.group_ids if g not in refused_groups]
        request = broker_pb2.AddPartitionsToTxnRequest(producer=request.producer, topics=request.topics,
                                                       group_ids=allowed_groups)
    op = _OP.ACL_OPERATION_WRITE
    if all(access.allows(op, TOPIC, t.topic) for t in request.topics):
        return admitted(request)

    def answer(_reply: Any) -> broker_pb2.AddPartitionsToTxnResponse:
        reply = broker_pb2.AddPartitionsToTxnResponse()
        for t in request.topics:
            allowed = access.allows(op, TOPIC, t.topic)
            for p in t.partitions:
                reply.results.add(
                    topic=t.topic,
                    partition=p,
                    error=ErrorCode.INVALID_REQUEST if allowed else TOPIC_REFUSED,
                    error_message="not attempted" if allowed else access.refusal(op, TOPIC, t.topic),
                )
        return reply

    return Admission(None, answer)


def _add_offsets_to_txn(request: broker_pb2.AddOffsetsToTxnRequest, access: Access) -> Admission:
    refused = _txn_id_refusal(request, access, broker_pb2.AddOffsetsToTxnResponse)
    if refused is not None:
        return refused
    check = _group_call(_OP.ACL_OPERATION_READ, broker_pb2.AddOffsetsToTxnResponse, lambda r: r.group_id)
    return check(request, access)


def _txn_offset_commit(request: broker_pb2.TxnOffsetCommitRequest, access: Access) -> Admission:
    refused = _txn_id_refusal(request, access, broker_pb2.TxnOffsetCommitResponse)
    if refused is not None:
        return refused
    group_op, op = _OP.ACL_OPERATION_READ, _OP.ACL_OPERATION_READ
    if not access.allows(group_op, GROUP, request.group_id):
        return _in_band(broker_pb2.TxnOffsetCommitResponse, GROUP_REFUSED,
                        access.refusal(group_op, GROUP, request.group_id))

    def put_refused(
        reply: broker_pb2.TxnOffsetCommitResponse, topic: broker_pb2.OffsetCommitRequest.Topic
    ) -> None:
        for p in topic.partitions:
            reply.results.add(topic=topic.topic, partition=p.partition, error=TOPIC_REFUSED,
                              error_message=access.refusal(op, TOPIC, topic.topic))

    return _split(
        request,
        "topics",
        lambda t: access.allows(op, TOPIC, t.topic),
        broker_pb2.TxnOffsetCommitResponse,
        put_refused,
    )


def _end_txn(request: broker_pb2.EndTxnRequest, access: Access) -> Admission:
    return _txn_id_refusal(request, access, broker_pb2.EndTxnResponse) or admitted(request)


def _write_txn_markers(request: broker_pb2.WriteTxnMarkersRequest, access: Access) -> Admission:
    # Markers end other producers' transactions: only brokers (transaction coordinators) may write them.
    access.require(_OP.ACL_OPERATION_CLUSTER_ACTION, CLUSTER, CLUSTER_RESOURCE_NAME, CLUSTER_REFUSED)
    return admitted(request)


def _describe_transactions(request: broker_pb2.DescribeTransactionsRequest, access: Access) -> Admission:
    op = _OP.ACL_OPERATION_DESCRIBE
    if not request.transactional_ids:

        def only_describable(
            reply: broker_pb2.DescribeTransactionsResponse,
        ) -> broker_pb2.DescribeTransactionsResponse:
            keep_only(reply.transactions, lambda t: access.allows(op, TRANSACTIONAL_ID, t.transactional_id))
            return reply

        return Admission(request, only_describable)
    return _split(request, "transactional_ids", lambda t: access.allows(op, TRANSACTIONAL_ID, t),
                  broker_pb2.DescribeTransactionsResponse,
                  lambda reply, t: reply.transactions.add(transactional_id=t, error=TXN_REFUSED))


BROKER_RULES: dict[str, Callable[[Any, Access], Admission]] = {
    "Produce": _produce,
    "Fetch": _fetch,
    "ListOffsets": _list_offsets,
    "Metadata": _metadata,
    "InitProducerId": _init_producer_id,
    "FindCoordinator": _find_coordinator,
    "AddPartitionsToTxn": _add_partitions_to_txn,
    "AddOffsetsToTxn": _add_offsets_to_txn,
    "TxnOffsetCommit": _txn_offset_commit,
    "EndTxn": _end_txn,
    "WriteTxnMarkers": _write_txn_markers,
    "DescribeTransactions": _describe_transactions,
    "JoinGroup": _group_call(_OP.ACL_OPERATION_READ, broker_pb2.JoinGroupResponse, lambda r: r.group_id),
    "SyncGroup": _group_call(_OP.ACL_OPERATION_READ, broker_pb2.SyncGroupResponse, lambda r: r.group_id),
    "Heartbeat": _group_call(_OP.ACL_OPERATION_READ, broker_pb2.HeartbeatResponse, lambda r: r.group_id),
    "LeaveGroup": _group_call(_OP.ACL_OPERATION_READ, broker_pb2.LeaveGroupResponse, lambda r: r.group_id),
    "OffsetCommit": _offset_commit,
    "OffsetFetch": _offset_fetch,
    "DescribeGroups": _describe_groups,
    "ListGroups": _list_groups,
    "DeleteGroups": _delete_groups,
}
