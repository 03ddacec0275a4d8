"""The audit on real files written by a real cluster: a scripted history (create topics, produce, kill a
broker, let it come back, alter a config, delete a topic, add and remove an ACL) must come back from the
metadata log exactly, in order, with the right principals; the replayed image must equal the controllers'; and
the data job must count what was produced."""

from __future__ import annotations

import collections

import grpc
import pytest

from kanal.clients.admin import TOPIC, Admin
from kanal.clients.producer import Producer
from kanal.clients.producer_config import ProducerConfig
from kanal.security.call_identity import PRINCIPAL_METADATA_KEY
from kanal.spark.audit import run_audit
from kanal.v1 import admin_pb2, controller_pb2_grpc, metadata_pb2
from kanal.v1.error import ErrorCode

from ..cluster.conftest import broker_node, create_topic, partition_info, start_cluster, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.cluster]

TOPIC_NAME = "orders"
TEMP_TOPIC = "scratch"
PARTITIONS = 3
KILLED = 2
ACL = metadata_pb2.AccessControlEntry(
    resource_type=metadata_pb2.ACL_RESOURCE_TOPIC,
    resource_name=TOPIC_NAME,
    pattern_type=metadata_pb2.ACL_PATTERN_LITERAL,
    principal="User:etl",
    host="*",
    operation=metadata_pb2.ACL_OPERATION_WRITE,
    permission=metadata_pb2.ACL_PERMISSION_ALLOW,
)


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """Run the scripted history on a fresh cluster; yield (cluster, what was produced per partition)."""
    cluster = start_cluster(tmp_path_factory, "audit")
    try:
        create_topic(cluster, TOPIC_NAME, partitions=PARTITIONS, replication_factor=3)
        create_topic(cluster, TEMP_TOPIC, partitions=1, replication_factor=3)
        produced: collections.Counter = collections.Counter()
        with Producer(ProducerConfig(bootstrap=cluster.bootstrap, acks="all")) as producer:
            futures = [producer.produce(TOPIC_NAME, f"value-{i}".encode(), key=f"key-{i % 50}".encode())
                       for i in range(3000)]
            producer.flush(60)
            for f in futures:
                produced[f.result(60).partition] += 1
        led_by_killed = [
            p for p in range(PARTITIONS) if partition_info(cluster, TOPIC_NAME, p).leader == KILLED
        ]
        node = broker_node(cluster, KILLED)
        node.kill()
        wait_until(
            lambda: all(KILLED not in partition_info(cluster, TOPIC_NAME, p).isr for p in range(PARTITIONS)),
            30,
            "the killed broker to leave every ISR",
        )
        cluster.start_node(node, timeout_s=60)
        wait_until(
            lambda: all(KILLED in partition_info(cluster, TOPIC_NAME, p).isr for p in range(PARTITIONS)),
            60,
            "the restarted broker to rejoin every ISR",
        )
        with Admin(cluster.bootstrap) as admin:
            admin.alter_configs(TOPIC, TOPIC_NAME, set_={"retention.ms": "3600000"})
            # On the scratch topic, which holds no records the other tests count (compaction may run).
            admin.alter_configs(TOPIC, TEMP_TOPIC, set_={"cleanup.policy": "compact,delete"})
            admin.delete_topic(TEMP_TOPIC)
        # ACL changes for the audit to find. This cluster enforces no ACLs, so a broker refuses ACL calls
        # (SECURITY_DISABLED); a controller serves them as a broker that enforces ACLs forwards them.
        with grpc.insecure_channel(cluster.controllers[0].endpoint) as channel:
            controller = controller_pb2_grpc.ControllerStub(channel)
            forwarded = ((PRINCIPAL_METADATA_KEY, "User:ANONYMOUS"),)
            created = controller.CreateAcls(admin_pb2.CreateAclsRequest(creations=[ACL]), timeout=30,
                                            metadata=forwarded)
            assert [r.error for r in created.results] == [ErrorCode.NONE]
            controller.DeleteAcls(admin_pb2.DeleteAclsRequest(filters=[admin_pb2.AclFilter(
                principal=ACL.principal)]), timeout=30, metadata=forwarded)
        yield cluster, produced, led_by_killed
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def audit(history, spark, tmp_path_factory):
    cluster, _, _ = history
    out = tmp_path_factory.mktemp("audit-out")
    controllers = [n.endpoint for n in cluster.controllers]
    return run_audit(spark, cluster.data_dir, out, controllers=controllers)


