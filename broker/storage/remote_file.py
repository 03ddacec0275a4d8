"""`file:///abs/dir` remote storage: objects as files under one directory (a single machine, `kanal dev
--remote-storage`, tests; a shared mount works too if it supports hard links).

Layout: the object under key `a/b/c.log` is the file `<root>/a/b/c.log`. Parent directories are made as
needed (each new one fsynced into its parent) and never removed, so a put never races a removal. Unlike S3,
a key cannot also be a directory of longer keys (`a` beside `a/b`): the second put fails, not retriable
(kanal's keys never nest so).
`<name>.<16 hex digits>.tmp` files are staging files (`remote_object.py`); any other name that is not a
valid key (a file someone put there) is left out of listings.

`put_if_absent`, step by step, with what a crash after each step leaves:

1. the bytes go to a new staging file beside the final name (`O_EXCL`), from bytes with `os.write`, from
   a file with `os.copy_file_range` (`os.sendfile`, then plain reads and writes, where a kernel or
   filesystem refuses it), all outside the GIL; the file is fsynced. Crash: a staging file, no object.
2. `os.link(staging, final)`: atomic, and it fails with EEXIST when the name exists, so it never
   overwrites (a rename would). The object is whole from this moment: its bytes were synced in 1.
3. the directory is fsynced: the new name survives a power cut.
4. the staging name is unlinked. Crash before: two names of one inode, the staging one hidden from
   `list`; an orphan sweep removes it.

Reads use `os.pread` on a fresh descriptor (no shared file position, so threads never interfere).
An `OSError` becomes a RemoteStorageError, retriable unless its errno says retrying cannot help
(`_PERMANENT_ERRNOS`: permissions, a read-only filesystem, hard links unsupported, a name too long).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from urllib.parse import quote, unquote

from kanal.broker.storage.durable_files import fsync_directory
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

_PERMANENT_ERRNOS = frozenset({errno.EEXIST, errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR,
                               errno.EISDIR, errno.ENAMETOOLONG, errno.EINVAL, errno.EOPNOTSUPP,
                               errno.ENOTSUP, errno.EXDEV, errno.ELOOP, errno.EMLINK})
# Errnos after which the next, more portable copy method is tried (no bytes have moved: the kernel checks
# its support before copying).
_UNSUPPORTED_COPY_ERRNOS = frozenset({errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP,
                                      errno.ENOTSUP})
_COPY_CALL_BYTES_MAX = 1 << 30  # one copy_file_range / sendfile call; the loop does the rest
_READ_CALL_BYTES_MAX = 1 << 30  # one pread (Linux moves at most ~2 GiB per call anyway)
_FALLBACK_CHUNK_BYTES = 1 << 20  # the plain read/write copy's buffer


def open_file_storage(text: str, options: StorageOptions) -> FileRemoteStorage:
    """The storage of a `file:///abs/dir` URL; the directory is created when missing. INVALID_CONFIG for
    a URL that names no absolute local directory, or S3's options."""
    url = split_url(text)
    if options.given():
        raise invalid_config(text, f"{', '.join(options.given())} apply to s3:// storage only")
    if url.netloc not in ("", "localhost") or url.query or url.fragment or not url.path.startswith("/"):
        raise invalid_config(text, "a file URL is file:///absolute/dir (three slashes, no host, query or "
                                   "fragment)")
    root = Path(unquote(url.path))
    if ".." in root.parts:
        raise invalid_config(text, "the path may not contain '..'")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise invalid_config(text, f"cannot use {root} as a directory: {exc.strerror or exc}") from None
    return FileRemoteStorage(root)


