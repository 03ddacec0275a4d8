"""`kanal metadata`: the image as a tree, offline from a controller's data directory (newest snapshot +
the log after it, files unchanged) and from a running controller, through the `kanal` entry point."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest

from kanal.broker.storage.log import Log
from kanal.metadata import image_from_snapshot
from kanal.raft.metadata_log import METADATA_LOG_DIR_NAME, metadata_log_config
from kanal.raft.metadata_shell import image_tree
from kanal.raft.metadata_snapshots import SnapshotSettings
from kanal.raft.metadata_store import MetadataStore
from kanal.v1 import admin_pb2, controller_pb2, metadata_pb2

NOW_MS = 1_700_000_000_000
SETTINGS = SnapshotSettings(interval_bytes=2048, interval_ms=60_000, retained=2, retention_ms=0,
                            retention_bytes=None)


def kanal(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    code = "import sys; from kanal.deploy.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], input=stdin, capture_output=True, text=True,
                          timeout=60, check=False)


def digest(directory) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


@pytest.fixture
def controller_dir(tmp_path, chain):
    """A controller's data directory whose log starts past 0: a snapshot, then 100 more batches."""
    store = MetadataStore(
        Log.open(tmp_path / METADATA_LOG_DIR_NAME, metadata_log_config(1024, 4096)), SETTINGS
    )
    store.apply(chain.noop(1))
    for b in range(1, 150):
        store.apply(chain.register(b, 1))
    store.flush()
    snapshot, _ = store.snapshot()
    store.publish_snapshot(store.write_snapshot_file(snapshot, NOW_MS))
    store.maintain(NOW_MS)
    for b in range(150, 250):
        store.apply(chain.register(b, 1))
    entry = metadata_pb2.AccessControlEntry(
        resource_type=metadata_pb2.ACL_RESOURCE_TOPIC,
        resource_name="orders-",
        pattern_type=metadata_pb2.ACL_PATTERN_PREFIXED,
        principal="User:alice",
        host="*",
        operation=metadata_pb2.ACL_OPERATION_READ,
        permission=metadata_pb2.ACL_PERMISSION_ALLOW,
    )
    store.apply(
        chain.command(
            [chain.stamp(access_control_entry=metadata_pb2.AccessControlEntryRecord(entry=entry))], 1
        )
    )
    store.flush()
    assert store.log_start_offset > 0, "the fixture must make the reader start from the snapshot"
    store.close()
    return tmp_path


def test_offline_the_tree_is_the_snapshot_plus_the_log_and_no_file_changes(controller_dir, chain):
    before = digest(controller_dir / METADATA_LOG_DIR_NAME)
    result = kanal("metadata", "--data-dir", str(controller_dir), "cat", "/")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == json.loads(json.dumps(image_tree(chain.image)))
    assert result.stderr == ""
    assert digest(controller_dir / METADATA_LOG_DIR_NAME) == before

    listing = kanal("metadata", "--data-dir", str(controller_dir), "ls", "/brokers").stdout.split()
    assert listing == [f"{b}/" for b in range(1, 250)]
    leaf = kanal("metadata", "--data-dir", str(controller_dir), "cat", "/brokers/7/endpoint")
    assert leaf.stdout.strip() == '"127.0.0.1:9007"'
    acl = json.loads(kanal("metadata", "--data-dir", str(controller_dir), "cat", "/acls").stdout)
    assert acl == {"TOPIC:PREFIXED:orders-": [{"principal": "User:alice", "host": "*", "operation": "READ",
                                               "permission": "ALLOW"}]}


def test_a_damaged_log_tail_stops_the_image_there_with_a_warning(controller_dir, chain):
    last = max((controller_dir / METADATA_LOG_DIR_NAME).glob("*.log"))
    data = bytearray(last.read_bytes())
    data[-30] ^= 0xFF
    last.write_bytes(bytes(data))
    result = kanal("metadata", "--data-dir", str(controller_dir), "cat", "/metadata/next_offset")
    assert result.returncode == 0
    assert 0 < int(result.stdout) < chain.image.next_offset
    assert "damaged" in result.stderr and f"offset {int(result.stdout)}" in result.stderr


def test_the_shell_reads_commands_from_stdin(controller_dir):
    script = "cd /brokers/3\npwd\nls\ncat fenced\ncd /nowhere\nexit\nls /\n"
    result = kanal("metadata", "--data-dir", str(controller_dir), stdin=script)
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert lines[0] == "/brokers/3" and "endpoint" in lines and lines[-1] == "true"
    assert result.stderr.strip() == "error: /nowhere: no such node"  # and `ls /` after exit never ran


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("cat", "/topics/none"), 1, "/topics/none: no such node"),
        (("frobnicate",), 1, "unknown command"),
        (("cat",), 1, "cat: which path?"),
    ],
)
def test_bad_paths_and_commands_are_one_line_and_exit_1(controller_dir, args, code, message):
    result = kanal("metadata", "--data-dir", str(controller_dir), *args)
    assert result.returncode == code and message in result.stderr
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr


def test_a_directory_that_is_not_a_controllers_is_refused(tmp_path):
    result = kanal("metadata", "--data-dir", str(tmp_path), "ls")
    assert result.returncode == 1 and "not a controller's data directory" in result.stderr


@pytest.mark.cluster
def test_online_the_tree_is_the_controllers_image(live_quorum):
    q, _brokers = live_quorum
    active = q.wait_active()
    reply = q.stub(active).CreateTopics(admin_pb2.CreateTopicsRequest(topics=[admin_pb2.CreatableTopic(
        name="shell-topic", partitions=2, replication_factor=3)]), timeout=10)
    assert reply.results[0].error == 0
    snapshot = (
        q.stub(active)
        .DescribeMetadataImage(controller_pb2.DescribeMetadataImageRequest(), timeout=10)
        .snapshot
    )
    result = kanal("metadata", "--controller", q.endpoint(active), "cat", "/topics/shell-topic")
    assert result.returncode == 0, result.stderr
    expected = image_tree(image_from_snapshot(snapshot))["topics"]["shell-topic"]
    assert json.loads(result.stdout) == expected
    assert sorted(json.loads(result.stdout)["partitions"]) == ["0", "1"]
    assert sorted(expected["partitions"]["0"]["replicas"]) == [1, 2, 3]
