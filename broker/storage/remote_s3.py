"""`s3://bucket[/prefix]` remote storage: objects in an S3 bucket, through obstore (Rust's object_store;
its calls run outside the GIL). obstore is optional: `pip install 'kanal[s3]'`, imported when a storage
is opened (MISSING_DEPENDENCY without it).

The object under key `k` is `<prefix>/k` in the bucket. The options: `endpoint` for any S3-compatible
store (`http://` is allowed, path-style requests), `region`, and credentials; without credentials,
obstore reads the standard `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN` (and
`AWS_REGION`, `AWS_ENDPOINT`) variables, then the instance and container credential providers.

`put_if_absent`:
- up to `multipart_bytes_min` (32 MiB): one PUT with `If-None-Match: *` (obstore's `mode="create"`; with
  obstore 0.12 it needs no `conditional_put` setting). The store answers 412 when the key exists:
  ObjectExists. obstore reads a Path itself, but holds the whole body in memory (a conditional put is
  never multipart), hence the bound.
- larger files: a multipart upload (`PART_BYTES` parts, `PARTS_IN_FLIGHT_MAX` at once) to a staging key
  (`remote_object.py`), then a server-side copy to the key that completes only if the key is absent
  (object_store's `copy_if_not_exists="multipart"`: UploadPartCopy, then CompleteMultipartUpload with
  `If-None-Match: *`; AWS S3 and moto support it), then the staging object is deleted. A crash in
  between leaves the staging object, which `list` hides and an orphan sweep removes.
A store that ignores `If-None-Match` overwrites instead of refusing; kanal's keys are per segment and
leader epoch, so such an overwrite writes the same bytes.

`get_range` past the object's end: S3 returns the bytes that exist, and 416 when `start` is at or past
the end, which is read as no bytes (the interface's `os.pread` rule). An empty range is a HEAD.

Failures: obstore retries 5xx answers, refused and dropped connections and timeouts itself
(`RETRIES_MAX` times within `RETRY_TIMEOUT`), then raises; those are retriable RemoteStorageErrors and
the caller's own backoff takes over. 412 is ObjectExists, 404 ObjectMissing (a missing bucket is
not: that one is a non-retriable error naming the bucket; only a HEAD's 404, which has no body to tell,
reads as a missing object), 403 and other 4xx answers are not retriable.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import SplitResult, urlsplit

from kanal.broker.storage.remote_object import (
    STAGING_SUFFIX,
    ObjectExists,
    ObjectInfo,
    ObjectMissing,
    RemoteStorageError,
    StorageOptions,
    check_key,
    check_prefix,
    check_range,
    invalid_config,
    split_url,
    staging_key,
)
from kanal.v1.error import ErrorCode, KanalError

if TYPE_CHECKING:
    from obstore.store import ClientConfig, RetryConfig, S3Config, S3Store

MULTIPART_BYTES_MIN = 32 * 1024 * 1024  # a file at least this large goes multipart (staged); less is one PUT
PART_BYTES = 8 * 1024 * 1024  # S3 wants parts of at least 5 MiB (all but the last)
PARTS_IN_FLIGHT_MAX = 4  # so a multipart upload holds at most 32 MiB in memory
RETRIES_MAX = 3
RETRY_TIMEOUT = timedelta(seconds=10)
BACKOFF_FIRST = timedelta(milliseconds=100)
BACKOFF_MAX = timedelta(seconds=2)
CONNECT_TIMEOUT = timedelta(seconds=5)
REQUEST_TIMEOUT = timedelta(seconds=60)  # one request: a PUT of up to MULTIPART_BYTES_MIN, one part, one GET
_INSTALL_HINT = "pip install 'kanal[s3]'"
# An S3 bucket name (AWS's rules, minus the rarely used dots-and-IP-address corner cases).
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
# How object_store words an HTTP answer in its errors (it exposes no status code).
_STATUS = re.compile(r"non-2xx status code: (\d{3})")
_RETRIABLE_STATUSES = frozenset({408, 429})  # and every 5xx
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def open_s3_storage(text: str, options: StorageOptions, *,
                    multipart_bytes_min: int = MULTIPART_BYTES_MIN) -> S3RemoteStorage:
    """The storage of an `s3://bucket[/prefix]` URL. INVALID_CONFIG for a malformed URL, endpoint or half
    a credential; MISSING_DEPENDENCY without obstore. Nothing is sent to the store here."""
    url = split_url(text)
    bucket = url.netloc
    if "@" in bucket:
        raise invalid_config(_redacted(url), "credentials do not belong in the URL (use the access key "
                                             "options or the AWS_* variables)")
    if not _BUCKET.fullmatch(bucket):
        raise invalid_config(text, f"{bucket!r} is not an S3 bucket name (3-63 of a-z, 0-9, '.', '-'): "
                                   f"s3://bucket/prefix")
    if url.query or url.fragment:
        raise invalid_config(text, "no query or fragment")
    prefix = url.path.strip("/")
    if prefix:
        try:
            check_key(prefix)
        except ValueError as exc:
            raise invalid_config(text, f"the prefix: {exc}") from None
    if bool(options.access_key_id) != bool(options.secret_access_key):
        raise invalid_config(text, "give both the access key id and the secret access key, or neither (then "
                                   "the AWS_* variables are used)")
    if options.endpoint:
        _check_endpoint(options.endpoint)
    if multipart_bytes_min < PART_BYTES:
        raise ValueError(f"multipart_bytes_min {multipart_bytes_min} is below one part ({PART_BYTES})")
    try:
        import obstore  # noqa: F401  (the one place its absence is reported)
    except ModuleNotFoundError:
        raise KanalError(ErrorCode.MISSING_DEPENDENCY,
                         f"remote storage {text!r} needs the obstore package: {_INSTALL_HINT}") from None
    return S3RemoteStorage(bucket, prefix, options, multipart_bytes_min)


class S3RemoteStorage:
    """Objects in `bucket` under `prefix` (the module docstring has the put protocol and error rules)."""

    def __init__(self, bucket: str, prefix: str, options: StorageOptions, multipart_bytes_min: int) -> None:
        from obstore.exceptions import BaseError
        from obstore.store import S3Store

        # What obstore raises (a 404 comes as the builtin FileNotFoundError): translated at this boundary;
        # anything else (a bug) goes up as it is.
        self._errors: tuple[type[Exception], ...] = (BaseError, FileNotFoundError)
        self._bucket = bucket
        self._prefix = prefix
        self._endpoint = options.endpoint
        self._multipart_bytes_min = multipart_bytes_min
        config: S3Config = {"copy_if_not_exists": "multipart"}
        if options.region:
            config["region"] = options.region
        if options.endpoint:
            config["endpoint"] = options.endpoint
        if options.access_key_id:
            config["access_key_id"] = options.access_key_id
            config["secret_access_key"] = options.secret_access_key
        client: ClientConfig = {"allow_http": options.endpoint.startswith("http://"),
                                "connect_timeout": CONNECT_TIMEOUT, "timeout": REQUEST_TIMEOUT}
        retry: RetryConfig = {"max_retries": RETRIES_MAX, "retry_timeout": RETRY_TIMEOUT,
                              "backoff": {"init_backoff": BACKOFF_FIRST, "max_backoff": BACKOFF_MAX}}
        try:
            self._store: S3Store = S3Store(bucket, prefix=prefix or None, config=config,
                                           client_options=client, retry_config=retry)
        except BaseError as exc:  # a configuration obstore refuses (an AWS_* variable it cannot parse)
            raise invalid_config(self.url, _first_line(exc)) from None

    def __repr__(self) -> str:
        return f"<S3RemoteStorage {self.url} endpoint={self._endpoint or 'AWS'}>"

    @property
    def url(self) -> str:
        return f"s3://{self._bucket}/{self._prefix}" if self._prefix else f"s3://{self._bucket}"

    def put_if_absent(self, key: str, source: Path | bytes) -> int:
        import obstore

        check_key(key)
        size = os.stat(source).st_size if isinstance(source, Path) else len(source)
        if isinstance(source, Path) and size >= self._multipart_bytes_min:
            return self._put_staged(key, source, size)
        try:
            obstore.put(self._store, key, source, mode="create", use_multipart=False)
        except self._errors as exc:
            raise self._failure(exc, key, "storing", absent_means_bucket=True) from None
        return size

    def get_range(self, key: str, start: int, end: int) -> bytes:
        import obstore

        check_range(start, end)
        check_key(key)
        if start == end:
            self.head(key)  # ObjectMissing for a missing object, as a read would
            return b""
        try:
            return bytes(obstore.get_range(self._store, key, start=start, end=end))
        except self._errors as exc:
            if _status(exc) == 416:  # the object exists, and ends at or before start
                return b""
            raise self._failure(exc, key, "reading") from None

    def head(self, key: str) -> ObjectInfo:
        import obstore

        check_key(key)
        try:
            meta = obstore.head(self._store, key)
        except self._errors as exc:
            raise self._failure(exc, key, "reading the size of") from None
        return ObjectInfo(key, meta["size"], _millis(meta["last_modified"]))

    def list(self, prefix: str, *, include_staging: bool = False) -> Iterator[ObjectInfo]:
        check_prefix(prefix)
        return self._list(prefix, include_staging)

    def delete(self, keys: Sequence[str]) -> None:
        import obstore

        paths = [check_key(key, staging=True) for key in keys]
        if not paths:
            return
        try:
            obstore.delete(self._store, paths)  # DeleteObjects, up to 1000 keys a request
        except self._errors as exc:
            raise self._failure(exc, paths[0], "deleting") from None

    def _put_staged(self, key: str, source: Path, size: int) -> int:
        import obstore

        staging = staging_key(key)
        try:
            try:
                obstore.put(self._store, staging, source, use_multipart=True, chunk_size=PART_BYTES,
                            max_concurrency=PARTS_IN_FLIGHT_MAX)
            except self._errors as exc:
                raise self._failure(exc, staging, "staging", absent_means_bucket=True) from None
            try:
                obstore.copy(self._store, staging, key, overwrite=False)
            except self._errors as exc:
                failure = self._failure(exc, key, "copying the staged object to")
                if isinstance(failure, ObjectMissing):  # the staging object went (a sweep): try again
                    failure = RemoteStorageError(f"copying {staging!r} to {key!r} in {self.url}: the staged "
                                                 f"object is gone", retriable=True)
                raise failure from None
        finally:
            try:
                self.delete([staging])
            except RemoteStorageError:
                pass  # left for the orphan sweep (it lists staging objects)
        return size

    def _list(self, prefix: str, include_staging: bool) -> Iterator[ObjectInfo]:
        import obstore

        # object_store lists by whole path parts: ask for the prefix's directory, keep what matches.
        directory = prefix.rpartition("/")[0]
        try:
            for batch in obstore.list(self._store, directory or None):
                for meta in batch:
                    key = meta["path"]
                    if key.startswith(prefix) and (include_staging or not key.endswith(STAGING_SUFFIX)):
                        yield ObjectInfo(key, meta["size"], _millis(meta["last_modified"]))
        except self._errors as exc:
            raise self._failure(exc, prefix, "listing") from None

    def _failure(self, exc: Exception, key: str, doing: str, *,
                 absent_means_bucket: bool = False) -> RemoteStorageError:
        """The RemoteStorageError for one of obstore's exceptions (the module docstring has the rules)."""
        from obstore.exceptions import (
            AlreadyExistsError,
            GenericError,
            NotFoundError,
            PreconditionError,
        )

        where = f"{self.url} ({self._endpoint or 'AWS'})"
        text = _first_line(exc)
        if "NoSuchBucket" in str(exc) or (absent_means_bucket and isinstance(exc, (NotFoundError,
                                                                                     FileNotFoundError))):
            return RemoteStorageError(f"{doing} {key!r}: bucket {self._bucket!r} does not exist at {where}",
                                      retriable=False)
        if isinstance(exc, (AlreadyExistsError, PreconditionError)):
            return ObjectExists(key, where)
        if isinstance(exc, (NotFoundError, FileNotFoundError)):
            return ObjectMissing(key, where)
        status = _status(exc)
        if status is not None:
            retriable = status >= 500 or status in _RETRIABLE_STATUSES
        else:  # no HTTP answer: refused, dropped, timed out (GenericError), or a configuration error
            retriable = isinstance(exc, GenericError)
        return RemoteStorageError(f"{doing} {key!r} in {where}: {text}", retriable=retriable)


def _check_endpoint(endpoint: str) -> None:
    """An endpoint obstore can use: http(s)://host[:port][/] and nothing else (obstore panics, at the first
    request, on some malformed ones)."""
    parts = urlsplit(endpoint)
    try:
        port_ok = parts.port is None or 0 < parts.port
    except ValueError:
        port_ok = False
    if (parts.scheme not in ("http", "https") or not parts.hostname or not port_ok or parts.username
            or parts.password or parts.path not in ("", "/") or parts.query or parts.fragment
            or any(c.isspace() for c in endpoint)):
        shown = endpoint if not (parts.username or parts.password) else "(an endpoint with credentials)"
        raise KanalError(ErrorCode.INVALID_CONFIG, f"remote storage endpoint {shown!r}: expected "
                                                   f"http://host[:port] or https://host[:port]")


def _status(exc: BaseException) -> int | None:
    match = _STATUS.search(str(exc))
    return int(match.group(1)) if match else None


def _first_line(exc: BaseException) -> str:
    """obstore's message without its multi-line debug dump."""
    return str(exc).split("\n", 1)[0].strip()


def _millis(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(milliseconds=1)


def _redacted(url: SplitResult) -> str:
    return url._replace(netloc=url.netloc.rpartition("@")[2]).geturl()
