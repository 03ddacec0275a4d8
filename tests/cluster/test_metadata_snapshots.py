"""Metadata snapshots and a metadata log start past 0 (issue 18, finding 2: "The metadata log also needs
snapshots and a log start past 0, so a broker's restart does not replay months of history").

Controllers run with small snapshot and retention settings (192 KiB segments, a snapshot every 16 KiB of
metadata, retention 0 ms), so a few hundred kilobytes of client-quota writes roll segments, take
snapshots and delete the segments below them. Then:
- FetchMetadata at offset 0 is OFFSET_OUT_OF_RANGE (on main the log start stays 0 and it is served);
- a broker restarted on an empty data directory catches up from a snapshot and serves, as the leader, a
  topic created before the log start (every acknowledged record read back, new ones produced and read);
- a restarted controller starts from its snapshot (pysyncobj's dump: the image at the snapshot's offset)
  and only the log after it;
- with 3 controllers, all agree (the same log start rule, the same image, the same snapshot bytes at the
  same offsets), and one that was away while the others deleted the batches it missed restarts its log at
  the snapshot the leader sends it.
Every process is stopped by PID at the end of its test.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import grpc
import pytest

from kanal.clients.admin import Admin
from kanal.deploy.local_cluster import LocalCluster
from kanal.metadata.snapshot_file import decode_snapshot_file, parse_snapshot_file_name
from kanal.v1 import admin_pb2, controller_pb2, controller_pb2_grpc
from kanal.v1.error import ErrorCode

from .conftest import BROKER_FLAGS, CONTROLLER_FLAGS, check_history, partition_info, wait_until
from .history import read_topic
from .test_broker_catch_up import produce_acked

pytestmark = pytest.mark.cluster

SNAPSHOT_FLAGS = ["--metadata-batch-bytes-max", "65536", "--metadata-log-segment-bytes", "196608",
                  "--metadata-snapshot-interval-bytes", "16384", "--metadata-snapshot-interval-ms", "1000",
                  "--metadata-retention-ms", "0", "--metadata-snapshots-retained", "2"]
TOPIC = "before-the-start"


def controller_stub(channel_endpoint: str) -> tuple[grpc.Channel, controller_pb2_grpc.ControllerStub]:
    channel = grpc.insecure_channel(channel_endpoint, options=[("grpc.max_receive_message_length", 64 << 20)])
    return channel, controller_pb2_grpc.ControllerStub(channel)


def fetch_at(endpoint: str, offset: int) -> controller_pb2.FetchMetadataResponse:
    channel, stub = controller_stub(endpoint)
    with channel:
        return stub.FetchMetadata(
            controller_pb2.FetchMetadataRequest(offset=offset, max_bytes=1 << 20), timeout=10
        )


def describe_image(endpoint: str):
    channel, stub = controller_stub(endpoint)
    with channel:
        return stub.DescribeMetadataImage(controller_pb2.DescribeMetadataImageRequest(), timeout=10).snapshot


def write_quotas(endpoints: list[str], rounds: int, per_round: int = 150) -> None:
    """`rounds` metadata batches of `per_round` client-quota records each (~10 KiB a batch), sent to any
    controller (a standby forwards them to the active one)."""
    for r in range(rounds):
        request = admin_pb2.AlterClientQuotasRequest(entries=[
            admin_pb2.AlterClientQuotasRequest.Entry(
                entity=admin_pb2.QuotaEntity(entity_type="client-id", entity_name=f"client-{r}-{i}"),
                values=[admin_pb2.QuotaValue(key="producer_byte_rate", value=1000.0 + r)])
            for i in range(per_round)])

        def attempt(request=request):
            for endpoint in endpoints:
                channel, stub = controller_stub(endpoint)
                with channel:
                    try:
                        reply = stub.AlterClientQuotas(request, timeout=10)
                    except grpc.RpcError:
                        continue
                    return all(e.error == ErrorCode.NONE for e in reply.results)
            return False

        wait_until(attempt, 30, f"quota write {r} to be accepted")


def log_start(endpoint: str) -> int | None:
    """The controller's metadata log start once it is past 0 (FetchMetadata at 0 is refused), else None."""
    try:
        reply = fetch_at(endpoint, 0)
    except grpc.RpcError:
        return None
    return reply.start_offset if reply.error == ErrorCode.OFFSET_OUT_OF_RANGE else None


def snapshot_files(cluster: LocalCluster, controller: int) -> dict[int, bytes]:
    directory = cluster.data_dir / f"controller-{controller}" / "__cluster_metadata-0"
    out = {}
    for path in directory.iterdir():
        parsed = parse_snapshot_file_name(path.name)
        if parsed is None:
            continue
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            # The controller is live: retention may delete a superseded snapshot between the listing and
            # the read. A file it no longer holds has nothing to compare.
            continue
        out[parsed[0]] = decode_snapshot_file(data, path.name).snapshot.SerializeToString()
    return out


def loaded_snapshots(node) -> list[int]:
    """The metadata offsets of the snapshots (pysyncobj dumps) a controller loaded, from its log."""
    return [
        int(line.split("metadata_offset=")[1].split()[0])
        for line in node.log_path.read_text(errors="replace").splitlines()
        if "loaded <RaftSnapshot" in line
    ]


def lines_since_last_start(node, marker: str) -> list[str]:
    lines = node.log_path.read_text(errors="replace").splitlines()
    starts = [i for i, line in enumerate(lines) if marker in line]
    return lines[starts[-1]:] if starts else lines


