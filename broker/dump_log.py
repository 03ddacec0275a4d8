"""`kanal dump-log PATH...`: what a partition's files hold, read offline (Kafka's kafka-dump-log).

PATH is a segment file (`.log`, `.index`, `.timeindex`) or a partition directory (every segment's three
files, in offset order), or a remote segment's `.log` object by URL (tiered storage: `file:///...` or
`s3://bucket/prefix/<cluster id>/<topic id>/<partition>/<base>-<end>-e<epoch>.log`, with
`--remote-storage-endpoint` for an S3-compatible store and credentials from the `AWS_*` variables): the
object is read in range reads and walked like a file, and the offset and time indexes in the `.meta`
object beside it are checked against it as a file's `.index` and `.timeindex` are.

Nothing is opened for writing and nothing is recovered: the files are read as
they are, so a broker's live or copied directory can be inspected (storage/segment_walk.py maps them
read-only).

Per `.log` entry: byte position and size, offsets, record count, leader epoch, producer id / epoch / base
sequence, codec, timestamps and the CRC verdict (both CRCs and the header rules, as recovery checks
them); with `--print-data` every record (offset, timestamp, key, value, headers) too. The first damaged
entry ends the file's listing: entry lengths cannot be trusted past it.
Per `.index` entry: offset and position, checked against the `.log` beside it (a batch must start there
with that base offset). Per `.timeindex` entry: timestamp and offset, checked likewise (a batch must start
at that offset, and the largest timestamp through it must be the entry's).

`--output json` prints one JSON object per line (`"type"`: `entry`, `record`, `index`, `timeindex`,
`damage`, `file`), bytes as kanal.commands.record_text writes them. Exit 0 when every file is intact, 1 when
any damage or index mismatch was found, 2 on usage errors (a path that is not there).
"""

from __future__ import annotations

import argparse
import json
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kanal.broker.storage.remote_keys import parse_object_name
from kanal.broker.storage.remote_segment_meta import decode_meta
from kanal.broker.storage.remote_segment_walk import walk_remote_segment
from kanal.broker.storage.remote_storage import (
    ObjectMissing,
    RemoteStorage,
    RemoteStorageError,
    open_remote_storage,
)
from kanal.broker.storage.segment import segment_file_name
from kanal.broker.storage.segment_walk import mapped_segment, walk_segment
from kanal.commands.record_text import as_text, put_bytes
from kanal.commands.report import CommandParser, command_error
from kanal.v1 import records_pb2
from kanal.v1.batch import CorruptEntry, Entry, decode_records, parse_batch
from kanal.v1.error import KanalError

EXIT_OK, EXIT_DAMAGED, EXIT_USAGE = 0, 1, 2
SUFFIXES = (".log", ".index", ".timeindex")
_OFFSET_ENTRY = struct.Struct(">II")  # offset_index.py: relative offset, position
_TIME_ENTRY = struct.Struct(">qI")  # time_index.py: timestamp ms, relative offset


@dataclass(frozen=True, slots=True)
class LogSummary:
    """What the index checks need from a segment's .log: batch start position → base offset, and the
    largest timestamp of the segment through each batch (that batch included), by base offset."""

    base_offset_at: dict[int, int]
    max_timestamp_ms_through: dict[int, int]


class Printer:
    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.damaged = False

    def emit(self, kind: str, text: str, **fields: object) -> None:
        if kind == "damage":
            self.damaged = True
        if self.as_json:
            print(json.dumps({"type": kind, **fields}))
        else:
            print(text)


def segment_files(path: Path) -> list[Path]:
    """The files to dump for PATH: itself, or a directory's segment files in offset order."""
    if path.is_dir():
        bases = sorted({int(p.stem) for p in path.iterdir() if p.suffix in SUFFIXES and p.stem.isdigit()})
        found = [path / segment_file_name(b, s) for b in bases for s in SUFFIXES]
        return [p for p in found if p.exists()]
    if path.suffix not in SUFFIXES or not path.stem.isdigit():
        raise ValueError(
            f"{path}: not a segment file (<base offset>.log, .index or .timeindex) nor a directory"
        )
    return [path]


def walk_log(path: Path) -> Iterator[Entry | CorruptEntry]:
    """Every intact entry of a .log file; a CorruptEntry (yielded, not raised) ends the walk."""
    base_offset = int(path.stem)
    fd = os.open(path, os.O_RDONLY)
    try:
        with mapped_segment(fd, os.fstat(fd).st_size) as view:
            try:
                for entry in walk_segment(view, base_offset):
                    yield Entry(entry.position, entry.size, memoryview(bytes(entry.batch)), entry.header)
            except CorruptEntry as exc:
                yield exc
    finally:
        os.close(fd)


def walk_remote_log(storage: RemoteStorage, key: str, size_bytes: int, base_offset: int
                    ) -> Iterator[Entry | CorruptEntry]:
    """walk_log of a remote segment's object (range reads)."""
    try:
        yield from walk_remote_segment(storage, key, size_bytes, base_offset)
    except CorruptEntry as exc:
        yield exc


