"""DurableJournal: pysyncobj's Raft journal, written so that a power cut loses nothing it acknowledged.

pysyncobj's own FileJournal writes through an mmap and never fsyncs, and stores term and vote in a
pickled meta file replaced without fsync: after a power cut of a majority the Raft history can end
before entries that were committed (and already written to the metadata logs), and a lost vote allows
two leaders in one term. This journal replaces it (raft_node.py hands it to pysyncobj) and keeps these
rules:

- Entries are appended with plain writes to the page cache (`add`); `sync()` makes everything appended
  or truncated since the last sync durable with ONE fdatasync (group commit). raft_node.py calls
  `sync()` before the node sends an acknowledgement of entries or a vote, and before the leader counts
  its own log towards a commit. Nothing the node has not told anyone about is ever worth an fsync.
- Term and vote go to TermVoteFile (raft_vote_file.py), synchronously, with their own fdatasync, before
  `setCurrentTerm` returns: before the vote request or grant that follows it is sent.
- The commit index is stored lazily (once a second, as pysyncobj does), and only after the journal is
  synced, so a stored commit index never points past the durable journal. On open it is clamped to the
  journal's last index.
- Compaction (`deleteEntriesTo`) and `clear` never rewrite the file in place: they mark a rewrite, and
  the next `sync()` writes the remaining entries to `kanal-journal.tmp`, fsyncs it, fsyncs the directory
  (so pysyncobj's dump, renamed into the same directory just before, is durable first), renames it over
  the journal and fsyncs the directory again. A power cut leaves the old journal or the new one, whole.
- A torn journal opens: records are read in order and the file is cut at the first record that is
  incomplete, fails its CRC, or does not continue the index / term sequence (index + 1, term not lower).
  Only unsynced records can be torn, and those were never acknowledged.

File `<data-dir>/raft/kanal-journal`, integers little-endian (as pysyncobj's format):

    offset  size  field
    0       4     magic b"KRJ1"
    4       4     format version (1)
    8       8     reserved, zero
    16      ...   records, each:
                    4   N = 16 + command length
                    8   Raft index
                    8   Raft term
                    N-16 the command as pysyncobj gives it (its own envelope; opaque here)
                    4   CRC-32 (zlib.crc32) of the 4 + N bytes before it

Upgrade: a data directory from before this journal holds pysyncobj's `journal` (+ `journal.meta`).
`migrate_legacy_journal` reads its whole records (stopping at a torn one) and its term and vote (the
meta file is a pysyncobj pickle of a dict of numbers and strings; it is read with an unpickler that
refuses every global, so it cannot construct any object), writes them in this format and removes the old
files.

Not thread-safe by itself; every call comes from pysyncobj's tick thread (and its constructor), and
`sync()` takes a lock so a caller on another thread (shutdown) is safe too.
"""

from __future__ import annotations

import io
import logging
import os
import pickle
import struct
import threading
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pysyncobj.journal import Journal

from kanal.broker.storage.durable_files import fsync_directory
from kanal.raft.raft_vote_file import TermVote, TermVoteFile

_log = logging.getLogger("kanal.raft.journal")

JOURNAL_FILE_NAME = "kanal-journal"
VOTE_FILE_NAME = "term-vote"
LEGACY_JOURNAL_FILE_NAME = "journal"
MAGIC = b"KRJ1"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<4sIQ")
_LEN = struct.Struct("<I")
_INDEX_TERM = struct.Struct("<QQ")
_CRC = struct.Struct("<I")
HEADER = _HEADER.pack(MAGIC, FORMAT_VERSION, 0)

# A pysyncobj journal entry: (command bytes, Raft index, Raft term).
Entry = tuple[bytes, int, int]


class JournalFormatError(Exception):
    """The journal file is not this format (a damaged tail is not this error: it is cut off)."""


def encode_record(command: bytes, index: int, term: int) -> bytes:
    body = _LEN.pack(_INDEX_TERM.size + len(command)) + _INDEX_TERM.pack(index, term) + command
    return body + _CRC.pack(zlib.crc32(body))