@pytest.fixture
def snapshot_cluster(tmp_path_factory) -> Iterator[LocalCluster]:
    cluster = LocalCluster(tmp_path_factory.mktemp("snapshots"), controllers=1, brokers=2,
                           controller_flags=CONTROLLER_FLAGS + SNAPSHOT_FLAGS, broker_flags=BROKER_FLAGS)
    cluster.start(timeout_s=90)
    yield cluster
    cluster.stop()


def test_log_start_past_zero_a_wiped_broker_and_a_restarted_controller_start_from_snapshots(snapshot_cluster):
    cluster = snapshot_cluster
    [controller] = cluster.controllers
    survivor, wiped = cluster.brokers
    with Admin(cluster.bootstrap) as admin:
        admin.create_topic(TOPIC, 1, 2)
    wait_until(lambda: set(partition_info(cluster, TOPIC, 0).isr) == {0, 1}, 30, "both brokers in the ISR")
    acked = produce_acked(cluster, TOPIC, [b"early-%d" % i for i in range(20)])

    write_quotas([controller.endpoint], rounds=60)  # ~600 KiB of metadata: several segments, many snapshots
    start = wait_until(lambda: log_start(controller.endpoint), 60, "the metadata log start to move past 0")
    assert start > 0
    files = snapshot_files(cluster, 0)
    assert files and min(files) >= start, (sorted(files), start)  # no snapshot below the log start is kept
    assert max(files) >= start

    # A broker on an empty disk: its first fetch (offset 0) is below the log start, so it loads the
    # snapshot and continues from the snapshot's offset.
    wiped.stop()
    shutil.rmtree(cluster.data_dir / "broker-1")
    cluster.start_node(wiped, timeout_s=90)
    caught_up = lines_since_last_start(wiped, "registered broker")
    assert any("is below the log start" in line for line in caught_up), (
        "the wiped broker did not load a snapshot"
    )
    wait_until(lambda: set(partition_info(cluster, TOPIC, 0).isr) == {0, 1}, 60,
               "the wiped broker to copy the topic and rejoin the ISR")
    # It serves the topic created before the log start as its leader.
    survivor.stop()
    wait_until(
        lambda: partition_info(cluster, TOPIC, 0).leader == 1, 60, "the wiped broker to lead the topic"
    )
    acked.update(produce_acked(cluster, TOPIC, [b"late-%d" % i for i in range(10)]))
    check_history(acked, read_topic(cluster, TOPIC, 1))

    # A restarted controller starts from its snapshot: pysyncobj's dump of the image at a snapshot's
    # offset (past the log start), then the entries after it.
    image_before = describe_image(controller.endpoint)
    loads_before = loaded_snapshots(controller)
    cluster.restart(controller, timeout_s=90)
    loads = loaded_snapshots(controller)
    assert len(loads) == len(loads_before) + 1, "the restarted controller did not load a snapshot"
    assert loads[-1] >= start
    wait_until(lambda: describe_image(controller.endpoint).next_offset >= image_before.next_offset, 30,
               "the restarted controller to reach its image")
    assert log_start(controller.endpoint) >= start
    with Admin(cluster.bootstrap) as admin:
        assert TOPIC in admin.list_topics()
    acked.update(produce_acked(cluster, TOPIC, [b"after-controller-%d" % i for i in range(5)]))
    check_history(acked, read_topic(cluster, TOPIC, 1))


@pytest.fixture
def quorum_of_three(tmp_path_factory) -> Iterator[LocalCluster]:
    cluster = LocalCluster(tmp_path_factory.mktemp("snapshots-3"), controllers=3, brokers=0,
                           controller_flags=CONTROLLER_FLAGS + SNAPSHOT_FLAGS)
    cluster.start(timeout_s=90)
    yield cluster
    cluster.stop()


def test_three_controllers_agree_and_a_returning_one_restarts_its_log_at_the_snapshot(quorum_of_three):
    cluster = quorum_of_three
    endpoints = [c.endpoint for c in cluster.controllers]
    away = cluster.controllers[2]
    away.stop()
    write_quotas(endpoints[:2], rounds=60)
    for endpoint in endpoints[:2]:
        wait_until(lambda e=endpoint: log_start(e), 60, f"{endpoint}'s log start to move past 0")
    # The returning controller missed batches that both others deleted: pysyncobj sends it the leader's
    # dump, and its metadata log restarts at that snapshot's offset instead of fetching the gap.
    cluster.start_node(away, timeout_s=90)
    write_quotas(endpoints, rounds=2)  # something new for everyone to apply
    wait_until(lambda: len({describe_image(e).SerializeToString() for e in endpoints}) == 1, 60,
               "the three controllers' images to agree")
    assert all(log_start(e) for e in endpoints)
    away_log = "\n".join(away.log_path.read_text(errors="replace").splitlines())
    assert "restarting the metadata log at the snapshot's offset" in away_log
    # Snapshot files taken at the same offset hold the same bytes on every controller.
    files = [snapshot_files(cluster, i) for i in range(3)]
    for a in range(3):
        for b in range(a + 1, 3):
            for offset in set(files[a]) & set(files[b]):
                assert files[a][offset] == files[b][offset], offset
    # Every controller serves the same log (the same bytes, the same end) from the largest log start on.
    # Waited for, not read once: the images above can agree while one controller has yet to apply the
    # last batch, when that batch changes no image (a new active controller's activation record: on a
    # loaded machine an election may happen during the test).
    common = max(log_start(e) for e in endpoints)

    def served_logs_agree() -> bool:
        replies = [fetch_at(e, common) for e in endpoints]
        assert all(r.error == ErrorCode.NONE for r in replies)
        return len({(r.entries, r.end_offset) for r in replies}) == 1

    wait_until(served_logs_agree, 60, "the three controllers to serve the same metadata log")
