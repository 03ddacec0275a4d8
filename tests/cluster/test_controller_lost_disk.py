"""A controller that lost its volume comes back under its own id (issue 40, KIP-853's way): on the empty disk
it refuses to vote; `kanal quorum remove --id N` drops its disk identity with it; started again on the empty
disk and `kanal quorum add`-ed, it is recorded with its new directory and votes again: with another voter
stopped, the quorum commits only with its vote. The steps are the ones deploy/k8s/README.md documents."""

from __future__ import annotations

import shutil

import pytest

from kanal.clients import cli
from kanal.clients.admin import Admin

from .conftest import create_topic, start_cluster, wait_until
from .test_quorum_change import _answers, _retrying, converged, image_of, quorum_of

pytestmark = pytest.mark.cluster


def _directory_id(data_dir) -> str:
    lines = (data_dir / "meta.properties").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)["directory.id"]


def _flag(node, name: str) -> str:
    return node.args[node.args.index(name) + 1]


def test_a_controller_that_lost_its_volume_is_removed_re_added_and_votes_again(tmp_path_factory):
    cluster = start_cluster(tmp_path_factory, "lost-disk", brokers=1)
    try:
        admin = Admin(cluster.bootstrap)
        create_topic(cluster, "before", partitions=1, replication_factor=1)
        active = quorum_of(cluster.controllers[0].endpoint).leader_id
        victim, other = [n for n in cluster.controllers if n.node_id != active]
        data_dir = cluster.data_dir / f"controller-{victim.node_id}"
        old_directory = _directory_id(data_dir)

        def recorded() -> str | None:
            for r in image_of(cluster.controllers[active].endpoint).records:
                if r.WhichOneof("record") == "controller_registration" and \
                        r.controller_registration.controller_id == victim.node_id:
                    return r.controller_registration.directory_id
            return None

        # The quorum knows its disk (a disk lost before that is indistinguishable from a new controller).
        wait_until(lambda: recorded() == old_directory, 60, "the old directory id recorded")

        victim.stop()
        shutil.rmtree(data_dir)  # the volume is gone
        cluster.start_node(victim, wait=False)
        wait_until(lambda: not victim.running, 90, "the controller on the empty disk to refuse")
        assert victim.process is not None and victim.process.returncode != 0
        assert "must not vote" in victim.log_path.read_text()

        # 1. Remove it from the voters (its disk identity goes with it).
        stay = sorted([active, other.node_id])
        voters = _retrying(lambda: admin.remove_voter(victim.node_id))
        assert voters is None or sorted(voters) == stay
        wait_until(lambda: converged([cluster.controllers[active], other], stay), 60, f"voters {stay}")
        # 2. Start it on the empty disk, 3. add it back under the same id.
        cluster.start_node(victim, wait=False)
        wait_until(lambda: _answers(victim.endpoint), 90, "the controller on its new disk answering")
        argv = ["quorum", "add", "--id", str(victim.node_id), "--raft", _flag(victim, "--raft"),
                "--grpc", victim.endpoint, "--bootstrap", cluster.bootstrap]
        wait_until(lambda: cli.main(argv) == 0, 60, "kanal quorum add to succeed")
        everyone = sorted(n.node_id for n in cluster.controllers)
        wait_until(lambda: converged(cluster.controllers, everyone), 90, f"voters {everyone} everywhere")
        new_directory = _directory_id(data_dir)
        assert new_directory != old_directory
        wait_until(lambda: recorded() == new_directory, 60, "the new directory id recorded")

        # It votes: with the third voter stopped, writes commit only with its acknowledgement.
        other.stop()
        create_topic(cluster, "after", partitions=1, replication_factor=1)
        assert "after" in admin.list_topics()
        cluster.start_node(other)
    finally:
        cluster.stop()