def decode_records(data: bytes | memoryview, start: int) -> tuple[list[Entry], list[int], int]:
    """The whole, consistent records from `start`: (entries, their file offsets, end of the last one)."""
    view = memoryview(data)
    entries: list[Entry] = []
    offsets: list[int] = []
    pos, size = start, len(view)
    while pos + _LEN.size <= size:
        (length,) = _LEN.unpack_from(view, pos)
        end = pos + _LEN.size + length + _CRC.size
        if length < _INDEX_TERM.size or end > size:
            break
        if _CRC.unpack_from(view, end - _CRC.size)[0] != zlib.crc32(view[pos : end - _CRC.size]):
            break
        index, term = _INDEX_TERM.unpack_from(view, pos + _LEN.size)
        if entries and (index != entries[-1][1] + 1 or term < entries[-1][2]):
            break
        entries.append((bytes(view[pos + _LEN.size + _INDEX_TERM.size : end - _CRC.size]), index, term))
        offsets.append(pos)
        pos = end
    return entries, offsets, pos


def _raise(message: str, exc: BaseException) -> None:
    raise exc


class DurableJournal(Journal):
    """`fatal(message, exc)` is called when a write or sync fails (then the error is raised): pysyncobj
    logs exceptions and carries on, but after a failed write or fsync the page cache and the disk may
    differ, and acknowledging anything after that would be a lie (the controller passes fatal.py's
    stop_process)."""

    def __init__(self, directory: Path, fatal: Callable[[str, BaseException], object] = _raise) -> None:
        self.directory = directory
        self._fatal = fatal
        self.path = directory / JOURNAL_FILE_NAME
        directory.mkdir(parents=True, exist_ok=True)
        migrate_legacy_journal(directory)
        self._lock = threading.Lock()
        self._votes = TermVoteFile(directory / VOTE_FILE_NAME)
        self._commit_index = self._votes.state.commit_index
        self._commit_stored = self._commit_index
        self._entries: list[Entry] = []
        self._offsets: list[int] = []
        self._dirty = False
        self._rewrite_pending = False
        self.syncs = 0  # fdatasyncs and rewrites of the journal (not of the term/vote file)
        self.torn_bytes = 0  # what the last open cut off a torn tail
        if not self.path.exists():
            write_journal_file(self.path, [])
        self._fd = os.open(self.path, os.O_RDWR)
        self._end = 0
        self._load()

    def __repr__(self) -> str:
        last = self._entries[-1][1] if self._entries else None
        return (
            f"<DurableJournal {self.path} entries={len(self._entries)} last={last} "
            f"dirty={self._dirty} rewrite={self._rewrite_pending} syncs={self.syncs}>"
        )

    def _load(self) -> None:
        size = os.fstat(self._fd).st_size
        data = os.pread(self._fd, size, 0) if size else b""
        if len(data) < _HEADER.size or data[: _HEADER.size] != HEADER:
            if data.strip(b"\0"):
                raise JournalFormatError(f"{self.path} is not a kanal Raft journal")
            # Never happens through this class (the header is written before the name exists), but a
            # zeroed file is an empty journal, not a reason to stop.
            self._entries, self._offsets = [], []
            self._rewrite_pending = self._dirty = True
            self.sync()
            return
        self._entries, self._offsets, self._end = decode_records(data, _HEADER.size)
        if self._end < size:
            self.torn_bytes = size - self._end
            _log.warning(
                "the Raft journal %s has a torn tail: %d bytes after index %s cut off (never acknowledged)",
                self.path, self.torn_bytes, self._entries[-1][1] if self._entries else None,
            )
            os.ftruncate(self._fd, self._end)
            os.fdatasync(self._fd)
        if self._entries and self._commit_index > self._entries[-1][1]:
            self._commit_index = self._entries[-1][1]

    # -- pysyncobj's Journal interface ---------------------------------------------------------------

    def add(self, command: bytes, idx: int, term: int) -> None:
        command = bytes(command)
        self._entries.append((command, idx, term))
        self._dirty = True
        if self._rewrite_pending:
            return  # the next sync writes the whole file
        record = encode_record(command, idx, term)
        try:
            os.pwrite(self._fd, record, self._end)
        except OSError as exc:
            self._failed(f"appending Raft entry {idx}", exc)
        self._offsets.append(self._end)
        self._end += len(record)

    def clear(self) -> None:
        self._entries, self._offsets = [], []
        self._rewrite_pending = self._dirty = True

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        del self._entries[entryFrom:]
        self._dirty = True
        if self._rewrite_pending:
            return
        if entryFrom < len(self._offsets):
            # Cutting the tail in place is safe: if the cut is lost, the old tail comes back, which is
            # the state before it; new records written after it are covered by the same next sync.
            self._end = self._offsets[entryFrom]
            del self._offsets[entryFrom:]
            try:
                os.ftruncate(self._fd, self._end)
            except OSError as exc:
                self._failed("truncating the Raft journal", exc)

    def deleteEntriesTo(self, entryTo: int) -> None:
        self._entries = self._entries[entryTo:]
        self._offsets = []
        self._rewrite_pending = self._dirty = True

    def __getitem__(self, item: Any) -> Any:
        return self._entries[item]

    def __len__(self) -> int:
        return len(self._entries)

    def _destroy(self) -> None:
        with self._lock:
            if self._fd < 0:
                return
            self._sync_locked()
            self._store_commit_index()
            os.close(self._fd)
            self._fd = -1

    def setRaftCommitIndex(self, raftCommitIndex: int) -> None:
        self._commit_index = raftCommitIndex

    def getRaftCommitIndex(self) -> int:
        return self._commit_index

    def setCurrentTerm(self, term: int, votedForNodeId: Any) -> None:
        # Durable before pysyncobj sends the vote request or grant that follows this call. The journal
        # is synced first so the commit index stored beside the vote never points past it.
        vote = None if votedForNodeId is None else str(votedForNodeId)
        with self._lock:
            try:
                self._sync_locked()
                self._votes.store(TermVote(term, vote, self._commit_index))
            except OSError as exc:
                self._failed(f"storing term {term} and vote {vote}", exc)
            self._commit_stored = self._commit_index

    def getCurrentTerm(self) -> int:
        return self._votes.state.term

    def getVotedForNodeId(self) -> str | None:
        return self._votes.state.voted_for

    def onOneSecondTimer(self) -> None:
        if self._commit_index != self._commit_stored:
            with self._lock:
                try:
                    self._sync_locked()
                    self._store_commit_index()
                except OSError as exc:
                    self._failed("storing the Raft commit index", exc)

    # -- durability ----------------------------------------------------------------------------------

    @property
    def dirty(self) -> bool:
        return self._dirty

    @property
    def vote_syncs(self) -> int:
        return self._votes.syncs

    def sync(self) -> bool:
        """Make every change since the last sync durable (one fdatasync, or one atomic rewrite after a
        compaction). False when there was nothing to sync."""
        with self._lock:
            return self._sync_locked()

    def _sync_locked(self) -> bool:
        if not self._dirty or self._fd < 0:
            return False
        try:
            if self._rewrite_pending:
                self._rewrite()
            else:
                os.fdatasync(self._fd)
        except OSError as exc:
            self._failed("syncing the Raft journal", exc)
        self._dirty = False
        self.syncs += 1
        return True

    def _failed(self, what: str, exc: OSError) -> None:
        self._fatal(f"{what} failed in {self.path}: {exc}", exc)
        raise exc

    def _store_commit_index(self) -> None:
        if self._commit_index != self._commit_stored:
            state = self._votes.state
            self._votes.store(TermVote(state.term, state.voted_for, self._commit_index))
            self._commit_stored = self._commit_index

    def _rewrite(self) -> None:
        # Crash-atomic: the new file is complete and durable before its name replaces the old one.
        offsets = write_journal_file(self.path, self._entries)
        old_fd = self._fd
        self._fd = os.open(self.path, os.O_RDWR)
        if old_fd >= 0:
            os.close(old_fd)
        self._offsets = offsets
        self._end = os.fstat(self._fd).st_size
        self._rewrite_pending = False