def rows(df, *cols):
    return [tuple(r[c] for c in cols) for r in df.collect()]


def test_topic_lifecycle_in_order_with_principals(audit):
    lifecycle = [
        (e, t, p)
        for e, t, p in rows(audit.tables["topic_lifecycle"], "event", "topic", "principal")
        if t in (TOPIC_NAME, TEMP_TOPIC)
    ]
    assert lifecycle == [("topic_created", TOPIC_NAME, "User:ANONYMOUS"),
                         ("topic_created", TEMP_TOPIC, "User:ANONYMOUS"),
                         ("topic_deleted", TEMP_TOPIC, "User:ANONYMOUS")]


def test_config_change_with_principal_and_old_value(audit):
    changes = rows(audit.tables["config_changes"], "event", "resource", "key", "value_before", "value_after",
                   "principal")
    assert ("config_set", TOPIC_NAME, "retention.ms", None, "3600000", "User:ANONYMOUS") in changes
    # A combined cleanup policy shows as it was set.
    assert ("config_set", TEMP_TOPIC, "cleanup.policy", None, "compact,delete", "User:ANONYMOUS") in changes


def test_acl_changes_with_principal(audit):
    changes = rows(audit.tables["acl_changes"], "event", "resource", "key", "value_after", "principal")
    assert changes == [("acl_added", TOPIC_NAME, "User:etl@*", "ALLOW WRITE (LITERAL)", "User:ANONYMOUS"),
                       ("acl_removed", TOPIC_NAME, "User:etl@*", None, "User:ANONYMOUS")]


def test_killed_broker_fenced_and_back(audit):
    events = [(e, reason, principal, duration) for e, b, reason, principal, duration in
              rows(audit.tables["broker_events"], "event", "broker_id", "reason", "principal", "duration_ms")
              if b == KILLED]
    kinds = [e[0] for e in events]
    # first start: registered fenced, unfenced once caught up; the kill: fenced by the controller on
    # session timeout; the restart: the new incarnation replaces the old, then it is unfenced again.
    assert kinds[:3] == ["broker_registered", "broker_unfenced", "broker_fenced"], events
    assert kinds[-2:] == ["broker_registered", "broker_unfenced"], events
    fenced = events[2]
    assert fenced[2] == "controller" and "session" in fenced[1], fenced
    assert events[-1][3] is not None and events[-1][3] >= 0
    fencing = rows(audit.tables["broker_fencing"], "broker_id", "start_reason", "duration_ms", "open")
    assert any(
        b == KILLED and "session" in (reason or "") and not is_open for b, reason, _, is_open in fencing
    )


def test_leader_changes_and_isr(audit, history):
    _, _, led_by_killed = history
    moves = rows(
        audit.tables["leader_changes"],
        "topic",
        "partition",
        "leader_before",
        "leader_after",
        "cause",
        "leader_epoch",
    )
    fenced_moves = [
        m for m in moves if m[0] == TOPIC_NAME and m[2] == KILLED and m[4] == "CAUSE_LEADER_FENCED"
    ]
    assert sorted(m[1] for m in fenced_moves) == sorted(led_by_killed)
    assert all(m[3] != KILLED and m[3] >= 0 for m in fenced_moves)
    isr = rows(audit.tables["isr_changes"], "topic", "partition", "isr_change", "isr_before", "isr_after")
    for p in range(PARTITIONS):
        mine = [
            (kind, before, after) for t, part, kind, before, after in isr if t == TOPIC_NAME and part == p
        ]
        shrink = next(
            i for i, (kind, before, after) in enumerate(mine) if kind == "shrink" and KILLED not in after
        )
        assert any(kind == "expand" and KILLED in after for kind, _, after in mine[shrink + 1:]), mine
    health = rows(audit.tables["partition_health"], "topic", "partition", "kind", "duration_ms", "open")
    for p in range(PARTITIONS):
        assert any(t == TOPIC_NAME and part == p and kind == "under_replicated" and d > 0 and not o
                   for t, part, kind, d, o in health), health


def test_replayed_image_equals_controllers(audit):
    assert audit.history.stopped is None
    assert not audit.damage
    assert len(audit.checks) == 3
    for check in audit.checks:
        assert check.reachable and check.error is None, check
        assert check.differences == [], check.differences
        assert check.compared_at_offset == audit.history.image.next_offset
        assert check.in_memory_compared, "the controller's in-memory image was not compared"
    assert audit.image_matches is True


