"""Remote storage: the object store tiered storage keeps closed segments in (Kafka's KIP-405
RemoteStorageManager, reduced to what kanal needs), and the opener that picks a backend by URL.

| URL | backend |
|---|---|
| `file:///abs/dir` | `remote_file.py`: a directory (a single machine, `kanal dev`, tests) |
| `s3://bucket[/prefix]` | `remote_s3.py`: any S3-compatible store, through obstore (`kanal[s3]`) |

A backend is one module with one `open_<scheme>_storage(url, options)` function, named in `_BACKENDS`
(it parses the rest of the URL).

The interface holds objects, nothing more: keys are decided by the tiered layer above it (one key per
uploaded segment and leader epoch, under a per-cluster, per-topic prefix), and follow the key rules of
`remote_object.py`. Its guarantees, the same in every backend:

- `put_if_absent` never overwrites: of two puts under one key exactly one succeeds, the other raises
  `ObjectExists` and leaves the first one's bytes. An object is visible whole or not at all; a crash in
  the middle leaves at most a staging object (invisible to `list`, see `remote_object.py`).
- `get_range(key, start, end)` reads like `os.pread`: the bytes of [start, end) that exist, so fewer
  when the object ends first and none when `start` is at or past its end. A missing object raises
  `ObjectMissing` (an empty range included).
- `list(prefix)` yields every object whose key begins with `prefix`, in no particular order, lazily:
  a failure can surface while iterating.
- `delete(keys)` removes what exists; a key already missing is not an error.
- Every failure is a `RemoteStorageError` whose `retriable` says whether the same call may succeed
  later; nothing else escapes, except `ValueError` for a malformed key or range (a caller's bug).

Calls are synchronous and block (disk or network I/O, most of it outside the GIL): the broker runs them
on a thread pool, never on its event loop. A storage object may be used from several threads at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Protocol

from kanal.broker.storage import remote_file, remote_s3
from kanal.broker.storage.remote_object import (
    ObjectExists,
    ObjectInfo,
    ObjectMissing,
    RemoteStorageError,
    StorageOptions,
)
from kanal.v1.error import ErrorCode, KanalError

# The interface's whole vocabulary, importable from here (the backends import remote_object.py itself).
__all__ = ["ObjectExists", "ObjectInfo", "ObjectMissing", "RemoteStorage", "RemoteStorageError",
           "open_remote_storage"]


class RemoteStorage(Protocol):
    """An object store for closed segments; the module docstring has the rules every backend keeps."""

    @property
    def url(self) -> str:
        """Where the objects are, as a URL without credentials (for logs and registration)."""
        ...

    def put_if_absent(self, key: str, source: Path | bytes) -> int:
        """Store `source` (a file's whole contents, or bytes) under `key`; the bytes stored. ObjectExists
        when `key` holds an object already (nothing is written)."""
        ...

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """The bytes of [start, end) of the object, as `os.pread` would read them; ObjectMissing."""
        ...

    def head(self, key: str) -> ObjectInfo:
        """The object's size and modification time; ObjectMissing."""
        ...

    def list(self, prefix: str, *, include_staging: bool = False) -> Iterator[ObjectInfo]:
        """Every object whose key begins with `prefix` (staging objects too with `include_staging`)."""
        ...

    def delete(self, keys: Sequence[str]) -> None:
        """Remove the objects under `keys`; missing ones are fine."""
        ...


_BACKENDS: dict[str, Callable[[str, StorageOptions], RemoteStorage]] = {
    "file": remote_file.open_file_storage,
    "s3": remote_s3.open_s3_storage,
}


def open_remote_storage(url: str, *, endpoint: str = "", region: str = "", access_key_id: str = "",
                        secret_access_key: str = "") -> RemoteStorage:
    """The storage `url` names (`file:///abs/dir`, `s3://bucket/prefix`). The options are S3's: an endpoint
    for any S3-compatible store (`http://` allowed), the region, and credentials (without them the standard
    `AWS_*` variables are used). A URL or option that cannot work is INVALID_CONFIG, saying why."""
    options = StorageOptions(endpoint=endpoint, region=region, access_key_id=access_key_id,
                             secret_access_key=secret_access_key)
    scheme, colon, _ = url.partition(":")
    opener = _BACKENDS.get(scheme.lower()) if colon else None
    if opener is None:
        schemes = ", ".join(f"{scheme}://" for scheme in _BACKENDS)
        raise KanalError(ErrorCode.INVALID_CONFIG,
                         f"remote storage URL {url!r}: the scheme must be one of {schemes}")
    return opener(url, options)

