"""Consumer groups on a real cluster (3 controllers, 3 brokers): members as processes that the tests
SIGKILL, histories of what was processed and committed, the coordinator killed under a group."""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import grpc
import pytest

from kanal.clients.admin import Admin
from kanal.clients.cluster_metadata import ClusterMetadata
from kanal.clients.consumer import Consumer, ConsumerConfig
from kanal.clients.group_membership import GroupMembership
from kanal.clients.producer import Producer
from kanal.clients.producer_config import ProducerConfig
from kanal.deploy.local_cluster import LocalCluster
from kanal.v1 import broker_pb2
from kanal.v1.error import ErrorCode, KanalError

from .conftest import BROKER_FLAGS, CONTROLLER_FLAGS, broker_node, create_topic, wait_until
from .history import end_offsets

pytestmark = pytest.mark.cluster
MEMBER_SCRIPT = Path(__file__).with_name("group_member.py")


class Member:
    """A group member process (group_member.py) and the events it printed."""

    def __init__(self, cluster, group: str, topic: str, log_dir: Path, *args: str) -> None:
        self.log = open(log_dir / f"member-{group}-{time.monotonic_ns()}.err", "w")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [sys.executable, str(MEMBER_SCRIPT), cluster.bootstrap, group, topic, *args],
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        self.events: list[dict] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            with self._lock:
                self.events.append(json.loads(line))

    def snapshot(self) -> list[dict]:
        with self._lock:
            return list(self.events)

    def owned(self) -> set[tuple[str, int]]:
        current: set[tuple[str, int]] = set()
        for e in self.snapshot():
            if e["event"] == "assigned":
                current = {tuple(tp) for tp in e["owned"]}
            elif e["event"] == "revoked":
                current -= {tuple(tp) for tp in e["partitions"]}
        return current

    def records(self) -> list[tuple[int, int, str]]:
        return [(e["partition"], e["offset"], e["value"]) for e in self.snapshot() if e["event"] == "record"]

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)
        self._reader.join(5)

    def stop(self) -> None:
        if self.alive:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._reader.join(5)
        self.log.close()


@pytest.fixture
def members(cluster, tmp_path):
    started: list[Member] = []

    def start(group: str, topic: str, *args: str) -> Member:
        member = Member(cluster, group, topic, tmp_path, *args)
        started.append(member)
        return member

    yield start
    for member in started:
        member.stop()


def covered(live: list[Member], topic: str, partitions: int) -> bool:
    """Every partition owned by exactly one live member, and every live member owns one (when possible)."""
    owned = [m.owned() for m in live]
    union = set().union(*owned)
    return (union == {(topic, p) for p in range(partitions)} and sum(len(o) for o in owned) == partitions
            and all(owned[i] for i in range(min(len(live), partitions))))


def produce(cluster, topic: str, count: int, prefix: str) -> dict[tuple[int, int], str]:
    acked: dict[tuple[int, int], str] = {}
    with Producer(ProducerConfig(bootstrap=cluster.bootstrap, acks="all", linger_ms=2)) as producer:
        futures = [
            (producer.produce(topic, f"{prefix}-{i}", key=f"k{i}"), f"{prefix}-{i}") for i in range(count)
        ]
        producer.flush()
        for future, value in futures:
            meta = future.result(30)
            acked[(meta.partition, meta.offset)] = value
    return acked


def committed_offsets(cluster, group: str, topic: str, partitions: int) -> dict[int, int]:
    md = ClusterMetadata(cluster.bootstrap)
    membership = GroupMembership(
        md,
        group_id=group,
        group_instance_id="",
        client_id="probe",
        session_timeout_ms=2000,
        rebalance_timeout_ms=5000,
        assignors=["range"],
        request_timeout_ms=10_000,
    )
    try:
        found = membership.committed([(topic, p) for p in range(partitions)])
        return {p: o for (_, p), o in found.items()}
    finally:
        md.close()