def test_data_counts_equal_produced(history, spark):
    cluster, produced, _ = history
    df = spark.read.format("kanal-log").option("topics", TOPIC_NAME).load(str(cluster.data_dir))
    counts = {r["partition"]: r["count"] for r in df.groupBy("partition").count().collect()}
    assert counts == dict(produced)
    assert df.where("_corrupt is not null").count() == 0
    live = (
        spark.read.format("kanal-log")
        .option("bootstrap", cluster.bootstrap)
        .option("topics", TOPIC_NAME)
        .load()
    )
    live_counts = {r["partition"]: r["count"] for r in live.groupBy("partition").count().collect()}
    assert live_counts == dict(produced)


def test_audit_command_writes_tables_and_report(history, spark, tmp_path, capsys):
    from kanal.spark import audit_cli

    cluster, _, _ = history
    controllers = ",".join(n.endpoint for n in cluster.controllers)
    code = audit_cli.main(["--data-dir", str(cluster.data_dir), "--controllers", controllers, "--out",
                           str(tmp_path), "--quiet"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.count("replayed image EQUALS") == 3
    for table in (
        "events",
        "topic_lifecycle",
        "leader_changes",
        "isr_changes",
        "broker_events",
        "config_changes",
        "partition_health",
        "broker_fencing",
        "partition_summary",
        "damage",
        "image_check",
    ):
        assert list((tmp_path / table).glob("*.parquet")), table
    assert spark.read.parquet(str(tmp_path / "topic_lifecycle")).where(f"topic = '{TEMP_TOPIC}'").count() == 2
    report = (tmp_path / "report.html").read_text()
    assert "<svg" in report and "Leader changes per partition" in report and TOPIC_NAME in report
    assert "<script" not in report and "<link" not in report and "https://" not in report


def _tables(out) -> dict[str, list]:
    """Every Parquet table of a job's --out, as a sorted list of rows (order across tasks is Spark's
    choice)."""
    import pyarrow.parquet as pq

    return {d.name: sorted(repr(sorted(r.items())) for r in pq.read_table(d).to_pylist())
            for d in sorted(out.iterdir()) if d.is_dir()}


def _copy_if_there(src: str, dst: str) -> None:
    """A checkpoint's temporary file may be renamed away between the listing and the copy."""
    import shutil

    try:
        shutil.copy2(src, dst)
    except FileNotFoundError:
        pass


def test_audit_on_standalone_cluster_equals_local_mode(history, spark, tmp_path, capsys):
    """`kanal audit --master spark://...` on a standalone master with one worker (both started here) writes
    the same tables as local mode, read from the same copy of the cluster's files."""
    import shutil
    import subprocess
    import sys

    from kanal.spark import audit_cli

    from .standalone import SparkStandalone

    cluster, _, _ = history
    # A copy, so both runs read the same bytes while the live controllers keep appending (NoOps).
    data = tmp_path / "data"
    shutil.copytree(cluster.data_dir, data, ignore=shutil.ignore_patterns("*.lock", "logs"),
                    copy_function=_copy_if_there)
    local_out, cluster_out = tmp_path / "local", tmp_path / "standalone"
    spark_cluster = SparkStandalone(tmp_path / "spark")
    spark_cluster.launch()  # its two JVMs come up while the local run works
    try:
        local_code = audit_cli.main(["--data-dir", str(data), "--out", str(local_out), "--quiet"])
        capsys.readouterr()
    except BaseException:
        spark_cluster.stop()
        raise
    with spark_cluster:  # waits for the worker
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "kanal",
                "audit",
                "--master",
                spark_cluster.master_url,
                "--data-dir",
                str(data),
                "--out",
                str(cluster_out),
                "--quiet",
            ],
            env=spark_cluster.env(),
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        apps = spark_cluster.status().get("completedapps", [])
    assert run.returncode == local_code, run.stderr[-3000:]
    # The job ran on the cluster: the master lists it as an application it served.
    assert any(app.get("name") == "kanal-audit" for app in apps), apps
    local, on_cluster = _tables(local_out), _tables(cluster_out)
    assert set(local) >= {"events", "topic_lifecycle", "leader_changes", "broker_events", "isr_changes"}
    assert on_cluster == local
    lifecycle = (
        spark.read.parquet(str(cluster_out / "topic_lifecycle")).where(f"topic = '{TEMP_TOPIC}'").count()
    )
    assert lifecycle == 2
