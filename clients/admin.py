"""Admin: topics, partitions, configs, quotas, ACLs and the cluster, through any broker (which forwards writes
to the active controller). Per-item failures raise KanalError naming the item; `results` calls return them.

    admin = Admin("127.0.0.1:9092")
    admin.create_topic("orders", partitions=6, replication_factor=3, configs={"retention.ms": "86400000"})
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Self, TypeVar

from kanal.clients.cluster_metadata import ClusterMetadata, PartitionInfo
from kanal.clients.error_boundary import call, retrying
from kanal.clients.group_membership import GroupMembership
from kanal.security.channel_security import ClientSecurity
from kanal.security.scram import ITERATIONS_DEFAULT, MECHANISMS, check_mechanism, new_salt, salted_password
from kanal.v1 import admin_pb2, broker_pb2, metadata_pb2, operations_pb2, transactions_pb2
from kanal.v1.error import ErrorCode, KanalError
from kanal.v1.topic_name import check_topic_name
from kanal.v1.wire_enum import as_enum

TOPIC = metadata_pb2.CONFIG_RESOURCE_TOPIC
# Pause before calling again after a retriable failure (a starting or unreachable broker); the least time
# one attempt is given.
_RETRY_BACKOFF_S = 0.05
_ATTEMPT_TIMEOUT_S_MIN = 0.1
BROKER = metadata_pb2.CONFIG_RESOURCE_BROKER
# ListOffsets' timestamp for the local log's start (broker.proto; Kafka's EARLIEST_LOCAL_TIMESTAMP).
EARLIEST_LOCAL_TIMESTAMP = -4
R = TypeVar("R")


@dataclass(frozen=True)
class TopicDescription:
    name: str
    topic_id: str
    internal: bool
    partitions: list[PartitionInfo]
    configs: dict[str, str]


@dataclass(frozen=True)
class GroupInfo:
    group_id: str
    state: str
    protocol: str
    generation: int
    coordinator: int  # broker id
    members: list[broker_pb2.GroupMemberDescription]
    offsets: list[
        broker_pb2.PartitionLag
    ]  # committed offset, log end (high-water mark) and lag per partition


class Admin:
    def __init__(self, bootstrap: str, *, request_timeout_ms: int = 30_000,
                 security: ClientSecurity | None = None) -> None:
        """`security`: TLS files and credentials (kanal.security.channel_security.ClientSecurity); None:
        plaintext."""
        self._metadata = ClusterMetadata(bootstrap, request_timeout_ms=request_timeout_ms, security=security)
        self._timeout_s = request_timeout_ms / 1000

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._metadata.close()

    def _retrying(self, attempt: Callable[[float], R],
                  on_retry: Callable[[KanalError], Any] | None = None) -> R:
        """`attempt(remaining_s)` under the admin's request timeout (clients/error_boundary.py): a refusal
        whose code is not retriable (an authorization, an invalid request, TOPIC_ALREADY_EXISTS) is raised
        at once; a retriable one is tried again until the timeout, then raised with its code."""
        return retrying(attempt, timeout_s=self._timeout_s, backoff_s=_RETRY_BACKOFF_S, on_retry=on_retry)

    def _call(self, method: str, request, endpoint: str | None = None):
        """Call any broker, or the one at `endpoint` (a call about what that broker holds). The call goes
        again, to a broker that answers Metadata (or to the same one), until the request timeout, when it
        failed with a retriable code: the broker answered BROKER_NOT_AVAILABLE as a whole (it is starting
        and did nothing with the call, broker.proto), it could not be reached at all (dead, restarting, cut
        off; Kafka's admin client moves on the same way), or the controller it forwards to is changing
        (NOT_CONTROLLER, CONTROLLER_NOT_AVAILABLE). A call that reached a broker whose connection then
        broke may have been done: a retried create then answers TOPIC_ALREADY_EXISTS, as Kafka's does."""
        def attempt(remaining_s: float):
            stub = self._metadata.any_stub() if endpoint is None else self._metadata.stub(endpoint)
            return call(getattr(stub, method), request, timeout_s=max(_ATTEMPT_TIMEOUT_S_MIN, remaining_s),
                        what=method if endpoint is None else f"{method} at broker {endpoint}")

        if endpoint is not None:
            return self._retrying(attempt)
        # A starting broker refuses Metadata too: the refresh chooses another one.
        return self._retrying(attempt, on_retry=lambda _error: self._metadata.refresh())

    def _call_single_write(self, method: str, request: Any) -> Any:
        """`_call` for a write of one item (one topic, one resource): its result, or None when the call
        was refused as DUPLICATE_REQUEST. The broker keeps one request id across its attempts at the
        controllers, and a controller refuses an id the metadata log holds (metadata/request_ids.py): the
        broker's earlier attempt, unanswered in time, was carried out. An id enters the log only with the
        records its decision wrote, so for one item that means the item was done: a success, not an
        error for the caller (a retry from here, with a new id, answers as Kafka's does instead:
        TOPIC_ALREADY_EXISTS for a create)."""
        try:
            return self._call(method, request).results[0]
        except KanalError as exc:
            if exc.code != ErrorCode.DUPLICATE_REQUEST:
                raise
            return None

    # ---- topics ----

    def create_topic(self, name: str, partitions: int, replication_factor: int,
                     configs: dict[str, str] | None = None, *, wait_s: float = 30.0) -> str:
        """Create a topic; returns its id once every partition has a leader (or raises)."""
        check_topic_name(name)
        request = admin_pb2.CreateTopicsRequest(topics=[admin_pb2.CreatableTopic(
            name=name, partitions=partitions, replication_factor=replication_factor,
            configs=[admin_pb2.ConfigEntry(key=k, value=v) for k, v in (configs or {}).items()])])
        result = self._call_single_write("CreateTopics", request)
        if result is not None:
            _raise_for(result.error, f"topic {name}: {result.error_message}")
        self._wait(lambda: (parts := self._metadata.refresh([name]).topics.get(name)) is not None
                   and all(p.leader >= 0 for p in parts), wait_s, f"leaders for {name}")
        if result is not None:
            return str(result.topic_id)
        return str(self._call("Metadata", broker_pb2.MetadataRequest(topics=[name])).topics[0].topic_id)

    def delete_topic(self, name: str) -> None:
        check_topic_name(name)
        result = self._call_single_write("DeleteTopics", admin_pb2.DeleteTopicsRequest(names=[name]))
        if result is not None:
            _raise_for(result.error, f"topic {name}: {result.error_message}")

    def create_partitions(self, name: str, total: int) -> None:
        check_topic_name(name)
        request = admin_pb2.CreatePartitionsRequest(
            targets=[admin_pb2.CreatePartitionsRequest.Target(name=name, count=total)]
        )
        result = self._call_single_write("CreatePartitions", request)
        if result is not None:
            _raise_for(result.error, f"topic {name}: {result.error_message}")

    def list_topics(self, include_internal: bool = False) -> list[str]:
        reply = self._call("Metadata", broker_pb2.MetadataRequest())
        return sorted(t.name for t in reply.topics if include_internal or not t.is_internal)

    def describe_topic(self, name: str) -> TopicDescription:
        check_topic_name(name)  # INVALID_TOPIC here rather than a protobuf TypeError for a non-str name
        reply = self._call("Metadata", broker_pb2.MetadataRequest(topics=[name]))
        topic = reply.topics[0]
        _raise_for(topic.error, f"topic {name}")
        partitions = [
            PartitionInfo(
                name, p.partition, p.leader, p.leader_epoch, tuple(p.replicas), tuple(p.isr), p.offline_reason
            )
            for p in sorted(topic.partitions, key=lambda p: p.partition)
        ]
        configs = {e.key: e.value for e in self.describe_configs(TOPIC, name) if not e.is_default}
        return TopicDescription(name, topic.topic_id, topic.is_internal, partitions, configs)

    # ---- configs ----

    def describe_configs(self, resource_type: int, name: str) -> list[admin_pb2.ConfigEntry]:
        request = admin_pb2.DescribeConfigsRequest(
            resources=[
                admin_pb2.ConfigResource(
                    type=as_enum(metadata_pb2.ConfigResourceType, resource_type), name=name
                )
            ]
        )
        result = self._call("DescribeConfigs", request).results[0]
        _raise_for(result.error, f"configs of {name}: {result.error_message}")
        return list(result.entries)

    def alter_configs(self, resource_type: int, name: str, set_: dict[str, str] | None = None,
                      delete: list[str] | None = None) -> None:
        ops = [
            admin_pb2.AlterConfigOp(key=k, op=admin_pb2.AlterConfigOp.SET, value=v)
            for k, v in (set_ or {}).items()
        ]
        ops += [admin_pb2.AlterConfigOp(key=k, op=admin_pb2.AlterConfigOp.DELETE) for k in (delete or [])]
        request = admin_pb2.AlterConfigsRequest(
            changes=[
                admin_pb2.AlterConfigsRequest.Change(
                    resource=admin_pb2.ConfigResource(
                        type=as_enum(metadata_pb2.ConfigResourceType, resource_type), name=name
                    ),
                    ops=ops,
                )
            ]
        )
        result = self._call_single_write("AlterConfigs", request)
        if result is not None:
            _raise_for(result.error, f"configs of {name}: {result.error_message}")

    # ---- quotas ----

    def alter_client_quota(self, entity_type: str, entity_name: str, values: dict[str, float | None], *,
                           client_id: str | None = None) -> None:
        """Set quotas (a value) or remove them (None) for one entity ("user" or "client-id"; "" is the
        default entity). `client_id` with a user: Kafka's user+client-id entity. A value that is not a
        number is INVALID_QUOTA here, before anything is sent; the controller checks the rest (unknown
        keys, values <= 0, illegal names) and changes nothing for a refused entity."""
        for key, value in values.items():
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise KanalError(ErrorCode.INVALID_QUOTA, f"quota {key} must be a number, got {value!r}")
        entity = admin_pb2.QuotaEntity(entity_type=entity_type, entity_name=entity_name)
        if client_id is not None:
            entity.client_id = client_id
        entry = admin_pb2.AlterClientQuotasRequest.Entry(
            entity=entity,
            values=[admin_pb2.QuotaValue(key=k, value=v or 0.0, remove=v is None) for k, v in values.items()])
        result = self._call("AlterClientQuotas", admin_pb2.AlterClientQuotasRequest(entries=[entry])).results[
            0
        ]
        what = f"{entity_type} {entity_name!r}" + (
            f" client-id {client_id!r}" if client_id is not None else ""
        )
        _raise_for(result.error, f"quota of {what}: {result.error_message}")

    def describe_client_quotas(
        self, entity_type: str = "", entity_name: str = ""
    ) -> dict[tuple[str, ...], dict[str, float]]:
        """Entity -> its quotas. The key is (entity_type, entity_name), or ("user", name, client_id) for a
        user+client-id entity."""
        reply = self._call("DescribeClientQuotas", admin_pb2.DescribeClientQuotasRequest(
            entity_type=entity_type, entity_name=entity_name))
        out: dict[tuple[str, ...], dict[str, float]] = {}
        for e in reply.entries:
            key: tuple[str, ...] = (e.entity.entity_type, e.entity.entity_name)
            if e.entity.HasField("client_id"):
                key += (e.entity.client_id,)
            out[key] = {v.key: v.value for v in e.values}
        return out

    # ---- ACLs ----

    def create_acls(self, entries: list[metadata_pb2.AccessControlEntry]) -> None:
        """Add access-control entries (present ones stay as they are); KanalError naming the first one
        refused (the others are added)."""
        reply = self._call("CreateAcls", admin_pb2.CreateAclsRequest(creations=entries))
        for entry, result in zip(entries, reply.results):
            _raise_for(result.error, f"ACL {acl_text(entry)}: {result.error_message}")

    def describe_acls(
        self, acl_filter: admin_pb2.AclFilter | None = None
    ) -> list[metadata_pb2.AccessControlEntry]:
        """The entries the filter selects (all without one), sorted."""
        reply = self._call(
            "DescribeAcls", admin_pb2.DescribeAclsRequest(filter=acl_filter or admin_pb2.AclFilter())
        )
        _raise_for(reply.error, f"describing ACLs: {reply.error_message}")
        return list(reply.acls)

    def delete_acls(self, filters: list[admin_pb2.AclFilter]) -> list[metadata_pb2.AccessControlEntry]:
        """Remove the entries any filter selects; returns them."""
        reply = self._call("DeleteAcls", admin_pb2.DeleteAclsRequest(filters=filters))
        deleted = []
        for result in reply.results:
            _raise_for(result.error, f"deleting ACLs: {result.error_message}")
            deleted.extend(result.deleted)
        return deleted

    # ---- users (SCRAM credentials) ----

    def alter_user_scram_credentials(self, upsertions: Sequence[admin_pb2.ScramCredentialUpsertion] = (),
                                     deletions: Sequence[admin_pb2.ScramCredentialDeletion] = ()) -> None:
        """Kafka's alterUserScramCredentials; the first user's error raises (each user's changes succeed or
        fail together)."""
        reply = self._call("AlterUserScramCredentials", admin_pb2.AlterUserScramCredentialsRequest(
            upsertions=list(upsertions), deletions=list(deletions)))
        for result in reply.results:
            if result.error:
                raise KanalError(result.error, f"user {result.user!r}: {result.error_message}")

    def create_user(self, name: str, password: str, *, mechanisms: list[str] | None = None,
                    iterations: int = ITERATIONS_DEFAULT) -> None:
        """Create the user or replace its password, for each mechanism (default both). The password is
        salted and iterated here: only the salted password is sent (over TLS when this Admin uses it), and
        the cluster keeps only the keys made from it (kanal.security.scram)."""
        upsertions = []
        for mechanism in mechanisms or sorted(MECHANISMS):
            salt = new_salt()
            salted = salted_password(check_mechanism(mechanism), password, salt, iterations)
            upsertions.append(admin_pb2.ScramCredentialUpsertion(
                name=name, mechanism=mechanism, iterations=iterations, salt=salt, salted_password=salted))
        self.alter_user_scram_credentials(upsertions=upsertions)

    def delete_user(self, name: str, *, mechanisms: list[str] | None = None) -> list[str]:
        """Remove the user's credentials (only `mechanisms` when given); the mechanisms removed."""
        if not mechanisms:
            mechanisms = [m for m, _ in self.describe_users([name]).get(name, [])]
        self.alter_user_scram_credentials(deletions=[admin_pb2.ScramCredentialDeletion(name=name, mechanism=m)
                                                     for m in mechanisms])
        return list(mechanisms)

    def describe_users(self, names: list[str] | None = None) -> dict[str, list[tuple[str, int]]]:
        """User -> [(mechanism, iterations)]; every user when `names` is empty. A named user without
        credentials raises."""
        reply = self._call("DescribeUserScramCredentials",
                           admin_pb2.DescribeUserScramCredentialsRequest(users=list(names or ())))
        out = {}
        for result in reply.results:
            if result.error:
                raise KanalError(result.error, result.error_message)
            out[result.user] = [(c.mechanism, c.iterations) for c in result.credentials]
        return out

    # ---- consumer groups ----

    def list_groups(self) -> dict[str, str]:
        """Every group of the cluster -> its state (each broker lists the groups it coordinates)."""
        groups: dict[str, str] = {}
        for endpoint in sorted(self._metadata.refresh().brokers.values()):
            reply = self._call("ListGroups", broker_pb2.ListGroupsRequest(), endpoint)
            groups.update({g.group_id: g.state for g in reply.groups})
        return dict(sorted(groups.items()))

    def describe_transactions(self, transactional_ids: list[str] | None = None) -> list[dict]:
        """Transactional ids and their coordinator state (each broker answers for the ids it coordinates):
        id, producer id and epoch, state, timeout, partitions of the open transaction, start time."""
        found: dict[str, dict] = {}
        for endpoint in sorted(self._metadata.refresh().brokers.values()):
            reply = self._call("DescribeTransactions", broker_pb2.DescribeTransactionsRequest(
                transactional_ids=transactional_ids or []), endpoint)
            for t in reply.transactions:
                if t.error != ErrorCode.NONE:
                    continue  # another broker coordinates it, or the id is unknown
                s = t.state
                found[t.transactional_id] = {
                    "transactional_id": t.transactional_id,
                    "producer_id": s.producer_id,
                    "producer_epoch": s.producer_epoch,
                    "state": transactions_pb2.TransactionState.Name(s.state),
                    "timeout_ms": s.timeout_ms,
                    "start_ms": s.start_ms,
                    "last_update_ms": s.last_update_ms,
                    "partitions": [[p.topic, p.partition] for p in s.partitions],
                }
        missing = [t for t in transactional_ids or [] if t not in found]
        if missing:
            raise KanalError(ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                             f"unknown transactional id(s): {', '.join(missing)}")
        return [found[t] for t in sorted(found)]

    def _group(self, group_id: str) -> GroupMembership:
        return GroupMembership.for_admin(self._metadata, group_id, int(self._timeout_s * 1000))

    def describe_group(self, group_id: str) -> GroupInfo:
        """Members, assignments, committed offsets, log end offsets and lag (computed by the coordinator)."""
        handle = self._group(group_id)
        reply = handle.call("DescribeGroups", broker_pb2.DescribeGroupsRequest(group_ids=[group_id])).groups[
            0
        ]
        _raise_for(reply.error, f"group {group_id!r}")
        return GroupInfo(
            group_id,
            reply.state,
            reply.protocol_name,
            reply.generation_id,
            handle.coordinator_id,
            list(reply.members),
            sorted(reply.offsets, key=lambda o: (o.topic, o.partition)),
        )

    def delete_group(self, group_id: str) -> None:
        """Delete an empty group and its committed offsets (NON_EMPTY_GROUP while it has members)."""
        reply = self._group(group_id).call(
            "DeleteGroups", broker_pb2.DeleteGroupsRequest(group_ids=[group_id])
        )
        _raise_for(reply.results[0].error, f"deleting group {group_id!r}")

    def group_offsets(self, group_id: str) -> dict[tuple[str, int], int]:
        return self._group(group_id).committed()

    def alter_group_offsets(self, group_id: str, offsets: dict[tuple[str, int], int]) -> None:
        """Commit `offsets` (the next offset to consume per partition) for a group, not as a member
        (Kafka's alterConsumerGroupOffsets): for a group with no active members, whose consumers start
        there when they join."""
        self._group(group_id).commit(offsets, as_member=False)

    def reset_group_offsets(self, group_id: str, topic: str, *, to: str, value: int = 0,
                            execute: bool = False) -> dict[tuple[str, int], int]:
        """New committed offsets for every partition of `topic`: to="earliest" | "latest" | "offset" (value)
        | "shift" (committed + value, clamped to the log) | "datetime" (value: ms since the epoch). Only
        with execute=True are they committed — the group must have no members then, as in Kafka."""
        if to not in ("earliest", "latest", "offset", "shift", "datetime"):
            raise KanalError(ErrorCode.INVALID_REQUEST, f"unknown reset target {to!r}")
        partitions = [p.partition for p in self._metadata.partitions(topic)]
        earliest = self._list_offsets(topic, partitions, -2)
        latest = self._list_offsets(topic, partitions, -1)
        current = self.group_offsets(group_id) if to == "shift" else {}
        plan = {}
        for p in partitions:
            if to == "earliest":
                target = earliest[p]
            elif to == "latest":
                target = latest[p]
            elif to == "offset":
                target = value
            elif to == "datetime":
                found = self._list_offsets(topic, [p], value)[p]
                target = found if found >= 0 else latest[p]
            else:
                base = current.get((topic, p), -1)
                target = (base if base >= 0 else earliest[p]) + value
            plan[(topic, p)] = min(max(target, earliest[p]), latest[p])
        if execute:
            self.alter_group_offsets(group_id, plan)
        return plan

    def log_bounds(self, topic: str, partitions: list[int]) -> dict[int, tuple[int, int]]:
        """(log start offset, log end offset) of each partition, from its leader."""
        earliest = self._list_offsets(topic, partitions, -2)
        latest = self._list_offsets(topic, partitions, -1)
        return {p: (earliest[p], latest[p]) for p in partitions}

    def tiered_log_starts(self, topic: str, partitions: list[int]) -> dict[int, tuple[int, int]]:
        """(log start offset, local log start offset) of each partition, from its leader (ListOffsets -2 and
        -4): on a tiered partition (remote.storage.enable) the first is the remote log's start, the second
        the first offset on the leader's disk; without remote segments they are equal."""
        earliest = self._list_offsets(topic, partitions, -2)
        local = self._list_offsets(topic, partitions, EARLIEST_LOCAL_TIMESTAMP)
        return {p: (earliest[p], local[p]) for p in partitions}

    def _list_offsets(self, topic: str, partitions: list[int], timestamp_ms: int) -> dict[int, int]:
        return {p: self._list_offset(topic, p, timestamp_ms) for p in partitions}

    def _list_offset(self, topic: str, partition: int, timestamp_ms: int) -> int:
        """One partition's ListOffsets, from its leader. The cached metadata may predate the topic (created
        since this Admin last asked) or name a leader that has moved: on a retriable failure the metadata
        is asked for again and the call goes to the leader it names, until the request timeout, as Kafka's
        admin client does. A topic the brokers do not know is UNKNOWN_TOPIC_OR_PARTITION at once."""
        request = broker_pb2.ListOffsetsRequest()
        request.topics.add(topic=topic).partitions.add(partition=partition, timestamp_ms=timestamp_ms)

        def attempt(remaining_s: float) -> int:
            endpoint = self._metadata.leader_endpoint(topic, partition)
            if endpoint is None:
                raise KanalError(ErrorCode.LEADER_NOT_AVAILABLE, f"{topic}-{partition} has no leader")
            answer = call(self._metadata.stub(endpoint).ListOffsets, request,
                          timeout_s=max(_ATTEMPT_TIMEOUT_S_MIN, remaining_s),
                          what=f"ListOffsets at {endpoint}").topics[0].partitions[0]
            if answer.error != ErrorCode.NONE:
                raise KanalError(answer.error, f"offsets of {topic}-{partition}")
            return answer.offset

        def refresh(_error: KanalError) -> None:
            view = self._metadata.refresh([topic])
            unknown = view.topic_errors.get(topic)
            if unknown is None and partition >= len(view.topics.get(topic, ())):
                unknown = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if unknown is not None:
                raise KanalError(unknown, f"offsets of {topic}-{partition}: no such partition in the cluster")

        return self._retrying(attempt, on_retry=refresh)

    # ---- cluster ----

    def describe_cluster(self) -> admin_pb2.DescribeClusterResponse:
        return self._call("DescribeCluster", admin_pb2.DescribeClusterRequest())

    # ---- operations: reassignment, leaders, decommissioning ----

    def assignment(self, topics: list[str] | None = None) -> dict[tuple[str, int], tuple[int, ...]]:
        """Every partition's replicas (preferred leader first) of `topics` (None: every topic, internal ones
        included), from a broker's Metadata."""
        reply = self._call("Metadata", broker_pb2.MetadataRequest(topics=topics or []))
        out = {}
        for topic in reply.topics:
            _raise_for(topic.error, f"topic {topic.name}")
            for p in topic.partitions:
                out[(topic.name, p.partition)] = tuple(p.replicas)
        return out

    def alter_partition_reassignments(
        self, targets: dict[tuple[str, int], tuple[int, ...] | None]
    ) -> list[operations_pb2.PartitionOperationResult]:
        """Start reassignments (target replicas) or cancel them (None); one result per partition."""
        request = operations_pb2.AlterPartitionReassignmentsRequest(targets=[
            operations_pb2.AlterPartitionReassignmentsRequest.Target(
                topic=topic, partition=partition, replicas=list(replicas or ()), cancel=replicas is None)
            for (topic, partition), replicas in targets.items()])
        return list(self._call("AlterPartitionReassignments", request).results)

    def list_partition_reassignments(
        self, partitions: list[tuple[str, int]] | None = None
    ) -> list[operations_pb2.PartitionReassignmentState]:
        """The named partitions' replica sets and reassignments, or every reassignment in progress."""
        request = operations_pb2.ListPartitionReassignmentsRequest(partitions=[
            operations_pb2.TopicPartitionRef(topic=t, partition=p) for t, p in partitions or ()])
        return list(self._call("ListPartitionReassignments", request).partitions)

    def elect_preferred_leaders(
        self, partitions: list[tuple[str, int]] | None = None
    ) -> list[operations_pb2.PartitionOperationResult]:
        """Preferred-leader election for the named partitions (None: every one not led by its preferred
        replica); one result per partition."""
        request = operations_pb2.ElectLeadersRequest(partitions=[
            operations_pb2.TopicPartitionRef(topic=t, partition=p) for t, p in partitions or ()])
        return list(self._call("ElectLeaders", request).results)

    def unregister_broker(self, broker_id: int) -> None:
        """Remove a stopped broker that holds no replicas; BROKER_HOLDS_REPLICAS names what it still holds."""
        reply = self._call("UnregisterBroker", operations_pb2.UnregisterBrokerRequest(broker_id=broker_id))
        _raise_for(reply.error, reply.error_message)

    def add_voter(self, controller_id: int, raft_endpoint: str, grpc_endpoint: str) -> list[int]:
        """Add a running controller to the quorum as a voter; the voter ids after the change.
        INVALID_QUORUM_CHANGE says why a change is refused (nothing changed then)."""
        reply = self._call("AddVoter", operations_pb2.AddVoterRequest(
            controller_id=controller_id, raft_endpoint=raft_endpoint, grpc_endpoint=grpc_endpoint))
        _raise_for(reply.error, reply.error_message)
        return list(reply.voter_ids)

    def remove_voter(self, controller_id: int) -> list[int]:
        """Remove a voter (not the active controller) from the quorum; the voter ids after the change."""
        reply = self._call("RemoveVoter", operations_pb2.RemoveVoterRequest(controller_id=controller_id))
        _raise_for(reply.error, reply.error_message)
        return list(reply.voter_ids)

    def _wait(self, condition, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                raise KanalError(ErrorCode.REQUEST_TIMED_OUT, f"timed out waiting for {what}")
            time.sleep(0.05)


def acl_text(entry: metadata_pb2.AccessControlEntry) -> str:
    """`ALLOW User:alice@* READ TOPIC:LITERAL:orders`, the way `kanal acls list` prints an entry."""
    def short(enum, prefix: str, value: int) -> str:
        return enum.Name(value).removeprefix(prefix) if value in enum.values() else str(value)

    return (f"{short(metadata_pb2.AclPermission, 'ACL_PERMISSION_', entry.permission)} "
            f"{entry.principal}@{entry.host} "
            f"{short(metadata_pb2.AclOperation, 'ACL_OPERATION_', entry.operation)} "
            f"{short(metadata_pb2.AclResourceType, 'ACL_RESOURCE_', entry.resource_type)}:"
            f"{short(metadata_pb2.AclPatternType, 'ACL_PATTERN_', entry.pattern_type)}:{entry.resource_name}")




def _raise_for(code: int, message: str) -> None:
    if code != ErrorCode.NONE:
        raise KanalError(code, message)