def test_four_members_split_six_partitions_and_read_every_record_once(cluster, members):
    topic = "groups-split"
    create_topic(cluster, topic, partitions=6)
    group = [members("split", topic) for _ in range(4)]
    wait_until(lambda: covered(group, topic, 6), 60, "4 members sharing 6 partitions")
    assert sorted(len(m.owned()) for m in group) == [1, 1, 2, 2]  # range: 6 over 4
    acked = produce(cluster, topic, 2000, "split")
    wait_until(lambda: sum(len(m.records()) for m in group) >= len(acked), 60, "every record read")
    reads = [r for m in group for r in m.records()]
    assert len(reads) == len(set(reads)) == len(acked), "a record was read twice or not at all"
    assert {(p, o): v for p, o, v in reads} == acked
    for m in group:  # each member read only its own partitions, in offset order
        per_partition: dict[int, list[int]] = {}
        for p, o, _ in m.records():
            assert (topic, p) in m.owned()
            per_partition.setdefault(p, []).append(o)
        assert all(offsets == sorted(offsets) for offsets in per_partition.values())


def test_join_leave_and_kill_rebalance_and_manual_commits_never_move_back(cluster, members):
    topic = "groups-churn"
    create_topic(cluster, topic, partitions=6)
    live = [members("churn", topic) for _ in range(3)]
    wait_until(lambda: covered(live, topic, 6), 60, "3 members sharing 6 partitions")
    # Sample the committed offsets all along: none may ever go back.
    samples: list[dict[int, int]] = []
    stop_sampling = threading.Event()

    def sample() -> None:
        while not stop_sampling.wait(0.05):
            try:
                samples.append(committed_offsets(cluster, "churn", topic, 6))
            except KanalError:
                pass  # the coordinator is busy; the next sample will do

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    acked: dict[tuple[int, int], str] = {}
    try:
        acked.update(produce(cluster, topic, 1000, "a"))
        joiner = members("churn", topic)  # a member joins
        live.append(joiner)
        wait_until(lambda: covered(live, topic, 6), 60, "the group to take in a fourth member")
        acked.update(produce(cluster, topic, 1000, "b"))
        leaver = live.pop(0)  # a member leaves cleanly
        leaver.stop()
        wait_until(lambda: covered(live, topic, 6), 60, "the group to cover the partitions after a leave")
        acked.update(produce(cluster, topic, 1000, "c"))
        victim = live.pop(0)  # a member crashes: its session must run out
        victim.kill()
        wait_until(lambda: covered(live, topic, 6), 60, "the group to cover the partitions after a SIGKILL")
        acked.update(produce(cluster, topic, 1000, "d"))
        ends = end_offsets(cluster, topic, 6)
        wait_until(lambda: committed_offsets(cluster, "churn", topic, 6) == ends, 60,
                   "the group to commit up to the end of every partition")
    finally:
        stop_sampling.set()
        sampler.join(5)
    processed = {(p, o): v for m in [leaver, victim, joiner, *live] for p, o, v in m.records()}
    missing = {k: v for k, v in acked.items() if processed.get(k) != v}
    assert not missing, f"{len(missing)} acknowledged records never processed, e.g. {sorted(missing)[:5]}"
    assert len(samples) > 10
    for earlier, later in itertools.pairwise(samples):
        for p, offset in earlier.items():
            assert later.get(p, -1) >= offset, (
                f"committed offset of partition {p} went back: {offset} -> {later}"
            )


