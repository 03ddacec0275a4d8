"""meta.properties: the identity of a data directory (a broker's or a controller's).

Layout: `<data_dir>/meta.properties`, UTF-8 text, one `key=value` per line, `#` lines are comments:

    # kanal data directory identity: written once, on the directory's first use. Never copy it.
    version=1
    node.id=3
    directory.id=6f1c0d3e9a8b4c52a1e07d2b5f3c9e41

- `version`: 1.
- `node.id`: the broker or controller id that made the directory (a directory is one node's).
- `directory.id`: 32 hex digits, random (uuid4), made when the file is first written.
- `cluster.id` (optional): the cluster the directory belongs to, as the controller quorum's metadata log
  names it (kanal.metadata.cluster_identity). Absent until the node first learned it (and in files
  written before cluster ids); then added once (`record_cluster_id`) and never changed. A node whose
  file names another cluster than the quorum's refuses to start (storage/cluster_identity.py).

Rules. The file is made on the first start with an empty (or new) directory; the only rewrite ever is
the one that adds `cluster.id`, which keeps the other keys as they were. A node
registers its directory id; the cluster records it (brokers: per ISR member; controllers: per voter), so
a node back on an empty or replaced disk shows up with a new id and is not trusted with what its old
disk held (see kanal.metadata election.py and raft/disk_identity.py). A directory whose file names
another node id is refused: it is some other node's disk.

Written atomically: a temporary file in the same directory, fsynced, renamed over the final name, then
the directory fsynced, so a crash leaves either no file or the whole file, never a torn one.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from pathlib import Path

from kanal.broker.storage.durable_files import TEMP_SUFFIX, write_file_atomically

FILE_NAME = "meta.properties"
VERSION = 1
_TEMP_SUFFIX = TEMP_SUFFIX
# The metadata log's rule for cluster ids (kanal.metadata.cluster_identity; storage does not import it).
_CLUSTER_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class MetaPropertiesError(Exception):
    """The data directory's meta.properties is unreadable, malformed or another node's; one line."""


@dataclass(frozen=True, slots=True)
class MetaProperties:
    node_id: int
    directory_id: str
    # True when this start made the file: the directory was empty (or new) until now.
    created: bool = False
    # The cluster the directory belongs to; "" until the node learned it (module docstring).
    cluster_id: str = ""

    def __repr__(self) -> str:
        cluster = f" cluster={self.cluster_id}" if self.cluster_id else ""
        return (f"<MetaProperties node={self.node_id} directory={self.directory_id}{cluster}"
                f"{' new' if self.created else ''}>")


def load_or_create(data_dir: Path | str, node_id: int) -> MetaProperties:
    """The directory's identity, made (with a new random directory id) when it has none yet."""
    directory = Path(data_dir)
    path = directory / FILE_NAME
    if path.exists():
        return read(path, node_id)
    directory.mkdir(parents=True, exist_ok=True)
    meta = MetaProperties(node_id, uuid.uuid4().hex, created=True)
    _write_atomically(path, _render(meta))
    return meta


def read(path: Path, node_id: int) -> MetaProperties:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise MetaPropertiesError(f"cannot read {path}: {exc}") from exc
    values: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise MetaPropertiesError(f"{path}: line {line!r} is not key=value")
        values[key.strip()] = value.strip()
    if values.get("version") != str(VERSION):
        raise MetaPropertiesError(f"{path}: version {values.get('version')!r} is not {VERSION}")
    directory_id = values.get("directory.id", "")
    if len(directory_id) != 32 or any(c not in "0123456789abcdef" for c in directory_id):
        raise MetaPropertiesError(f"{path}: directory.id {directory_id!r} is not 32 hex digits")
    recorded = values.get("node.id", "")
    if recorded != str(node_id):
        raise MetaPropertiesError(f"{path} belongs to node {recorded or '?'}, not {node_id}: "
                                  "this data directory is another node's")
    cluster_id = values.get("cluster.id", "")
    if cluster_id and not _CLUSTER_ID.match(cluster_id):
        raise MetaPropertiesError(f"{path}: cluster.id {cluster_id!r} is not 1..64 of [A-Za-z0-9._-]")
    return MetaProperties(node_id, directory_id, cluster_id=cluster_id)


def record_cluster_id(data_dir: Path | str, meta: MetaProperties, cluster_id: str) -> MetaProperties:
    """Add `cluster.id` to a file that has none (the one rewrite there is); ValueError when it has one."""
    if meta.cluster_id:
        raise ValueError(f"meta.properties names cluster {meta.cluster_id} already; it is never changed")
    if not _CLUSTER_ID.match(cluster_id):
        raise ValueError(f"not a cluster id: {cluster_id!r}")
    recorded = MetaProperties(meta.node_id, meta.directory_id, cluster_id=cluster_id)
    _write_atomically(Path(data_dir) / FILE_NAME, _render(recorded))
    return recorded


def _render(meta: MetaProperties) -> str:
    cluster = f"cluster.id={meta.cluster_id}\n" if meta.cluster_id else ""
    return ("# kanal data directory identity: written once, on the directory's first use. Never copy it.\n"
            f"version={VERSION}\nnode.id={meta.node_id}\ndirectory.id={meta.directory_id}\n{cluster}")


def _write_atomically(path: Path, text: str) -> None:
    write_file_atomically(path, text.encode("utf-8"))