def write_journal_file(path: Path, entries: list[Entry]) -> list[int]:
    """Replace `path` crash-atomically with a journal of `entries`; the records' file offsets."""
    tmp = path.with_name(path.name + ".tmp")
    offsets = []
    parts = [HEADER]
    pos = len(HEADER)
    for command, index, term in entries:
        record = encode_record(command, index, term)
        offsets.append(pos)
        parts.append(record)
        pos += len(record)
    with open(tmp, "wb") as f:
        f.write(b"".join(parts))
        f.flush()
        os.fsync(f.fileno())
    # First make names already renamed in this directory durable (pysyncobj's dump, which a shortened
    # journal relies on), then the new journal's.
    fsync_directory(path.parent)
    os.replace(tmp, path)
    fsync_directory(path.parent)
    return offsets


# -- upgrade from pysyncobj's FileJournal ----------------------------------------------------------

_LEGACY_FIRST_RECORD = 24 + 8 + 4 + 4
_LEGACY_LAST_RECORD_AT = 24 + 8 + 4


class _NoGlobalsUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"the legacy Raft meta file names a global ({module}.{name})")


def read_legacy_journal(path: Path) -> list[Entry]:
    """The whole records of a pysyncobj FileJournal, stopping at the first one that is not whole."""
    data = path.read_bytes()
    if len(data) < _LEGACY_FIRST_RECORD or not data.startswith(b"PYSYNCOBJ"):
        return []
    (last,) = struct.unpack_from("<I", data, _LEGACY_LAST_RECORD_AT)
    end = min(last, len(data))
    entries: list[Entry] = []
    pos = _LEGACY_FIRST_RECORD
    while pos + 4 <= end:
        (size,) = struct.unpack_from("<I", data, pos)
        if size < 16 or pos + 8 + size > end or struct.unpack_from("<I", data, pos + 4 + size)[0] != size:
            break
        index, term = struct.unpack_from("<QQ", data, pos + 4)
        if entries and (index != entries[-1][1] + 1 or term < entries[-1][2]):
            break
        entries.append((bytes(data[pos + 20 : pos + 4 + size]), index, term))
        pos += size + 8
    return entries


