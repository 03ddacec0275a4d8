"""A data directory's cluster id (meta.properties `cluster.id`) against the quorum's: match, adopt, refuse."""

from __future__ import annotations

import pytest

from kanal.broker.storage.cluster_identity import (
    ClusterVerdict,
    foreign_replicas,
    judge_cluster_id,
    mismatch_message,
)
from kanal.broker.storage.meta_properties import (
    MetaPropertiesError,
    load_or_create,
    read,
    record_cluster_id,
)


def test_verdicts() -> None:
    assert judge_cluster_id("a", "a") is ClusterVerdict.MATCH
    assert judge_cluster_id("", "a") is ClusterVerdict.ADOPT
    assert judge_cluster_id("a", "b") is ClusterVerdict.MISMATCH
    with pytest.raises(ValueError):
        judge_cluster_id("a", "")
    line = mismatch_message("broker 3", "/d", "old", "new")
    assert "\n" not in line and "old" in line and "new" in line and "untouched" in line


def test_foreign_replicas_only_when_the_disk_holds_topic_ids_the_image_does_not_know() -> None:
    assert not foreign_replicas([], {"x"})
    assert not foreign_replicas(["x", "y"], {"y"})
    assert foreign_replicas(["x", "y"], {"z"})
    assert not foreign_replicas([""], set())  # directories from before topic ids prove nothing


def test_meta_properties_adds_the_cluster_id_once_and_keeps_the_rest(tmp_path) -> None:
    meta = load_or_create(tmp_path, 3)
    assert meta.cluster_id == "" and meta.created
    recorded = record_cluster_id(tmp_path, meta, "c0ffee")
    again = read(tmp_path / "meta.properties", 3)
    assert again.cluster_id == "c0ffee" == recorded.cluster_id and again.directory_id == meta.directory_id
    with pytest.raises(ValueError, match="never changed"):
        record_cluster_id(tmp_path, again, "other")
    with pytest.raises(ValueError):
        record_cluster_id(tmp_path, meta, "bad id")
    assert read(tmp_path / "meta.properties", 3).cluster_id == "c0ffee"


def test_a_malformed_cluster_id_is_refused(tmp_path) -> None:
    meta = load_or_create(tmp_path, 1)
    path = tmp_path / "meta.properties"
    path.write_text(path.read_text() + "cluster.id=not ok!\n")
    with pytest.raises(MetaPropertiesError, match="cluster.id"):
        read(path, 1)
    assert meta.directory_id in path.read_text()