def summarize_log(path: Path) -> LogSummary:
    return summarize_entries(walk_log(path))


def summarize_entries(entries: Iterator[Entry | CorruptEntry]) -> LogSummary:
    starts: dict[int, int] = {}
    through: dict[int, int] = {}
    running = -1
    for item in entries:
        if isinstance(item, CorruptEntry):
            break
        header = item.header
        base = item.suffix.base_offset
        starts[item.position] = base
        if header is not None:
            running = max(running, header.max_timestamp_ms)
        through[base] = running
    return LogSummary(starts, through)


def dump_log_file(path: Path, out: Printer, print_data: bool) -> None:
    dump_entries(str(path), walk_log(path), out, print_data)


def dump_entries(name: str, entries: Iterator[Entry | CorruptEntry], out: Printer, print_data: bool) -> None:
    out.emit("file", f"file {name}", path=name)
    for item in entries:
        if isinstance(item, CorruptEntry):
            out.emit("damage", f"DAMAGED {item.message}", position=item.position, reason=item.message)
            return
        header, suffix = item.header, item.suffix
        if header is None:  # walk_segment always checks; a missing header is a bug in the walk
            raise RuntimeError(f"{name}: entry at {item.position} was not checked")
        fields = {
            "position": item.position,
            "size_bytes": item.size,
            "base_offset": suffix.base_offset,
            "last_offset": suffix.last_offset,
            "record_count": header.record_count,
            "leader_epoch": suffix.leader_epoch,
            "producer_id": header.producer_id,
            "producer_epoch": header.producer_epoch,
            "base_sequence": header.base_sequence,
            "codec": records_pb2.CompressionCodec.Name(header.codec).removeprefix("COMPRESSION_").lower()
            if header.codec in records_pb2.CompressionCodec.values()
            else str(header.codec),
            "first_timestamp_ms": header.first_timestamp_ms,
            "max_timestamp_ms": header.max_timestamp_ms,
            "crc": "ok",
        }
        out.emit(
            "entry",
            " ".join(f"{k}: {v}" for k, v in fields.items()),
            **fields,
        )
        if print_data:
            _dump_records(item, out)


def _dump_records(item: Entry, out: Printer) -> None:
    try:
        batch = parse_batch(item.batch)
        records = decode_records(batch)
    except KanalError as exc:
        out.emit("damage", f"| DAMAGED records at {item.position}: {exc.message}", position=item.position,
                 reason=exc.message)
        return
    base = item.suffix.base_offset
    for record in records:
        key = record.key if record.HasField("key") else None
        value = record.value if record.HasField("value") else None
        offset, timestamp_ms = (
            base + record.offset_delta,
            batch.first_timestamp_ms + record.timestamp_delta_ms,
        )
        fields: dict[str, object] = {"offset": offset, "timestamp_ms": timestamp_ms}
        put_bytes(fields, "key", key)
        put_bytes(fields, "value", value)
        headers = []
        for h in record.headers:
            header: dict[str, object] = {"key": h.key}
            put_bytes(header, "value", h.value if h.HasField("value") else None)
            headers.append(header)
        fields["headers"] = headers
        shown = " ".join(
            f"{h.key}={as_text(h.value if h.HasField('value') else None)}" for h in record.headers
        )
        out.emit(
            "record",
            f"| offset: {offset} timestamp_ms: {timestamp_ms} key: {as_text(key)} value: {as_text(value)}"
            + (f" headers: {shown}" if shown else ""),
            **fields,
        )


def _index_rows(name: str, data: bytes, entry: struct.Struct, out: Printer) -> list[tuple[int, int]]:
    if len(data) % entry.size:
        out.emit("damage", f"DAMAGED {name}: {len(data)} bytes, not a multiple of {entry.size}",
                 reason="torn index file")
    whole = len(data) - len(data) % entry.size
    return [tuple(row) for row in entry.iter_unpack(data[:whole])]


def _offset_entry(row: tuple[int, int], base: int, summary: LogSummary | None) -> tuple[dict, bool | None]:
    relative, position = row
    offset = base + relative
    ok = None if summary is None else summary.base_offset_at.get(position) == offset
    return {"offset": offset, "position": position}, ok


def _time_entry(row: tuple[int, int], base: int, summary: LogSummary | None) -> tuple[dict, bool | None]:
    timestamp_ms, relative = row
    offset = base + relative
    # The entry names a batch that raised the segment's largest timestamp to exactly this value.
    ok = None if summary is None else summary.max_timestamp_ms_through.get(offset) == timestamp_ms
    return {"timestamp_ms": timestamp_ms, "offset": offset}, ok