class FileRemoteStorage:
    """Objects as files under `root` (the module docstring has the layout and the put protocol)."""

    def __init__(self, root: Path) -> None:
        self._root = Path(root)

    def __repr__(self) -> str:
        return f"<FileRemoteStorage {self.url}>"

    @property
    def url(self) -> str:
        return "file://" + quote(str(self._root))

    def put_if_absent(self, key: str, source: Path | bytes) -> int:
        final = self._path(check_key(key))
        if os.path.lexists(final):  # cheap early answer; the link below is what guarantees it
            raise ObjectExists(key, self.url)
        # Opened first: a source that cannot be read is the caller's error (an OSError), not the storage's.
        content: bytes | int
        if isinstance(source, Path):
            source_file = open(source, "rb")  # noqa: SIM115  (closed below, after the copy)
            content = source_file.fileno()
        else:
            source_file, content = None, source
        staging = final.with_name(staging_key(final.name))
        try:
            self._make_parents(final.parent)
            stored = _write_synced(staging, content)
            try:
                os.link(staging, final)
            except FileExistsError:
                raise ObjectExists(key, self.url) from None
            fsync_directory(final.parent)
        except OSError as exc:
            raise _failure(exc, f"storing {key!r} in {self.url}") from exc
        finally:
            if source_file is not None:
                source_file.close()
            try:
                os.unlink(staging)
            except OSError:
                pass  # never created (FileNotFoundError), or left for the orphan sweep
        return stored

    def get_range(self, key: str, start: int, end: int) -> bytes:
        check_range(start, end)
        path = self._path(check_key(key))
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            raise ObjectMissing(key, self.url) from None
        except OSError as exc:
            raise _failure(exc, f"opening {key!r} in {self.url}") from exc
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # a directory of longer keys, not an object
                raise ObjectMissing(key, self.url)
            chunks = []
            position = start
            while position < end:
                chunk = os.pread(fd, min(end - position, _READ_CALL_BYTES_MAX), position)
                if not chunk:
                    break
                chunks.append(chunk)
                position += len(chunk)
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)
        except OSError as exc:
            raise _failure(exc, f"reading {key!r} in {self.url}") from exc
        finally:
            os.close(fd)

    def head(self, key: str) -> ObjectInfo:
        try:
            st = os.stat(self._path(check_key(key)))
        except (FileNotFoundError, NotADirectoryError):
            raise ObjectMissing(key, self.url) from None
        except OSError as exc:
            raise _failure(exc, f"reading the size of {key!r} in {self.url}") from exc
        if not stat.S_ISREG(st.st_mode):
            raise ObjectMissing(key, self.url)
        return ObjectInfo(key, st.st_size, st.st_mtime_ns // 1_000_000)

    def list(self, prefix: str, *, include_staging: bool = False) -> Iterator[ObjectInfo]:
        check_prefix(prefix)
        directory = prefix.rpartition("/")[0]
        return self._walk(self._root / directory if directory else self._root,
                          directory + "/" if directory else "", prefix, include_staging)

    def delete(self, keys: Sequence[str]) -> None:
        directories = set()
        for key in keys:
            path = self._path(check_key(key, staging=True))
            try:
                os.unlink(path)
            except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
                continue  # no object under the key (a directory of longer keys is none either)
            except OSError as exc:
                raise _failure(exc, f"deleting {key!r} in {self.url}") from exc
            directories.add(path.parent)
        try:
            for directory in directories:  # the removals survive a power cut once delete returns
                fsync_directory(directory)
        except OSError as exc:
            raise _failure(exc, f"syncing deletions in {self.url}") from exc

    def _path(self, key: str) -> Path:
        # check_key refused '..', '.', empty parts and a leading '/': the path stays under the root.
        return self._root.joinpath(*key.split("/"))

    def _make_parents(self, directory: Path) -> None:
        """Create `directory` and its missing parents under the root, each fsynced into its parent."""
        missing = []
        while directory != self._root and not directory.is_dir():
            missing.append(directory)
            directory = directory.parent
        for created in reversed(missing):
            try:
                created.mkdir()
            except FileExistsError:
                if not created.is_dir():  # an object's file where a directory of longer keys is wanted
                    raise
                continue  # another put made it
            fsync_directory(created.parent)

    def _walk(self, directory: Path, relative: str, prefix: str,
              include_staging: bool) -> Iterator[ObjectInfo]:
        try:
            entries = list(os.scandir(directory))
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as exc:
            raise _failure(exc, f"listing {relative or '/'} in {self.url}") from exc
        for entry in entries:
            key = relative + entry.name
            try:
                if entry.is_dir(follow_symlinks=False):
                    if (key + "/").startswith(prefix) or prefix.startswith(key + "/"):
                        yield from self._walk(Path(entry.path), key + "/", prefix, include_staging)
                    continue
                if not key.startswith(prefix) or not entry.is_file(follow_symlinks=False):
                    continue
                if key.endswith(STAGING_SUFFIX) and not include_staging:
                    continue
                check_key(key, staging=True)
                st = entry.stat(follow_symlinks=False)
            except ValueError:
                continue  # not a name kanal writes
            except FileNotFoundError:
                continue  # deleted since the directory was read
            except OSError as exc:
                raise _failure(exc, f"listing {key!r} in {self.url}") from exc
            yield ObjectInfo(key, st.st_size, st.st_mtime_ns // 1_000_000)


def _write_synced(path: Path, source: bytes | int) -> int:
    """Create `path` (it must not exist) with `source` (bytes, or an open file's descriptor, copied from its
    position to its end), fsynced; the count written."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        if isinstance(source, int):
            written = _copy_file(source, fd)
        else:
            view = memoryview(source)
            written = 0
            while written < len(view):
                written += os.write(fd, view[written:])
        os.fsync(fd)
        return written
    finally:
        os.close(fd)


def _copy_file(src: int, dst: int) -> int:
    """Copy `src` from its position to its end into `dst`, in the kernel where it can; the bytes copied."""
    copied = 0
    for method in (_copy_file_range, _sendfile):
        try:
            while chunk := method(src, dst):
                copied += chunk
            return copied
        except OSError as exc:
            if exc.errno not in _UNSUPPORTED_COPY_ERRNOS:
                raise
    while chunk_bytes := os.read(src, _FALLBACK_CHUNK_BYTES):
        view = memoryview(chunk_bytes)
        while view:
            view = view[os.write(dst, view):]
        copied += len(chunk_bytes)
    return copied


def _copy_file_range(src: int, dst: int) -> int:
    return os.copy_file_range(src, dst, _COPY_CALL_BYTES_MAX)


def _sendfile(src: int, dst: int) -> int:
    return os.sendfile(dst, src, None, _COPY_CALL_BYTES_MAX)


def _failure(exc: OSError, doing: str) -> RemoteStorageError:
    return RemoteStorageError(f"{doing}: {exc.strerror or exc}",
                              retriable=exc.errno not in _PERMANENT_ERRNOS)
