"""The object keys of tiered storage's remote segments (issue 44), shared by the broker's uploads and
fetches and by readers outside the broker (the Spark `kanal-log` source, `kanal dump-log`).

    <cluster id>/<topic id>/<partition>/<base offset:020d>-<end offset:020d>-e<leader epoch>.log|.meta

The cluster id keeps clusters that share a bucket apart; the topic id (never reused) keeps a recreated
topic's objects apart from the deleted one's; the uploader's leader epoch makes two leaders' uploads of the
same offsets two objects. The base offset is the first offset in the object, the end offset the one after
its last (exclusive).
"""

from __future__ import annotations

import re

# A segment object's name: the last part of its key.
_OBJECT_NAME = re.compile(r"^(?P<base>\d{20})-(?P<end>\d{20})-e(?P<epoch>\d+)\.(?P<kind>log|meta)$")


def segment_keys(cluster_id: str, topic_id: str, partition: int, base_offset: int, end_offset: int,
                 leader_epoch: int) -> tuple[str, str]:
    """The keys of a remote segment's data and metadata objects (module docstring)."""
    stem = f"{cluster_id}/{topic_id}/{partition}/{base_offset:020d}-{end_offset:020d}-e{leader_epoch}"
    return f"{stem}.log", f"{stem}.meta"


def partition_prefix(cluster_id: str, topic_id: str, partition: int | None = None) -> str:
    """The key prefix of a topic's objects, or of one partition's."""
    return f"{cluster_id}/{topic_id}/" + ("" if partition is None else f"{partition}/")


def parse_object_name(name: str) -> tuple[int, int, int, str] | None:
    """(base offset, end offset, leader epoch, "log" or "meta") of a segment object's name (the key's
    last part); None when it is not one."""
    m = _OBJECT_NAME.match(name)
    return (int(m["base"]), int(m["end"]), int(m["epoch"]), m["kind"]) if m else None
