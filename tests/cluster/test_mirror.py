"""`kanal mirror` between two local clusters (issue 46): exactly once through SIGKILLs of the mirror and of a
target partition leader, groups that move from the source to the target, no loop between A->B and B->A,
new topics, configs and ACLs kept in sync (an ALLOW WRITE never).

Source A: one controller, one broker; target B: one controller, three brokers (the remote topics at RF 3,
so a leader killed costs no acknowledged record). A's broker, and that of C, the target of the configs and
ACLs test, run the authorizer with User:ANONYMOUS as a super user: every client may do everything, and ACLs
are stored, listed and synced as on a secured cluster.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kanal.clients.admin import Admin
from kanal.clients.consumer import Consumer
from kanal.clients.consumer_config import ConsumerConfig
from kanal.clients.producer import Producer
from kanal.clients.producer_config import ProducerConfig
from kanal.deploy.local_cluster import LocalCluster, Node
from kanal.v1 import admin_pb2, metadata_pb2

from .conftest import BROKER_FLAGS, broker_node, partition_info, wait_until

pytestmark = pytest.mark.cluster
M = metadata_pb2
SECURED = ["--authorizer", "on", "--super-users", "User:ANONYMOUS"]
TOPICS = ("orders", "payments", "clicks")
PARTITIONS = 3
OFFSET_LAG_MAX = 50
# Slower failure detection than the other cluster tests' (conftest.CONTROLLER_FLAGS): two clusters, a mirror
# and a producer share two cores here, and a single controller starved past a 300 ms election timeout steps
# down and back up, which makes a restarted broker's registration wait for a quiet moment.
CONTROLLER_FLAGS = ["--session-timeout-ms", "7000", "--election-timeout-ms", "1000"]
# And fewer internal partitions, followers given longer to keep up: the ISR is not what is tested here.
MIRROR_BROKER_FLAGS = [*BROKER_FLAGS, "--transaction-state-partitions", "6", "--replica-lag-ms-max", "10000"]
MIRROR_FLAGS = ["--refresh-interval-ms", "500", "--checkpoint-interval-ms", "300",
                "--offset-lag-max", str(OFFSET_LAG_MAX)]


@pytest.fixture(scope="module")
def clusters(tmp_path_factory) -> Iterator[tuple[LocalCluster, LocalCluster]]:
    a = LocalCluster(tmp_path_factory.mktemp("mirror-a"), controllers=1, brokers=1,
                     controller_flags=CONTROLLER_FLAGS, broker_flags=[*MIRROR_BROKER_FLAGS, *SECURED])
    b = LocalCluster(tmp_path_factory.mktemp("mirror-b"), controllers=1, brokers=3,
                     controller_flags=CONTROLLER_FLAGS, broker_flags=MIRROR_BROKER_FLAGS)
    try:
        a.start(timeout_s=90)
        b.start(timeout_s=90)
        yield a, b
    finally:
        a.stop()
        b.stop()


class Mirror:
    """`kanal mirror run` as a process of its own (so it can be SIGKILLed), its output in a file."""

    def __init__(self, log: Path, source: str, target: str, *flags: str) -> None:
        self.log, self.argv = log, [sys.executable, "-m", "kanal.deploy.cli", "mirror", "run", "--source",
                                    source, "--target", target, *flags]
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        out = open(self.log, "a")  # noqa: SIM115 - the child holds it; closed below
        self.process = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT,
                                        env=dict(os.environ, PYTHONUNBUFFERED="1"))
        out.close()

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            Node.wait_stopped(self.process, time.monotonic() + 30)

    def output(self) -> str:
        return self.log.read_text()


@pytest.fixture(scope="module")
def a_to_b(clusters, tmp_path_factory) -> Iterator[Mirror]:
    a, b = clusters
    mirror = Mirror(tmp_path_factory.mktemp("mirror") / "a-to-b.log", f"A={a.bootstrap}", f"B={b.bootstrap}",
                    "--topics", "orders|payments|clicks", *MIRROR_FLAGS)
    with Admin(a.bootstrap) as admin:
        for topic in TOPICS:
            admin.create_topic(topic, PARTITIONS, 1)
    mirror.start()
    try:
        yield mirror
    finally:
        mirror.stop()
        print(mirror.output()[-20_000:])  # shown with a failure


def positions(b: LocalCluster) -> dict[tuple[str, int], int]:
    with Admin(b.bootstrap) as admin:
        return admin.group_offsets("kanal-mirror-A-to-B.positions")


def source_ends(a: LocalCluster, topics) -> dict[tuple[str, int], int]:
    with Admin(a.bootstrap) as admin:
        return {(f"A.{t}", p): end for t in topics
                for p, (_start, end) in admin.log_bounds(t, list(range(PARTITIONS))).items()}


def read_all(cluster: LocalCluster, topic: str, partitions: int, ends: dict[int, int] | None = None,
             timeout_s: float = 60, **config) -> dict[int, list]:
    """Every record of `topic`, read_committed from offset 0 to each partition's end (now, or `ends`)."""
    with Admin(cluster.bootstrap) as admin:
        bounds = admin.log_bounds(topic, list(range(partitions)))
    consumer = Consumer(ConsumerConfig(cluster.bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=100,
                                       isolation_level="read_committed", enable_auto_commit=False, **config))
    out: dict[int, list] = {p: [] for p in range(partitions)}
    try:
        consumer.assign([(topic, p) for p in range(partitions)])

        def done() -> bool:
            for r in consumer.poll(0.2):
                out[r.partition].append(r)
            return all(consumer.position((topic, p)) >= (ends or {}).get(p, bounds[p][1]) for p in out)

        wait_until(done, timeout_s, f"{topic} read to its end")
        return out
    finally:
        consumer.close()