# suffix -> (row type in the output, entry layout, row → (fields, verdict: None when there is no .log))
_INDEXES = {
    ".index": ("index", _OFFSET_ENTRY, _offset_entry),
    ".timeindex": ("timeindex", _TIME_ENTRY, _time_entry),
}


def dump_index_file(path: Path, out: Printer) -> None:
    """An .index or .timeindex file, each entry checked against the .log beside it when there is one."""
    log_path = path.with_suffix(".log")
    summary = summarize_log(log_path) if log_path.exists() else None
    dump_index(str(path), path.suffix, path.read_bytes(), int(path.stem), summary, out)


def dump_index(name: str, suffix: str, data: bytes, base_offset: int, summary: LogSummary | None,
               out: Printer) -> None:
    """An index's entries (`suffix` .index or .timeindex: its layout), each checked against the summary of
    its segment's log when there is one."""
    kind, layout, read_row = _INDEXES[suffix]
    out.emit("file", f"file {name}", path=name)
    for row in _index_rows(name, data, layout, out):
        fields, ok = read_row(row, base_offset, summary)
        verdict = "unchecked (no .log)" if ok is None else "ok" if ok else "MISMATCH"
        out.emit(kind, " ".join(f"{k}: {v}" for k, v in fields.items()) + f" check: {verdict}",
                 **fields, check=verdict)
        if ok is False:
            out.emit("damage", f"DAMAGED {name}: entry {fields} does not match the log", **fields,
                     reason=f"{kind} entry does not match the log")


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(
        prog="kanal dump-log",
        description="Print what a partition's segment files hold, read offline (Kafka's kafka-dump-log).",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="a .log, .index or .timeindex file, a partition directory, or a remote "
                             "segment's .log object by URL (file:///..., "
                             "s3://bucket/prefix/.../<base>-<end>-e<epoch>.log)")
    parser.add_argument("--remote-storage-endpoint", default="", metavar="URL",
                        help="the endpoint of an S3-compatible store for s3:// URLs (http://host:port); "
                             "credentials from the AWS_* variables")
    parser.add_argument("--print-data", action="store_true", help="print every record of every batch too")
    parser.add_argument("--output", choices=("text", "json"), default="text",
                        help="text (default), or one JSON object per line")
    return parser


def dump_remote_segment(url: str, endpoint: str, out: Printer, print_data: bool) -> None:
    """A remote segment's `.log` object, walked over range reads, then the indexes of the `.meta` object
    beside it checked against it (module docstring). A storage failure is damage: the object could not be
    read."""
    root, _, name = url.rpartition("/")
    base_offset = parse_object_name(name)[0]  # type: ignore[index]  # main checked the name
    storage = open_remote_storage(root, endpoint=endpoint)
    meta_name = name[:-len(".log")] + ".meta"
    try:
        size = storage.head(name).size
        dump_entries(url, walk_remote_log(storage, name, size, base_offset), out, print_data)
        try:
            meta = decode_meta(storage.get_range(meta_name, 0, storage.head(meta_name).size))
        except ObjectMissing:
            missing = f"{root}/{meta_name}"
            out.emit("file", f"file {missing}: missing (indexes not checked)", path=missing)
            return
        summary = summarize_entries(walk_remote_log(storage, name, size, base_offset))
        for what, suffix, data in (("offset index", ".index", meta.offset_index),
                                   ("time index", ".timeindex", meta.time_index)):
            dump_index(f"{root}/{meta_name} ({what})", suffix, data, meta.base_offset, summary, out)
    except (RemoteStorageError, KanalError) as exc:
        out.emit("damage", f"DAMAGED {url}: {exc}", reason=str(exc))


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    files: list[Path | str] = []  # a str: a remote segment's URL
    for raw in args.paths:
        if "://" in raw:
            if parse_object_name(raw.rpartition("/")[2]) is None or not raw.endswith(".log"):
                return command_error("kanal dump-log: error", f"{raw}: not a remote segment's .log "
                                     "object (<base>-<end>-e<epoch>.log)", exit_status=EXIT_USAGE)
            try:
                open_remote_storage(raw.rpartition("/")[0], endpoint=args.remote_storage_endpoint)
            except KanalError as exc:
                return command_error("kanal dump-log: error", exc.message, exit_status=EXIT_USAGE)
            files.append(raw)
            continue
        path = Path(raw)
        if not path.exists():
            return command_error(
                "kanal dump-log: error", f"{path}: no such file or directory", exit_status=EXIT_USAGE
            )
        try:
            files += segment_files(path)
        except ValueError as exc:
            return command_error("kanal dump-log: error", str(exc), exit_status=EXIT_USAGE)
    out = Printer(args.output == "json")
    for item in files:
        if isinstance(item, str):
            dump_remote_segment(item, args.remote_storage_endpoint, out, args.print_data)
        elif item.suffix == ".log":
            dump_log_file(item, out, args.print_data)
        else:
            dump_index_file(item, out)
    return EXIT_DAMAGED if out.damaged else EXIT_OK
