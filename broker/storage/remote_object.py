"""What every remote-storage backend shares: the key rules, `ObjectInfo`, and the errors.

The interface itself and the opener are in `remote_storage.py`; the backends (`remote_file.py`,
`remote_s3.py`) import this module, not that one, so no import goes in a circle.

Keys: `/`-separated parts of `[A-Za-z0-9._=-]`, none empty, `.` or `..`, at most `KEY_BYTES_MAX` bytes
in all, never ending in `STAGING_SUFFIX`. The same key names the same object in every backend (a file
path under the root directory, an S3 key under the bucket's prefix), so the tiered layer above builds
one key for all of them.

Staging: a backend that cannot create an object in one atomic step writes it under a staging name,
`<key>.<16 hex digits>.tmp` beside the key, and then moves or copies it to the key without overwriting.
A crash between the two steps leaves the staging object behind and nothing under the key. `list`
leaves staging objects out unless asked (`include_staging=True`, for an orphan sweep that deletes the
old ones; `delete` takes their keys).
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field
from urllib.parse import SplitResult, urlsplit

from kanal.v1.error import ErrorCode, KanalError

STAGING_SUFFIX = ".tmp"
KEY_BYTES_MAX = 900  # S3 allows 1024 bytes for the whole key: this leaves room for the store's prefix
_KEY_PART = re.compile(r"[A-Za-z0-9._=-]+")
_STAGING_NAME = re.compile(r"\.[0-9a-f]{16}" + re.escape(STAGING_SUFFIX) + "$")


@dataclass(frozen=True)
class ObjectInfo:
    """One stored object as a listing or a HEAD sees it."""

    key: str  # relative to the storage's root (the directory, the bucket's prefix)
    size: int  # bytes
    last_modified_ms: int  # wall-clock milliseconds since the epoch, as the store recorded it


@dataclass(frozen=True)
class StorageOptions:
    """The options beside a remote storage URL (empty: not given). Only S3 takes them; `repr` leaves
    the secret out."""

    endpoint: str = ""  # the S3 API's base URL, for a store other than AWS (`http://` allowed)
    region: str = ""
    access_key_id: str = ""
    secret_access_key: str = field(default="", repr=False)

    def given(self) -> list[str]:
        """The names of the options that were given, for a backend that takes none."""
        return [name for name in ("endpoint", "region", "access_key_id", "secret_access_key")
                if getattr(self, name)]


class RemoteStorageError(Exception):
    """A remote-storage call failed. `retriable`: the same call may succeed later unchanged (a 5xx, a
    timeout, a refused connection, a full disk); otherwise retrying cannot help (permission denied, a
    missing bucket, the subclasses below)."""

    def __init__(self, message: str, *, retriable: bool) -> None:
        super().__init__(message)
        self.message = message
        self.retriable = retriable


class ObjectExists(RemoteStorageError):
    """`put_if_absent` found an object under the key already: nothing was written."""

    def __init__(self, key: str, where: str) -> None:
        super().__init__(f"object {key!r} already exists in {where}", retriable=False)
        self.key = key


class ObjectMissing(RemoteStorageError):
    """No object under the key."""

    def __init__(self, key: str, where: str) -> None:
        super().__init__(f"no object {key!r} in {where}", retriable=False)
        self.key = key


def invalid_config(url: str, why: str) -> KanalError:
    """The INVALID_CONFIG error for a remote storage URL or option that cannot work."""
    return KanalError(ErrorCode.INVALID_CONFIG, f"remote storage {url!r}: {why}")


def split_url(url: str) -> SplitResult:
    """`url`'s parts (INVALID_CONFIG when it does not parse: an unbalanced `[`, say)."""
    try:
        return urlsplit(url)
    except ValueError as exc:
        raise invalid_config(url, str(exc)) from None


def check_key(key: str, *, staging: bool = False) -> str:
    """`key` if it follows the key rules (with `staging`, a staging object's key is accepted too);
    otherwise ValueError: keys come from kanal's own code, so a bad one is a bug, never data."""
    if not isinstance(key, str) or not key:
        raise ValueError(f"a remote storage key must be a non-empty string, not {key!r}")
    if len(key.encode()) > KEY_BYTES_MAX:
        raise ValueError(f"remote storage key longer than {KEY_BYTES_MAX} bytes: {key[:80]!r}...")
    for part in key.split("/"):
        if part in ("", ".", "..") or not _KEY_PART.fullmatch(part):
            raise ValueError(f"remote storage key {key!r}: parts are [A-Za-z0-9._=-]+, not empty, '.' or "
                             f"'..' (no leading, trailing or doubled '/')")
    if key.endswith(STAGING_SUFFIX) and not (staging and is_staging_key(key)):
        raise ValueError(f"remote storage key {key!r} ends in {STAGING_SUFFIX!r}, kept for staging objects")
    return key


def check_prefix(prefix: str) -> str:
    """`prefix` if it can begin a key: empty, or key parts with an optional trailing `/` (ValueError
    otherwise). `list(prefix)` matches the keys that begin with it, character by character, as S3 does:
    `a/b` matches `a/b.log` and `a/b/c.log`, `a/b/` only the second."""
    if prefix:
        check_key(prefix.removesuffix("/"), staging=True)
    return prefix


def is_staging_key(key: str) -> bool:
    """Whether `key` names a staging object (`<key>.<16 hex digits>.tmp`)."""
    return _STAGING_NAME.search(key) is not None


def staging_key(key: str) -> str:
    """A fresh staging name for an object about to be written under `key`."""
    return f"{key}.{secrets.token_hex(8)}{STAGING_SUFFIX}"


def check_range(start: int, end: int) -> None:
    """A byte range [start, end) must have 0 <= start <= end (ValueError otherwise: a caller's bug)."""
    if not 0 <= start <= end:
        raise ValueError(f"bad byte range [{start}, {end}): needs 0 <= start <= end")