def test_every_acknowledged_record_lands_once_in_order_through_mirror_and_leader_kills(clusters, a_to_b):
    a, b = clusters
    acked: dict[tuple[str, int], list[tuple[int, bytes, bytes]]] = {}
    lock = threading.Lock()
    total = 50_000
    producer = Producer(ProducerConfig(bootstrap=a.bootstrap, linger_ms=5))
    produced = threading.Event()

    def produce() -> None:
        # 50,000 keyed records over about 20 s, so the kills below land in the middle of the stream.
        started = time.monotonic()
        def recorder(topic: str, key: bytes, value: bytes):
            def on_delivery(error, md) -> None:
                if error is None:
                    with lock:
                        acked.setdefault((topic, md.partition), []).append((md.offset, key, value))
            return on_delivery

        for i in range(total):
            topic = TOPICS[i % 3]
            key, value = f"k{i % 997}".encode(), f"{topic}-{i}".encode()
            producer.produce(topic, value, key=key, headers=[("n", str(i).encode())],
                             timestamp=1_800_000_000_000 + i, on_delivery=recorder(topic, key, value))
            if i % 500 == 499:
                ahead = (i + 1) / 2_500 - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)  # pacing the load, not synchronising: 2,500 records/s
        producer.flush()
        produced.set()

    thread = threading.Thread(target=produce)
    thread.start()
    try:
        wait_until(lambda: sum(positions(b).values()) > 5_000, 60, "the mirror copying")
        a_to_b.kill()  # SIGKILL 1: mid-transaction, most likely
        a_to_b.start()
        wait_until(lambda: sum(positions(b).values()) > 15_000, 60, "the mirror copying after a restart")
        leader = partition_info(b, "A.orders", 0).leader
        node = broker_node(b, leader)
        node.kill()  # a target partition leader: the mirror's writes move to the new leader
        # The controller moves the leadership (to a follower in the ISR, or to none when the load had left
        # the leader alone in it: then the partition waits for it, and no acknowledged record is lost).
        wait_until(lambda: partition_info(b, "A.orders", 0).leader != leader, 30, "the leader fenced")
        b.start_node(node, timeout_s=120)
        wait_until(lambda: sum(positions(b).values()) > 30_000, 60, "copying after the leader kill")
        a_to_b.kill()  # SIGKILL 2
        a_to_b.start()
        assert produced.wait(120), "the producer did not finish"
    finally:
        thread.join(120)
        producer.close()
    assert sum(len(v) for v in acked.values()) == total
    ends = source_ends(a, TOPICS)
    wait_until(lambda: all(positions(b).get(tp, -1) >= end for tp, end in ends.items()), 120,
               "the mirror's committed positions at the source's ends")
    for topic in TOPICS:
        read = read_all(b, f"A.{topic}", PARTITIONS)
        for p in range(PARTITIONS):
            want = [(key, value) for _offset, key, value in sorted(acked.get((topic, p), []))]
            got = [(r.key, r.value) for r in read[p]]
            # Exactly once, in source order: the copy of the partition is the source partition's records.
            assert got == want, f"A.{topic}[{p}]: {len(got)} records, {len(want)} acknowledged"
            # Keys, values, headers and timestamps kept.
            for r in read[p][:50]:
                n = int(r.value.rsplit(b"-", 1)[1])
                assert r.headers == [("n", str(n).encode())] and r.timestamp_ms == 1_800_000_000_000 + n
    assert "fenced" not in a_to_b.output()
    # `kanal mirror status` reads both clusters: every partition copied to the source's end.
    status = subprocess.run([*a_to_b.argv[:4], "status", *a_to_b.argv[5:], "--output", "json"],
                            capture_output=True, text=True, timeout=60, check=False)
    assert status.returncode == 0, status.stderr
    (flow,) = json.loads(status.stdout)
    rows = {(r["topic"], r["partition"]): r for r in flow["partitions"] if r["topic"] in TOPICS}
    assert flow["flow"] == "A->B" and len(rows) == 3 * PARTITIONS
    assert all(r["lag"] == 0 and r["committed"] == ends[(f"A.{t}", p)] for (t, p), r in rows.items())


