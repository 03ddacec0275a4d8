"""The node side of the cluster identity: may this data directory serve the cluster the quorum names?

The metadata log names its cluster once (kanal.metadata.cluster_identity); a data directory records the
cluster it was first used with in meta.properties (`cluster.id`, storage/meta_properties.py). Brokers and
controllers judge the two with `judge_cluster_id` before they act on anything the quorum says:

- same id                    -> MATCH: go on.
- the directory names none   -> ADOPT: record the quorum's id, then go on. A new directory, or one written
                                before cluster ids (upgrades: see below).
- different ids              -> MISMATCH: the node refuses to start with `mismatch_message` (one line
                                naming both ids). Nothing on the disk is touched: the directory may hold
                                the only copy of the data of the cluster it names.

Upgrades. A directory written before cluster ids has no `cluster.id`: it adopts the quorum's on its first
start. A broker adopting with replica directories on its disk has one more check on the first image
(`foreign_replicas`): when none of the topic ids its replica directories record (partition.metadata) is
in the image, the quorum is not the one that placed them (a controller quorum replaced during the
upgrade), and it refuses instead of deleting them. Roll the controllers first (they record the id when
one of them becomes active), then the brokers.
"""

from __future__ import annotations

import enum
from collections.abc import Collection
from pathlib import Path


class ClusterVerdict(enum.Enum):
    MATCH = "match"
    ADOPT = "adopt"
    MISMATCH = "mismatch"


def judge_cluster_id(disk_cluster_id: str, quorum_cluster_id: str) -> ClusterVerdict:
    """The verdict for a directory recording `disk_cluster_id` ("" none) and a quorum naming
    `quorum_cluster_id` (never "": nodes judge only once the log names its cluster)."""
    if not quorum_cluster_id:
        raise ValueError("the quorum's cluster id is unknown: nothing to judge the directory against")
    if not disk_cluster_id:
        return ClusterVerdict.ADOPT
    return ClusterVerdict.MATCH if disk_cluster_id == quorum_cluster_id else ClusterVerdict.MISMATCH


def mismatch_message(node: str, data_dir: Path | str, disk_cluster_id: str, quorum_cluster_id: str) -> str:
    """The one line a node on another cluster's disk refuses to start with."""
    return (f"{node}: data directory {data_dir} belongs to cluster {disk_cluster_id}, but the controller "
            f"quorum's metadata log names cluster {quorum_cluster_id}; refusing to start and leaving the "
            "directory untouched (point the node at the quorum of its cluster, or give it an empty "
            "directory to join this one)")


def foreign_replicas(disk_topic_ids: Collection[str], image_topic_ids: Collection[str]) -> bool:
    """True when a directory that adopted a cluster id holds replicas and the first image knows none of
    their topic ids: it was not this quorum that placed them (module docstring: upgrades)."""
    recorded = {t for t in disk_topic_ids if t}
    return bool(recorded) and recorded.isdisjoint(image_topic_ids)


def foreign_replicas_message(node: str, data_dir: Path | str, count: int, quorum_cluster_id: str) -> str:
    return (f"{node}: data directory {data_dir} recorded no cluster id and holds {count} replica "
            f"directories, none of whose topic ids cluster {quorum_cluster_id}'s metadata knows: this "
            "quorum did not place them (was it replaced?); refusing to start and deleting nothing (add "
            f"cluster.id={quorum_cluster_id} to meta.properties by hand to let the broker adopt the cluster "
            "and drop those replicas)")