def read_legacy_meta(path: Path) -> TermVote:
    try:
        meta = _NoGlobalsUnpickler(io.BytesIO(path.read_bytes())).load()
    except (OSError, pickle.UnpicklingError, EOFError, ValueError, TypeError):
        return TermVote()
    if not isinstance(meta, dict):
        return TermVote()
    term, vote, commit = (
        meta.get("currentTerm", 0),
        meta.get("votedForNodeId"),
        meta.get("raftCommitIndex", 1),
    )
    if not isinstance(term, int) or not isinstance(commit, int):
        return TermVote()
    return TermVote(term, vote if isinstance(vote, str) else None, commit)


def migrate_legacy_journal(directory: Path) -> bool:
    """Convert pysyncobj's `journal` + `journal.meta` in `directory` to this format once; True if done."""
    legacy = directory / LEGACY_JOURNAL_FILE_NAME
    if not legacy.exists() or (directory / JOURNAL_FILE_NAME).exists():
        return False
    entries = read_legacy_journal(legacy)
    meta = read_legacy_meta(directory / (LEGACY_JOURNAL_FILE_NAME + ".meta"))
    term = max([meta.term, *(e[2] for e in entries)])
    # A vote recorded for an older term than the log shows is void; a commit index past the surviving
    # records is clamped (pysyncobj wrote both without fsync).
    vote = meta.voted_for if term == meta.term else None
    commit = min(meta.commit_index, entries[-1][1]) if entries else 1
    TermVoteFile(directory / VOTE_FILE_NAME).store(TermVote(term, vote, commit))
    write_journal_file(directory / JOURNAL_FILE_NAME, entries)
    for name in (
        LEGACY_JOURNAL_FILE_NAME,
        LEGACY_JOURNAL_FILE_NAME + ".meta",
        LEGACY_JOURNAL_FILE_NAME + ".meta.tmp",
    ):
        try:
            (directory / name).unlink()
        except FileNotFoundError:
            pass
    fsync_directory(directory)
    _log.info("migrated pysyncobj's journal in %s: %d entries, term %d", directory, len(entries), term)
    return True
