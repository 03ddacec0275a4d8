"""Client-side partition assignors for consumer groups, and the bytes they travel in (no sockets).

The group leader receives every member's subscription in the JoinGroup response, runs the assignor the
group agreed on and sends each member its partitions in SyncGroup. An assignor is a pure function of
(partition count per topic, member subscriptions); the leader's shell does the RPCs.

Rules every assignor here keeps:

- Every member gets an entry in the result, possibly empty; a topic's partitions go only to members
  subscribed to it; topics missing from `partitions_per_topic` (or with 0 partitions) are ignored.
- Deterministic: the same input gives the same output, whatever the order of `members`. Members are
  ranked by `member_order`: static members (with a `group_instance_id`) first, by instance id, then
  dynamic members by member id. Ranking static members by their stable id keeps their partitions
  across restarts, which is the point of static membership.
- Each member's partitions are returned sorted by (topic, partition).

The assignors:

- `range` (eager): per topic, the subscribed members in rank order get contiguous ranges, the first
  `partitions % members` one partition more than the rest.
- `roundrobin` (eager): all subscribed partitions in (topic, partition) order are dealt one at a time
  to the members in rank order, cycling, skipping a member not subscribed to the partition's topic.
- `cooperative-sticky` (cooperative): a balanced assignment that moves as few owned partitions as it
  can, handed out under the cooperative rule. See `CooperativeStickyAssignor`.

Subscription user_data (ConsumerSubscription has no generation field, so it rides in user_data):
  empty                                    no generation known (-1), no caller data
  0x01 | generation: int32 big-endian | caller user_data...
                                           version 1: the generation in which `owned` was owned
Any other first byte is a version this code does not know: the generation reads as -1 and the member
is treated as one whose ownership age is unknown, so a newer client never breaks an older leader.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from google.protobuf.message import DecodeError, Message

from kanal.v1 import broker_pb2
from kanal.v1.error import ErrorCode, KanalError
from kanal.v1.topic_name import TopicPartition

_Message = TypeVar("_Message", bound=Message)

_USER_DATA_V1 = 1
_USER_DATA_V1_HEADER = struct.Struct(">Bi")  # version byte, generation


@dataclass(frozen=True)
class MemberSubscription:
    """One member as the assignor sees it."""

    member_id: str
    topics: tuple[str, ...]  # topics the member subscribes to
    owned: tuple[TopicPartition, ...] = ()  # partitions it owned before this rebalance (cooperative)
    group_instance_id: str = ""  # static id, "" for dynamic members
    generation: int = -1  # generation in which it owned `owned` (-1 unknown)


class Assignor(Protocol):
    name: str  # protocol name sent in JoinGroup
    rebalance_protocol: str  # "eager": members revoke everything first; "cooperative": only what moves

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> dict[str, list[TopicPartition]]: ...


def member_order(member: MemberSubscription) -> tuple[int, str, str]:
    """Rank key: static members first by instance id, then dynamic members by member id."""
    if member.group_instance_id:
        return (0, member.group_instance_id, member.member_id)
    return (1, member.member_id, "")


def _ranked(
    partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
) -> list[MemberSubscription]:
    """The members in rank order, after checking the input the way every assignor needs it checked."""
    for topic, count in partitions_per_topic.items():
        if count < 0:
            raise KanalError(ErrorCode.INVALID_PARTITIONS, f"topic {topic!r} has {count} partitions")
    ids = [m.member_id for m in members]
    if len(set(ids)) != len(ids):
        # Two entries for one member would make "every member gets one entry" ambiguous: a bug upstream.
        raise KanalError(ErrorCode.INVALID_REQUEST, f"duplicate member ids in {sorted(ids)}")
    return sorted(members, key=member_order)


def _subscribers(
    partitions_per_topic: Mapping[str, int], ranked: Sequence[MemberSubscription]
) -> dict[str, list[str]]:
    """Topic -> subscribed member ids in rank order, for known topics with partitions, sorted by topic."""
    by_topic: dict[str, list[str]] = {}
    for topic in sorted(partitions_per_topic):
        if partitions_per_topic[topic] > 0:
            members = [m.member_id for m in ranked if topic in m.topics]
            if members:
                by_topic[topic] = members
    return by_topic


def _sorted_result(assignment: Mapping[str, Iterable[TopicPartition]]) -> dict[str, list[TopicPartition]]:
    return {member_id: sorted(partitions) for member_id, partitions in assignment.items()}


class RangeAssignor:
    """Contiguous ranges per topic: with co-partitioned topics, member k gets the same partition
    numbers of each, which is what joins across topics want."""

    name = "range"
    rebalance_protocol = "eager"

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> dict[str, list[TopicPartition]]:
        ranked = _ranked(partitions_per_topic, members)
        result: dict[str, list[TopicPartition]] = {m.member_id: [] for m in ranked}
        for topic, subscribers in _subscribers(partitions_per_topic, ranked).items():
            each, extra = divmod(partitions_per_topic[topic], len(subscribers))
            start = 0
            for rank, member_id in enumerate(subscribers):
                length = each + (1 if rank < extra else 0)
                result[member_id].extend((topic, p) for p in range(start, start + length))
                start += length
        return _sorted_result(result)


class RoundRobinAssignor:
    """One partition at a time around the ring of members: the most even spread when subscriptions
    are identical, and no preference for low partition numbers across topics (unlike range)."""

    name = "roundrobin"
    rebalance_protocol = "eager"

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> dict[str, list[TopicPartition]]:
        ranked = _ranked(partitions_per_topic, members)
        result: dict[str, list[TopicPartition]] = {m.member_id: [] for m in ranked}
        subscribers = _subscribers(partitions_per_topic, ranked)
        ring = [m.member_id for m in ranked]
        cursor = 0  # the ring position the next partition starts looking from
        for topic, topic_members in subscribers.items():
            wanted = set(topic_members)
            for partition in range(partitions_per_topic[topic]):
                while ring[cursor] not in wanted:
                    cursor = (cursor + 1) % len(ring)
                result[ring[cursor]].append((topic, partition))
                cursor = (cursor + 1) % len(ring)
        return _sorted_result(result)


class CooperativeStickyAssignor:
    """Balanced and sticky, handed out under the cooperative rule.

    1. Ownership. A member's owned partition counts only while it is still valid for that member
       (topic known, subscribed, partition below the count). When several members claim one
       partition, the claim from the highest generation wins (the others are zombies of an older
       generation); on equal generations the best-ranked valid claim wins. When the newest claim is
       not valid (its member unsubscribed), the older ones are stale all the same: nobody keeps it.
    2. Target. Every kept partition stays put; unowned partitions go, most constrained first (fewest
       eligible members), to the eligible member with the fewest partitions. Then chains of moves
       even the loads out until no assignment could be more even (see `_StickyTarget`), taking
       chains that revoke nothing before those that do, and the fewest revocations first. So
       members with the same subscriptions end within one partition of each other, and adding a
       member to a settled group revokes only the minimum: each member keeps what it may keep.
    3. Cooperative rule. A partition another member currently lists in `owned` is withheld from
       its new owner in this result, because the old owner is still consuming it and must revoke it
       first: the old owner simply does not get it back, revokes it, rejoins, and the next rebalance
       (where nobody owns it) gives it to the new owner. So `result[m]` never contains a partition
       in another member's `owned`, except a contested partition that `m` claims too, from a
       generation no older than any other claim (m keeps it, or takes it over from an equal
       claimant; the others revoke).

    Two rebalances after a change the assignment is complete again: the first target is an even
    completion that keeps everything the second rebalance sees owned, so the second finds an
    equally even one that revokes nothing. A settled assignment fed back is returned unchanged.
    """

    name = "cooperative-sticky"
    rebalance_protocol = "cooperative"

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> dict[str, list[TopicPartition]]:
        ranked = _ranked(partitions_per_topic, members)
        subscribers = _subscribers(partitions_per_topic, ranked)
        claims = _newest_claims(ranked)
        target = _StickyTarget(ranked, subscribers, partitions_per_topic, claims)
        target.place_unowned()
        target.balance()
        return _sorted_result(_withhold_moving(target.assignment, claims))


Hop = tuple[str, str, str]  # (giving member, taking member, topic of the partition that moves)


class _StickyTarget:
    """The balanced target of the cooperative-sticky assignor while it is being built.

    Balancing works on paths: a chain of hops, each moving one partition to a member subscribed to
    its topic, from a member with load L to one with load at most L - 2. The members in between
    keep their load, so every path lowers the sum of squared loads by at least 2 (it ends). When no
    such path is left, the loads are as even as any assignment could make them (the optimality
    condition of semi-matchings), so members with the same subscriptions are within one of each
    other. A hop costs 1 when it moves a partition its giver owned before (a revocation) and 0
    otherwise; paths are searched cheapest first, and free paths before any paid one.
    """

    def __init__(
        self,
        ranked: Sequence[MemberSubscription],
        subscribers: Mapping[str, list[str]],
        partitions_per_topic: Mapping[str, int],
        claims: Mapping[TopicPartition, list[str]],
    ) -> None:
        self.rank = {m.member_id: i for i, m in enumerate(ranked)}
        self.subscribers = subscribers
        self.partitions_per_topic = partitions_per_topic
        self.previous = _resolve_owners(claims, subscribers, partitions_per_topic)
        self.assignment: dict[str, set[TopicPartition]] = {m.member_id: set() for m in ranked}
        for tp, owner in self.previous.items():
            self.assignment[owner].add(tp)

    def _load(self, member_id: str) -> tuple[int, int]:
        return (len(self.assignment[member_id]), self.rank[member_id])

    def place_unowned(self) -> None:
        unowned = [
            (topic, p)
            for topic in self.subscribers
            for p in range(self.partitions_per_topic[topic])
            if (topic, p) not in self.previous
        ]
        # Most constrained first, so a partition few members may take is not left for a member that
        # is already full of partitions anyone could have taken. Balancing fixes what this misses.
        unowned.sort(key=lambda tp: (len(self.subscribers[tp[0]]), tp))
        for tp in unowned:
            self.assignment[min(self.subscribers[tp[0]], key=self._load)].add(tp)

    def balance(self) -> None:
        while (path := self._next_path()) is not None:
            # Backwards, so each hop moves a partition its giver held when the path was found.
            for giver, taker, topic in reversed(path):
                tp = min(
                    (tp for tp in self.assignment[giver] if tp[0] == topic),
                    key=lambda tp: (self.previous.get(tp) == giver, tp),
                )
                self.assignment[giver].remove(tp)
                self.assignment[taker].add(tp)

    def _next_path(self) -> list[Hop] | None:
        levels = sorted({len(ps) for ps in self.assignment.values()}, reverse=True)
        for allow_revocations in (False, True):
            for level in levels:
                path = self._cheapest_path(level, allow_revocations)
                if path is not None:
                    return path
        return None

    def _hop_cost(self, giver: str, topic: str) -> int:
        free = any(tp[0] == topic and self.previous.get(tp) != giver for tp in self.assignment[giver])
        return 0 if free else 1

    def _cheapest_path(self, level: int, allow_revocations: bool) -> list[Hop] | None:
        """0-1 breadth-first search from every member with `level` partitions to one with at most
        level - 2, fewest revocations first, ties by rank."""
        sources = sorted(
            (m for m, ps in self.assignment.items() if len(ps) == level), key=self.rank.__getitem__
        )
        cost = {m: 0 for m in sources}
        via: dict[str, Hop] = {}
        queue = deque(sources)
        settled: set[str] = set()
        while queue:
            member = queue.popleft()
            if member in settled:
                continue
            settled.add(member)
            if len(self.assignment[member]) <= level - 2:
                path = []
                while member in via:
                    path.append(via[member])
                    member = via[member][0]
                return path[::-1]
            for topic in sorted({t for t, _ in self.assignment[member]}):
                hop_cost = self._hop_cost(member, topic)
                if hop_cost and not allow_revocations:
                    continue
                for taker in self.subscribers[topic]:
                    if cost[member] + hop_cost < cost.get(taker, cost[member] + hop_cost + 1):
                        cost[taker] = cost[member] + hop_cost
                        via[taker] = (member, taker, topic)
                        if hop_cost:
                            queue.append(taker)
                        else:
                            queue.appendleft(taker)
        return None


def _newest_claims(ranked: Sequence[MemberSubscription]) -> dict[TopicPartition, list[str]]:
    """Partition -> the members claiming it from the newest generation any claim of it has, in rank
    order. Claims from older generations are stale: their members were fenced out meanwhile."""
    newest: dict[TopicPartition, tuple[int, list[str]]] = {}
    for member in ranked:
        for tp in dict.fromkeys(member.owned):
            generation, claimants = newest.get(tp, (member.generation, []))
            if member.generation > generation:
                newest[tp] = (member.generation, [member.member_id])
            elif member.generation == generation:
                newest[tp] = (generation, [*claimants, member.member_id])
    return {tp: claimants for tp, (_, claimants) in newest.items()}


def _resolve_owners(
    claims: Mapping[TopicPartition, list[str]],
    subscribers: Mapping[str, list[str]],
    partitions_per_topic: Mapping[str, int],
) -> dict[TopicPartition, str]:
    """Partition -> the member that keeps it: the best-ranked newest claimant for which it is still
    valid. When no newest claim is valid (its member unsubscribed), older claims stay stale."""
    owners: dict[TopicPartition, str] = {}
    for (topic, partition), claimants in claims.items():
        if 0 <= partition < partitions_per_topic.get(topic, 0):
            valid = [m for m in claimants if m in subscribers.get(topic, ())]
            if valid:
                owners[(topic, partition)] = valid[0]
    return owners


def _withhold_moving(
    assignment: Mapping[str, set[TopicPartition]], claims: Mapping[TopicPartition, list[str]]
) -> dict[str, set[TopicPartition]]:
    """The cooperative rule: drop from each member what another member still owns and must revoke
    first. A member that is itself a newest claimant may have it: it was consuming it already."""
    return {
        member_id: {tp for tp in partitions if tp not in claims or member_id in claims[tp]}
        for member_id, partitions in assignment.items()
    }


ASSIGNORS: dict[str, Assignor] = {
    a.name: a for a in (RangeAssignor(), RoundRobinAssignor(), CooperativeStickyAssignor())
}


def assignor(name: str) -> Assignor:
    """The assignor for a protocol name; INVALID_CONFIG names the known ones."""
    found = ASSIGNORS.get(name)
    if found is None:
        raise KanalError(
            ErrorCode.INVALID_CONFIG, f"unknown partition assignor {name!r}; known: {sorted(ASSIGNORS)}"
        )
    return found


def _topic_partitions(partitions: Iterable[TopicPartition]) -> list[broker_pb2.TopicPartitions]:
    """Partitions grouped per topic, topics and partitions sorted, duplicates dropped."""
    by_topic: dict[str, set[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, set()).add(partition)
    return [broker_pb2.TopicPartitions(topic=t, partitions=sorted(ps)) for t, ps in sorted(by_topic.items())]


def _flatten(groups: Iterable[broker_pb2.TopicPartitions]) -> list[TopicPartition]:
    return sorted({(g.topic, p) for g in groups for p in g.partitions})


def _parse(message_type: type[_Message], data: bytes, what: str) -> _Message:
    try:
        return message_type.FromString(data)
    except DecodeError as e:
        raise KanalError(ErrorCode.INVALID_REQUEST, f"undecodable {what}: {e}") from e


def encode_subscription(
    topics: Iterable[str],
    owned: Iterable[TopicPartition] = (),
    user_data: bytes = b"",
    rack_id: str = "",
    generation: int = -1,
) -> bytes:
    """A ConsumerSubscription for JoinGroup; user_data carries the generation (see the module doc)."""
    if generation != -1 or user_data:
        user_data = _USER_DATA_V1_HEADER.pack(_USER_DATA_V1, generation) + user_data
    return broker_pb2.ConsumerSubscription(
        topics=list(topics),
        owned_partitions=_topic_partitions(owned),
        user_data=user_data,
        rack_id=rack_id,
    ).SerializeToString()


def decode_subscription(member_id: str, group_instance_id: str, data: bytes) -> MemberSubscription:
    """A member's JoinGroup metadata as the assignor sees it; `owned` comes back sorted."""
    message = _parse(broker_pb2.ConsumerSubscription, data, f"subscription of member {member_id!r}")
    generation = -1
    user_data = message.user_data
    if len(user_data) >= _USER_DATA_V1_HEADER.size and user_data[0] == _USER_DATA_V1:
        _, generation = _USER_DATA_V1_HEADER.unpack_from(user_data)
    return MemberSubscription(
        member_id=member_id,
        topics=tuple(message.topics),
        owned=tuple(_flatten(message.owned_partitions)),
        group_instance_id=group_instance_id,
        generation=generation,
    )


def encode_assignment(partitions: Iterable[TopicPartition], user_data: bytes = b"") -> bytes:
    """A ConsumerAssignment for SyncGroup."""
    return broker_pb2.ConsumerAssignment(
        partitions=_topic_partitions(partitions), user_data=user_data
    ).SerializeToString()


def decode_assignment(data: bytes) -> list[TopicPartition]:
    """The partitions in a SyncGroup assignment, sorted by (topic, partition)."""
    return _flatten(_parse(broker_pb2.ConsumerAssignment, data, "assignment").partitions)
