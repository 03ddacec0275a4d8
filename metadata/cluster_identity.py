"""Cluster identity: the random id a new metadata log records once, and the rules every node checks it by.

Why. A broker trusts the metadata image about the partitions on its disk: a replica the image does not
give it is deleted (its topic was deleted while the broker was away). An image from *another* cluster, a
controller quorum started afresh on empty volumes, gives it nothing, so without an identity every broker
that joined it would delete all its partitions. So the metadata log names its cluster, every data
directory's meta.properties records the name it was first used with, and a node whose disk names another
cluster refuses to start (kanal.broker.storage.cluster_identity has the node-side rules).

Who makes the id. The first active controller of a metadata log without one decides a
ClusterIdentityRecord (`decide_cluster_identity`): a random 32-hex-digit id from the controller's rng,
or the controllers' `--cluster-id` when one is given (a deliberate choice: recovering a lost quorum under
the old id, or tests that want a known id). A Raft-replicated record rather than a `kanal storage format`
step, because the deployments (kanal dev, the image, Kubernetes StatefulSets) start nodes on empty
volumes without a one-off job, and a quorum that must agree on one id already has the tool for it: the
log. Decisions are chained on the committed head (raft/command.py), so exactly one record ever applies;
apply refuses a second, different one.

A log written before cluster ids has none: its next active controller records one, and nodes whose
meta.properties has no cluster.id adopt the log's (kanal.broker.storage.cluster_identity: upgrades).
"""

from __future__ import annotations

import random
import re

from kanal.metadata.decision import Decision, Stamp
from kanal.metadata.image import MetadataImage
from kanal.v1 import metadata_pb2

_CLUSTER_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


def cluster_id_problem(cluster_id: str) -> str | None:
    """Why `cluster_id` is not a valid cluster id; None when it is."""
    if _CLUSTER_ID.match(cluster_id):
        return None
    return f"cluster id must be 1..64 of [A-Za-z0-9._-], got {cluster_id!r}"


def new_cluster_id(rng: random.Random) -> str:
    """A random cluster id: 32 hex digits (128 bits, as Kafka's uuid-based ids)."""
    return f"{rng.getrandbits(128):032x}"


def decide_cluster_identity(
    image: MetadataImage,
    *,
    configured: str,
    rng: random.Random,
    now_ms: int,
    principal: str,
    request_id: str,
) -> Decision[str]:
    """The cluster id after this decision: the image's when it has one (no records), else a new one.

    `configured`: the controllers' --cluster-id ("" for a random id). The reply is the id."""
    if image.cluster_id:
        return Decision([], image.cluster_id)
    cluster_id = configured or new_cluster_id(rng)
    problem = cluster_id_problem(cluster_id)
    if problem is not None:
        raise ValueError(problem)  # the configuration was validated at start: a caller bug
    record = Stamp(now_ms, principal, request_id).record(
        cluster_identity=metadata_pb2.ClusterIdentityRecord(cluster_id=cluster_id)
    )
    return Decision([record], cluster_id)