def test_coordinator_kill_keeps_the_groups_offsets(cluster):
    topic = "groups-durable"
    create_topic(cluster, topic, partitions=3)
    produce(cluster, topic, 300, "x")
    consumer = Consumer(
        ConsumerConfig(
            bootstrap=cluster.bootstrap,
            group_id="durable",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
    )
    try:
        consumer.assign([(topic, p) for p in range(3)])
        offsets = {(topic, p): 10 * (p + 1) for p in range(3)}
        consumer.commit(offsets)  # a simple commit (assign, no membership)
        assert consumer.committed(offsets) == offsets
    finally:
        consumer.close()
    md = ClusterMetadata(cluster.bootstrap)
    try:
        where = md.any_stub().FindCoordinator(broker_pb2.FindCoordinatorRequest(key="durable"), timeout=10)
    finally:
        md.close()
    assert where.error == ErrorCode.NONE
    coordinator = broker_node(cluster, where.node_id)
    coordinator.kill()
    try:
        moved = wait_until(lambda: _coordinator_of(cluster, "durable", not_on=where.node_id), 30,
                           "a new coordinator for the group")
        assert moved[0] != where.node_id
        assert committed_offsets(cluster, "durable", topic, 3) == {p: 10 * (p + 1) for p in range(3)}
    finally:
        cluster.start_node(coordinator, timeout_s=60)
    assert committed_offsets(cluster, "durable", topic, 3) == {p: 10 * (p + 1) for p in range(3)}


def test_assign_with_a_group_starts_at_its_committed_offsets_and_reset_none_raises_without_one(cluster):
    """As in Kafka: a consumer that assigns partitions by hand (no membership) with a group_id starts each
    at the group's committed offset; where none is committed, auto_offset_reset decides, and "none" makes
    position() and poll() raise OFFSET_OUT_OF_RANGE until a seek. Before, assign() ignored the commits and
    "none" read from the end."""
    topic = "groups-assign-committed"
    create_topic(cluster, topic, partitions=2)
    acked = produce(cluster, topic, 200, "c")
    on_0 = sorted(o for p, o in acked if p == 0)
    assert len(on_0) > 20 and on_0[17] == 17  # precondition: partition 0 holds offsets 0..20
    config = {"bootstrap": cluster.bootstrap, "group_id": "assigner", "enable_auto_commit": False,
              "fetch_max_wait_ms": 100}
    with Consumer(ConsumerConfig(**config)) as first:
        first.assign([(topic, 0)])
        first.commit({(topic, 0): 17})
    with Consumer(ConsumerConfig(**config, auto_offset_reset="none")) as second:
        second.assign([(topic, 0), (topic, 1)])
        assert second.position((topic, 0)) == 17
        with pytest.raises(KanalError) as err:
            second.position((topic, 1), timeout_s=5)
        assert err.value.code == ErrorCode.OFFSET_OUT_OF_RANGE and "auto_offset_reset" in err.value.message
        second.seek((topic, 1), 3)
        read: dict[int, int] = {}

        def first_of_each() -> bool:
            for r in second.poll(0.2):
                read.setdefault(r.partition, r.offset)
            return len(read) == 2

        wait_until(first_of_each, 30, "a record of each partition")
        assert read == {0: 17, 1: 3}


def _coordinator_of(cluster, group: str, not_on: int) -> tuple[int] | None:
    """(broker id,) of the group's coordinator once it is not `not_on` (a tuple: broker 0 is falsy)."""
    md = ClusterMetadata(",".join(n.endpoint for n in cluster.brokers if n.running))
    try:
        reply = md.any_stub().FindCoordinator(broker_pb2.FindCoordinatorRequest(key=group), timeout=5)
    except (KanalError, grpc.RpcError):
        return None
    finally:
        md.close()
    return (reply.node_id,) if reply.error == ErrorCode.NONE and reply.node_id != not_on else None


def test_zombie_member_of_an_old_generation_cannot_commit(cluster):
    topic = "groups-zombie"
    create_topic(cluster, topic, partitions=2)
    md = ClusterMetadata(cluster.bootstrap)

    def membership(name: str) -> GroupMembership:
        return GroupMembership(
            md,
            group_id="zombie",
            group_instance_id="",
            client_id=name,
            session_timeout_ms=3000,
            rebalance_timeout_ms=10_000,
            assignors=["range"],
            request_timeout_ms=10_000,
        )

    def counts(topics):
        return {t: 2 for t in topics}

    a, b = membership("a"), membership("b")
    try:
        assert sorted(a.join([topic], [], counts)) == [(topic, 0), (topic, 1)]
        old_generation, old_member = a.generation, a.member_id
        a.commit({(topic, 0): 5})
        joined: list = []
        joiner = threading.Thread(target=lambda: joined.append(b.join([topic], [], counts)))
        joiner.start()  # b's join rebalances the group; a must rejoin
        wait_until(lambda: a.heartbeat() == ErrorCode.REBALANCE_IN_PROGRESS, 20, "a to hear of the rebalance")
        a.join([topic], [], counts)
        joiner.join(20)
        assert a.generation > old_generation and joined
        # The zombie: a's old incarnation commits with the generation it had.
        zombie = membership("zombie")
        zombie.member_id, zombie.generation = old_member, old_generation
        with pytest.raises(KanalError) as refused:
            zombie.commit({(topic, 0): 999})
        assert refused.value.code == ErrorCode.ILLEGAL_GENERATION
        stranger = membership("stranger")
        stranger.member_id, stranger.generation = "not-a-member", a.generation
        with pytest.raises(KanalError) as unknown:
            stranger.commit({(topic, 0): 999})
        assert unknown.value.code == ErrorCode.UNKNOWN_MEMBER_ID
        assert a.committed([(topic, 0)]) == {(topic, 0): 5}
    finally:
        a.leave()
        b.leave()
        md.close()


def test_two_groups_on_one_topic_each_read_everything(cluster):
    topic = "groups-two"
    create_topic(cluster, topic, partitions=3)
    acked = produce(cluster, topic, 600, "two")
    for group in ("reader-a", "reader-b"):
        consumer = Consumer(
            ConsumerConfig(
                bootstrap=cluster.bootstrap,
                group_id=group,
                auto_offset_reset="earliest",
                session_timeout_ms=3000,
                heartbeat_interval_ms=300,
            )
        )
        try:
            consumer.subscribe([topic])
            got: dict[tuple[int, int], str] = {}
            deadline = time.monotonic() + 60
            while len(got) < len(acked) and time.monotonic() < deadline:
                for r in consumer.poll(0.2):
                    got[(r.partition, r.offset)] = r.value.decode()
            assert got == acked, f"group {group} read {len(got)} of {len(acked)}"
            consumer.commit()
            assert consumer.committed([(topic, p) for p in range(3)]) == {
                (topic, p): max(o for q, o in acked if q == p) + 1 for p in range(3)}
        finally:
            consumer.close()


def test_static_member_restart_gets_its_partitions_back_without_a_rebalance(cluster, members):
    topic = "groups-static"
    create_topic(cluster, topic, partitions=4)
    one = members("static", topic, "--instance", "one", "--session-ms", "6000")
    two = members("static", topic, "--instance", "two", "--session-ms", "6000")
    wait_until(lambda: covered([one, two], topic, 4), 60, "two static members sharing 4 partitions")
    before = one.owned()
    generation = [e for e in two.snapshot() if e["event"] == "assigned"][-1]["generation"]
    seen = len(two.snapshot())
    one.kill()
    again = members("static", topic, "--instance", "one", "--session-ms", "6000")
    wait_until(lambda: again.owned(), 30, "the restarted static member to get partitions")
    assert again.owned() == before
    assert [e for e in again.snapshot() if e["event"] == "assigned"][-1]["generation"] == generation
    assert not [e for e in two.snapshot()[seen:] if e["event"] in ("revoked", "assigned")], \
        "the other member saw a rebalance"


def test_cooperative_sticky_members_keep_unmoved_partitions_during_a_rebalance(cluster, members):
    topic = "groups-coop"
    create_topic(cluster, topic, partitions=6)
    first = [members("coop", topic, "--strategy", "cooperative-sticky") for _ in range(2)]
    wait_until(lambda: covered(first, topic, 6), 60, "two members sharing 6 partitions")
    before = [m.owned() for m in first]
    seen = [len(m.snapshot()) for m in first]
    third = members("coop", topic, "--strategy", "cooperative-sticky")
    wait_until(lambda: covered([*first, third], topic, 6), 60, "three members sharing 6 partitions")
    for m, owned, start in zip(first, before, seen, strict=True):
        revoked = {
            tuple(tp) for e in m.snapshot()[start:] if e["event"] == "revoked" for tp in e["partitions"]
        }
        assert revoked and revoked < owned, "a member gave up all its partitions: not incremental"
        assert m.owned() == owned - revoked  # kept everything that did not move
    assert sorted(len(m.owned()) for m in [*first, third]) == [2, 2, 2]


def test_describe_shows_lag_and_the_coordinator_exports_it(cluster):
    topic = "groups-lag"
    create_topic(cluster, topic, partitions=2)
    acked = produce(cluster, topic, 400, "lag")
    ends = {p: max(o for q, o in acked if q == p) + 1 for p in range(2)}
    consumer = Consumer(
        ConsumerConfig(bootstrap=cluster.bootstrap, group_id="laggy", enable_auto_commit=False)
    )
    try:
        consumer.assign([(topic, 0), (topic, 1)])
        consumer.commit({(topic, 0): 0, (topic, 1): ends[1] - 7})
    finally:
        consumer.close()
    with Admin(cluster.bootstrap) as admin:
        description = admin.describe_group("laggy")
        assert admin.list_groups()["laggy"] == "Empty"
    lag = {(o.topic, o.partition): (o.committed_offset, o.log_end_offset, o.lag) for o in description.offsets}
    assert lag == {(topic, 0): (0, ends[0], ends[0]), (topic, 1): (ends[1] - 7, ends[1], 7)}
    node = broker_node(cluster, description.coordinator)

    def exported():
        text = urllib.request.urlopen(f"http://{node.extra['metrics']}/metrics", timeout=5).read().decode()
        return f'kanal_consumer_group_lag{{group="laggy",partition="1",topic="{topic}"}} 7.0' in text

    wait_until(exported, 30, "the lag gauge on the coordinator")


def test_pattern_subscription_picks_up_new_topics_and_auto_commits(cluster):
    create_topic(cluster, "groups-pat-a", partitions=2)
    acked = produce(cluster, "groups-pat-a", 100, "a")
    consumer = Consumer(
        ConsumerConfig(
            bootstrap=cluster.bootstrap,
            group_id="pattern",
            auto_offset_reset="earliest",
            session_timeout_ms=3000,
            heartbeat_interval_ms=300,
            metadata_max_age_ms=200,
            auto_commit_interval_ms=100,
        )
    )
    got: dict[tuple[str, int, int], str] = {}

    def poll_until(condition, what: str) -> None:
        deadline = time.monotonic() + 60
        while not condition():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            for r in consumer.poll(0.1):
                got[(r.topic, r.partition, r.offset)] = r.value.decode()

    try:
        consumer.subscribe(pattern=r"groups-pat-.*")
        poll_until(lambda: len(got) == len(acked), "the first topic's records")
        create_topic(cluster, "groups-pat-b", partitions=1)
        acked_b = produce(cluster, "groups-pat-b", 50, "b")
        poll_until(lambda: len(got) == len(acked) + len(acked_b), "the new topic's records")
        assert consumer.subscription() == ["groups-pat-a", "groups-pat-b"]
        assert {(t, p, o): v for (t, p, o), v in got.items() if t == "groups-pat-b"} == {
            ("groups-pat-b", p, o): v for (p, o), v in acked_b.items()}
        # Auto-commit (from poll) stores the positions without an explicit commit.
        ends = {("groups-pat-a", p): max(o for q, o in acked if q == p) + 1 for p in range(2)}
        poll_until(lambda: consumer.committed(list(ends)) == ends, "auto-commit of the positions")
        # commit_async resolves once the offsets are stored.
        consumer.commit_async({("groups-pat-b", 0): 1}).result(30)
        assert consumer.committed([("groups-pat-b", 0)]) == {("groups-pat-b", 0): 1}
    finally:
        consumer.close()


def test_member_that_stops_polling_leaves_the_group_and_rejoins_on_its_next_poll(cluster):
    topic = "groups-slow"
    create_topic(cluster, topic, partitions=2)
    consumer = Consumer(ConsumerConfig(bootstrap=cluster.bootstrap, group_id="slow", session_timeout_ms=3000,
                                       heartbeat_interval_ms=100, max_poll_interval_ms=1000))
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while not consumer.assignment():
            assert time.monotonic() < deadline, "never assigned"
            consumer.poll(0.1)
        with Admin(cluster.bootstrap) as admin:
            # No poll() for longer than max_poll_interval_ms: the member leaves so others can take over.
            wait_until(lambda: not admin.describe_group("slow").members, 30, "the slow member to leave")
            consumer.poll(0.1)  # processing resumes: it rejoins
            wait_until(lambda: len(admin.describe_group("slow").members) == 1, 30, "the member to rejoin")
        assert consumer.assignment() == [(topic, 0), (topic, 1)]
        # Its standing in the group (Kafka's groupMetadata()): the generation and member id it holds now,
        # which the coordinator names too.
        standing = consumer.group_metadata()
        with Admin(cluster.bootstrap) as admin:
            described = admin.describe_group("slow")
        assert (standing.group_id, standing.group_instance_id) == ("slow", "")
        assert standing.generation_id >= 2
        assert [m.member_id for m in described.members] == [standing.member_id]
    finally:
        consumer.close()
    assert consumer.group_metadata().generation_id == -1  # left the group


def test_offsets_of_empty_groups_expire_after_retention_and_deleted_topics_lose_theirs(tmp_path):
    """offsets.retention: an Empty group's offsets (and then the group) go once the retention has passed since
    it emptied; a group with members keeps its offsets however old; a deleted topic's offsets go at once, even
    for a live group. The deletions are tombstones in __consumer_offsets: they survive a restart."""
    flags = [*BROKER_FLAGS, "--offsets-retention-ms", "1500", "--offsets-retention-check-interval-ms", "200"]
    cluster = LocalCluster(
        tmp_path / "retention",
        controllers=1,
        brokers=1,
        controller_flags=CONTROLLER_FLAGS,
        broker_flags=flags,
    )
    live = None
    try:
        cluster.start(timeout_s=90)
        create_topic(cluster, "kept", replication_factor=1)
        create_topic(cluster, "dropped", replication_factor=1)
        for topic in ("kept", "dropped"):
            produce(cluster, topic, 10, topic)
        config = {"bootstrap": cluster.bootstrap, "auto_offset_reset": "earliest", "session_timeout_ms": 3000,
                  "heartbeat_interval_ms": 300}
        live = Consumer(ConsumerConfig(group_id="live", **config))
        live.subscribe(["kept"])
        read: list = []
        wait_until(
            lambda: read.extend(live.poll(0.2)) or len(read) >= 10,
            60,
            "the live member to read 'kept'",
            interval_s=0,
        )
        live.commit({("kept", 0): 10})
        live.commit_async({("dropped", 0): 4}).result(30)
        leaver = Consumer(ConsumerConfig(group_id="leaver", **config))
        leaver.subscribe(["kept"])
        wait_until(
            lambda: leaver.poll(0.2) is not None and leaver.assignment(),
            60,
            "the leaving member's assignment",
            interval_s=0,
        )
        leaver.commit({("kept", 0): 7})
        leaver.close()  # leaves: the group is Empty from now
        simple = Consumer(ConsumerConfig(group_id="simple", **config))
        simple.assign([("kept", 0)])
        simple.commit({("kept", 0): 3})  # outside any generation: ages from the commit
        simple.close()
        with Admin(cluster.bootstrap) as admin:
            assert set(admin.list_groups()) >= {"live", "leaver", "simple"}
            admin.delete_topic("dropped")
            wait_until(lambda: ("dropped", 0) not in admin.group_offsets("live"), 30,
                       "the deleted topic's offset to leave the live group")
            wait_until(lambda: not {"leaver", "simple"} & set(admin.list_groups()), 30,
                       "the empty groups' offsets to expire")
            # Well past the retention, the live group keeps its offset: it has a member.
            assert admin.group_offsets("live") == {("kept", 0): 10}
            live.poll(0.1)
        cluster.restart(broker_node(cluster, 0))
        with Admin(cluster.bootstrap) as admin:
            groups = wait_until(lambda: _groups_quietly(admin), 60, "the coordinator to reload")
            assert "leaver" not in groups and "simple" not in groups
            assert wait_until(lambda: _offsets_quietly(admin, "live"), 60, "the live group's offsets") == {
                ("kept", 0): 10}
    finally:
        if live is not None:
            live.close()
        cluster.stop()


def _groups_quietly(admin: Admin) -> dict[str, str] | None:
    try:
        groups = admin.list_groups()
    except KanalError:
        return None
    return groups if "live" in groups else None


def _offsets_quietly(admin: Admin, group: str) -> dict | None:
    try:
        return admin.group_offsets(group) or None
    except KanalError:
        return None