def test_a_group_that_committed_on_the_source_resumes_on_the_target_missing_nothing(clusters, a_to_b):
    a, b = clusters
    group = "billing"
    with Admin(a.bootstrap) as admin:
        source_records = {p: admin.log_bounds("payments", [p])[p][1] for p in range(PARTITIONS)}
    # The group reads some of each partition on A and commits there, then stops (a failover).
    stop_at = {p: n // 3 for p, n in source_records.items()}
    consumer = Consumer(ConsumerConfig(a.bootstrap, group_id=group, auto_offset_reset="earliest",
                                       enable_auto_commit=False, fetch_max_wait_ms=100))
    read_on_a: dict[int, int] = {p: 0 for p in range(PARTITIONS)}
    try:
        consumer.assign([("payments", p) for p in range(PARTITIONS)])

        def read_enough() -> bool:
            for r in consumer.poll(0.2):
                read_on_a[r.partition] += 1
            return all(read_on_a[p] >= stop_at[p] for p in read_on_a)

        wait_until(read_enough, 60, "the group reading A")
        consumer.commit({("payments", p): stop_at[p] for p in range(PARTITIONS)})
    finally:
        consumer.close()
    # The mirror's checkpoints translate the commit and, the group having no members on B, commit it there.
    with Admin(b.bootstrap) as admin:
        wait_until(lambda: len(admin.group_offsets(group)) == PARTITIONS, 60, "the group's offsets on B")
        translated = admin.group_offsets(group)
    # The group's consumer, moved to B, joins the group there and resumes from the translated offsets (with
    # auto_offset_reset=latest, it would read nothing had they not been committed). The copy of a partition
    # holds the source partition's records in order (the test above): record i of it is source offset i.
    full = read_all(b, "A.payments", PARTITIONS)
    resumed = Consumer(ConsumerConfig(b.bootstrap, group_id=group, auto_offset_reset="latest",
                                      isolation_level="read_committed", enable_auto_commit=False,
                                      fetch_max_wait_ms=100))
    read: dict[int, list] = {p: [] for p in range(PARTITIONS)}
    try:
        resumed.subscribe(["A.payments"])

        def caught_up() -> bool:
            for r in resumed.poll(0.2):
                read[r.partition].append(r)
            return all(read[p] and read[p][-1].offset == full[p][-1].offset for p in read)

        wait_until(caught_up, 60, "the moved consumer reading to the end")
    finally:
        resumed.close()
    for p in range(PARTITIONS):
        # The consumer resumes at the translated offset: its first record is the first one there or after
        # (a sync naming the end of a transaction's records points at the transaction's marker).
        downstream = translated[("A.payments", p)]
        assert read[p][0].offset == min(r.offset for r in full[p] if r.offset >= downstream)
        values = [r.value for r in read[p]]
        not_read_on_a = [r.value for r in full[p]][stop_at[p]:]
        # Nothing the group had not read on A is skipped; what it reads again is at most offset-lag-max.
        assert values[len(values) - len(not_read_on_a):] == not_read_on_a
        assert 0 <= len(values) - len(not_read_on_a) <= OFFSET_LAG_MAX


def test_new_topics_configs_and_acls_follow_but_never_an_allow_write(clusters, tmp_path):
    """Into a third cluster, C, whose broker runs the authorizer (B's three brokers cannot: with the
    authorizer on, a follower's Fetch must come from the broker's own principal, which only TLS gives)."""
    a, _b = clusters
    c = LocalCluster(tmp_path / "c", controllers=1, brokers=1, controller_flags=CONTROLLER_FLAGS,
                     broker_flags=[*MIRROR_BROKER_FLAGS, *SECURED])

    def acl(topic: str, operation: int, principal: str) -> metadata_pb2.AccessControlEntry:
        return M.AccessControlEntry(resource_type=M.ACL_RESOURCE_TOPIC, resource_name=topic,
                                    pattern_type=M.ACL_PATTERN_LITERAL, principal=principal, host="*",
                                    operation=operation, permission=M.ACL_PERMISSION_ALLOW)

    with Admin(a.bootstrap) as admin:
        admin.create_topic("acl-topic", 1, 1)
    mirror: Mirror | None = None
    try:
        c.start(timeout_s=90)
        mirror = Mirror(tmp_path / "a-to-c.log", f"A={a.bootstrap}", f"C={c.bootstrap}", "--topics",
                        "acl-topic|fresh", *MIRROR_FLAGS)
        mirror.start()
        with Admin(c.bootstrap) as admin:
            wait_until(lambda: "A.acl-topic" in admin.list_topics(), 30, "A.acl-topic on C")
        # Changes made while the mirror runs: a new topic, a config, two ACLs.
        with Admin(a.bootstrap) as admin:
            admin.create_topic("fresh", 2, 1, {"retention.ms": "7200000"})
            admin.alter_configs(M.CONFIG_RESOURCE_TOPIC, "acl-topic", {"retention.bytes": "123456789"})
            admin.create_acls([acl("acl-topic", M.ACL_OPERATION_READ, "User:alice"),
                               acl("acl-topic", M.ACL_OPERATION_WRITE, "User:bob")])
        with Admin(c.bootstrap) as admin:
            wait_until(lambda: "A.fresh" in admin.list_topics(), 30, "A.fresh on C")
            assert len(admin.describe_topic("A.fresh").partitions) == 2

            def configs(topic: str) -> dict[str, str]:
                return {e.key: e.value for e in admin.describe_configs(M.CONFIG_RESOURCE_TOPIC, topic)
                        if not e.is_default}

            wait_until(lambda: configs("A.fresh").get("retention.ms") == "7200000", 30, "A.fresh's config")
            wait_until(lambda: configs("A.acl-topic").get("retention.bytes") == "123456789", 30,
                       "the config change")

            def acls() -> list:
                return admin.describe_acls(admin_pb2.AclFilter(resource_type=M.ACL_RESOURCE_TOPIC))

            wait_until(lambda: any(e.principal == "User:alice" for e in acls()), 30, "the READ ACL on C")
            synced = [(e.resource_name, e.principal, e.operation) for e in acls()]
            assert ("A.acl-topic", "User:alice", M.ACL_OPERATION_READ) in synced
            assert not any(principal == "User:bob" for _name, principal, _op in synced), synced
        # A record written to the new topic is copied like any other.
        with Producer(ProducerConfig(bootstrap=a.bootstrap)) as producer:
            producer.produce("fresh", b"hello", partition=1).result(30)
        wait_until(lambda: [r.value for r in read_all(c, "A.fresh", 2)[1]] == [b"hello"], 30,
                   "the fresh record")
    finally:
        if mirror is not None:
            mirror.stop()
            print(mirror.output()[-10_000:])
        c.stop()


def test_a_to_b_and_b_to_a_together_do_not_loop(clusters, a_to_b, tmp_path):
    a, b = clusters
    b_to_a = Mirror(tmp_path / "b-to-a.log", f"B={b.bootstrap}", f"A={a.bootstrap}", *MIRROR_FLAGS)
    with Admin(b.bootstrap) as admin:
        admin.create_topic("local-b", 1, 3)
    b_to_a.start()
    try:
        with Producer(ProducerConfig(bootstrap=b.bootstrap)) as producer:
            for i in range(100):
                producer.produce("local-b", f"b{i}".encode())
        with Admin(a.bootstrap) as admin_a:
            wait_until(lambda: "B.local-b" in admin_a.list_topics(), 30, "B.local-b on A")
            wait_until(lambda: admin_a.log_bounds("B.local-b", [0])[0][1] >= 100, 30, "B's records on A")
        # B->A copied A's remote topics? A->B copied B.local-b back to B? Neither may happen.
        with Admin(b.bootstrap) as admin_b, Admin(a.bootstrap) as admin_a:
            wait_until(lambda: positions_of(admin_a, "kanal-mirror-B-to-A.positions").get(("B.local-b", 0), 0)
                       >= 100, 30, "B->A committed")
            assert not [t for t in admin_b.list_topics() if t.startswith("A.B.")]
            assert not [t for t in admin_a.list_topics() if t.startswith("B.A.")]
        assert [r.value for r in read_all(a, "B.local-b", 1)[0]] == [f"b{i}".encode() for i in range(100)]
    finally:
        b_to_a.stop()
    assert b_to_a.process is not None and b_to_a.process.returncode == 0, b_to_a.output()


def positions_of(admin: Admin, group: str) -> dict[tuple[str, int], int]:
    return admin.group_offsets(group)
