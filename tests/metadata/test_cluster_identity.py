"""The cluster id: decided once per metadata log, kept by apply and by snapshots."""

from __future__ import annotations

import random

import pytest

from kanal.metadata import (
    MetadataImage,
    MetadataInvariantError,
    apply_batch,
    cluster_id_problem,
    decide_cluster_identity,
)
from kanal.metadata.snapshot import image_to_snapshot
from kanal.v1 import metadata_pb2


def _decide(h, configured: str = "") -> str:
    return h.commit(decide_cluster_identity(h.image, configured=configured, rng=h.rng, **h.ctx("controller")))


def test_a_new_log_gets_a_random_id_once(harness) -> None:
    cluster_id = _decide(harness)
    assert len(cluster_id) == 32 and harness.image.cluster_id == cluster_id
    offset = harness.image.next_offset
    # Every later activation finds it and writes nothing.
    assert _decide(harness) == cluster_id and harness.image.next_offset == offset
    # Deterministic in its rng (time and randomness are inputs), different across seeds.
    one, again, two = (_decide_fresh(random.Random(seed)) for seed in (1, 1, 2))
    assert one == again != two


def _decide_fresh(rng: random.Random) -> str:
    decision = decide_cluster_identity(MetadataImage(), configured="", rng=rng, now_ms=0, principal="c",
                                       request_id="r")
    return decision.reply


def test_a_configured_id_is_used_for_a_new_log_only(harness) -> None:
    assert _decide(harness, configured="orders-eu-7") == "orders-eu-7"
    assert _decide(harness, configured="another") == "orders-eu-7"


def test_apply_refuses_a_second_different_id_and_changes_nothing(harness) -> None:
    _decide(harness, configured="first")
    before = harness.image.copy()
    batch = metadata_pb2.MetadataBatch(controller_epoch=1, records=[
        metadata_pb2.MetadataRecord(cluster_identity=metadata_pb2.ClusterIdentityRecord(cluster_id="second"))])
    with pytest.raises(MetadataInvariantError, match="records cluster 'first'"):
        apply_batch(harness.image, batch, harness.image.next_offset)
    assert harness.image == before
    bad = metadata_pb2.MetadataBatch(controller_epoch=1, records=[
        metadata_pb2.MetadataRecord(
            cluster_identity=metadata_pb2.ClusterIdentityRecord(cluster_id="no spaces"))])
    with pytest.raises(MetadataInvariantError):
        apply_batch(MetadataImage(), bad, 0)
    assert cluster_id_problem("no spaces") and cluster_id_problem("")
    assert cluster_id_problem("ok-1.2_3") is None


def test_snapshots_keep_the_cluster_id(harness) -> None:
    cluster_id = _decide(harness)
    snapshot = image_to_snapshot(harness.image)
    restored = MetadataImage()
    apply_batch(restored, metadata_pb2.MetadataBatch(controller_epoch=harness.image.controller_epoch,
                                                     records=snapshot.records), 0)
    assert restored.cluster_id == cluster_id
