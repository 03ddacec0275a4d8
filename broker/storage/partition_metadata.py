"""The `partition.metadata` file: which topic incarnation a partition directory belongs to (KIP-516).

Directories are named `<topic>-<partition>`, and a topic deleted and recreated under the same name gets
the same directory name but a new topic id. Leader epochs restart at 0 in the new topic, so divergence
detection cannot tell an old log from a new one: only the id can. Every partition directory a kanal
broker creates therefore records its topic id, before any log file is written in it.

Format (text, UTF-8, two lines, each ending in a newline; Kafka's `partition.metadata` has the same shape):

    version: 0
    topic_id: <the topic id as the metadata image spells it, a UUID>

Written atomically: `partition.metadata.tmp` is written and fsynced, renamed over `partition.metadata`,
and the directory is fsynced, so a crash leaves the old file, the new one, or no file and a stray
`.tmp` (which `Log.open` removes with its other `*.tmp` files). A file that does not parse (damage, a
newer version) raises STORAGE_ERROR: the directory's owner cannot be proven, so it is neither adopted
nor deleted.

The rule for a directory found where the image wants a replica of topic id T (`judge_directory`, pure):

- no directory: NEW; it is created and the file written first;
- a file recording T: ADOPT;
- a file recording another id: STRAY; the directory belongs to an earlier incarnation of the name (the
  topic was deleted and recreated while this broker was away, or before it saw the deletion). It is
  never adopted: it is removed (`remove_directory`) and a fresh, empty replica is created, which
  replicates the new topic from its leader;
- a directory without the file: UPGRADE; it was written by a kanal from before topic ids were recorded
  (or this broker crashed between creating the directory and writing the file, leaving it empty). It
  adopts T once and records it. This is the one case the id cannot guard: an old broker's directory of
  a topic that was also recreated while it was down is adopted, as Kafka does on upgrade.

Removal (a deleted topic's replica, a stray) renames the directory to `<name>.<tag>-delete` or
`<name>.<tag>-stray` first (an atomic step after which it is no longer a replica directory under any
name, even if the deletion of its files is interrupted), fsyncs the parent, then deletes it.
`sweep_removed` deletes such leftovers at start.
"""

from __future__ import annotations

import enum
import logging
import os
import shutil
import uuid
from pathlib import Path

from kanal.broker.storage.durable_files import fsync_directory, write_file_atomically
from kanal.v1.error import ErrorCode, KanalError

log = logging.getLogger(__name__)

PARTITION_METADATA_FILE = "partition.metadata"
_VERSION = 0
# Suffixes of a directory being removed; a partition directory always ends in `-<digits>`, so these
# never match one.
DELETE_SUFFIX = "-delete"
STRAY_SUFFIX = "-stray"
_FILE_BYTES_MAX = 4096  # the file is two short lines; anything larger is not ours


class DirectoryVerdict(enum.Enum):
    NEW = "new"  # no directory yet: create it, recording the id
    ADOPT = "adopt"  # the directory records this topic id
    UPGRADE = "upgrade"  # no file (an older kanal): adopt the image's id once
    STRAY = "stray"  # another topic id: never adopted, removed


def judge_directory(exists: bool, recorded_topic_id: str | None, topic_id: str) -> DirectoryVerdict:
    """What to do with the directory where the image wants a replica of `topic_id` (module docstring)."""
    if not topic_id:
        raise ValueError("a replica's topic id must not be empty")
    if not exists:
        return DirectoryVerdict.NEW
    if recorded_topic_id is None:
        return DirectoryVerdict.UPGRADE
    if recorded_topic_id == topic_id:
        return DirectoryVerdict.ADOPT
    return DirectoryVerdict.STRAY


def read_topic_id(directory: Path) -> str | None:
    """The topic id `directory` records; None when it has no `partition.metadata` file. STORAGE_ERROR
    when the file exists but does not parse."""
    path = directory / PARTITION_METADATA_FILE
    try:
        with open(path, "rb") as f:
            raw = f.read(_FILE_BYTES_MAX + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise KanalError(ErrorCode.STORAGE_ERROR, f"cannot read {path}: {exc}") from None
    fields: dict[str, str] = {}
    try:
        if len(raw) > _FILE_BYTES_MAX:
            raise ValueError(f"over {_FILE_BYTES_MAX} bytes")
        for line in raw.decode("utf-8").splitlines():
            key, sep, value = line.partition(":")
            if not sep:
                raise ValueError(f"line {line!r} is not 'key: value'")
            fields[key.strip()] = value.strip()
        if fields.get("version") != str(_VERSION):
            raise ValueError(f"version {fields.get('version')!r} is not {_VERSION}")
        topic_id = fields.get("topic_id", "")
        if not topic_id:
            raise ValueError("no topic_id")
    except (UnicodeDecodeError, ValueError) as exc:
        raise KanalError(ErrorCode.STORAGE_ERROR, f"{path} is damaged or of another version: {exc}") from None
    return topic_id


def write_topic_id(directory: Path, topic_id: str) -> None:
    """Record `topic_id` in `directory` (created if missing), atomically and durably."""
    if not topic_id or "\n" in topic_id or ":" in topic_id:
        raise ValueError(f"topic id {topic_id!r} cannot be recorded")
    directory.mkdir(parents=True, exist_ok=True)
    write_file_atomically(directory / PARTITION_METADATA_FILE,
                          f"version: {_VERSION}\ntopic_id: {topic_id}\n".encode())


def remove_directory(directory: Path, suffix: str) -> Path:
    """Rename `directory` out of the way (`<name>.<random>` + `suffix`, DELETE_SUFFIX or STRAY_SUFFIX),
    fsync the parent, then delete it. Returns the name it had while being deleted."""
    if suffix not in (DELETE_SUFFIX, STRAY_SUFFIX):
        raise ValueError(f"unknown removal suffix {suffix!r}")
    target = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}{suffix}")
    try:
        os.rename(directory, target)
    except FileNotFoundError:
        return target
    fsync_directory(directory.parent)
    shutil.rmtree(target, ignore_errors=True)
    return target


def sweep_removed(data_dir: Path) -> list[Path]:
    """Delete directories a removal left half-deleted (a crash between rename and delete)."""
    swept: list[Path] = []
    if not data_dir.is_dir():
        return swept
    for child in data_dir.iterdir():
        if child.is_dir() and (child.name.endswith(DELETE_SUFFIX) or child.name.endswith(STRAY_SUFFIX)):
            shutil.rmtree(child, ignore_errors=True)
            swept.append(child)
    return swept


def replica_directories(data_dir: Path) -> dict[tuple[str, int], Path]:
    """The partition directories under `data_dir` that a kanal broker wrote (they hold the file), by
    (topic, partition). Directories without the file are left to the per-replica UPGRADE rule: nothing
    proves they are replicas, so nothing here removes them."""
    found: dict[tuple[str, int], Path] = {}
    if not data_dir.is_dir():
        return found
    for child in data_dir.iterdir():
        topic, sep, number = child.name.rpartition("-")
        if not sep or not topic or not number.isdigit() or not child.is_dir():
            continue
        if (child / PARTITION_METADATA_FILE).exists():
            found[(topic, int(number))] = child
    return found
