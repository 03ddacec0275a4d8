"""The JVM tables' Python worker (spark/jvm_worker.py), without Spark: what it answers on its stdout is an
Arrow IPC stream ended by its marker and then one status line, also when the read fails, so the JVM reads
the next answer from where this one stops."""

from __future__ import annotations

import io
import json
import logging

import pyarrow as pa

from kanal.spark.jvm_worker import serve
from kanal.v1.batch import NewRecord

from .log_files import write_log

T0 = 1_700_000_090_000


def _answers(requests: list[dict]) -> bytes:
    out = io.BytesIO()
    serve(io.BytesIO(b"".join(json.dumps(r).encode() + b"\n" for r in requests)), out)
    return out.getvalue()


def _status(src: pa.BufferReader) -> dict:
    line = bytearray()
    while (b := src.read(1)) != b"\n":
        assert b, "the answer ended without its status line"
        line += b
    return json.loads(line)


def test_each_read_is_a_whole_stream_then_its_status_even_when_it_fails(tmp_path):
    write_log(tmp_path / "t-0", [[NewRecord(value=b"v%d" % i, timestamp_ms=T0 + i) for i in range(5)]])
    options = {"path": str(tmp_path)}
    src = pa.BufferReader(_answers([{"op": "plan", "source": "kanal-log", "options": options}]))
    plan = _status(src)
    assert plan["ok"] and plan["partitions"]
    read = {"op": "read", "source": "kanal-log", "options": options, "partition": plan["partitions"][0]}
    src = pa.BufferReader(_answers([
        {**read, "columns": ["nope"]},                     # an unknown column: refused before any row
        {**read, "columns": ["offset", "value"], "filters": [{"column": "offset", "op": ">=", "value": 3}]},
        {**read, "columns": ["offset"], "options": {**options, "colour": "blue"}},  # refused options
        {"op": "dance"},
    ]))
    batches = list(pa.ipc.open_stream(src))
    assert batches == [] and "unknown columns ['nope']" in _status(src)["error"]
    rows = pa.Table.from_batches(list(pa.ipc.open_stream(src))).to_pylist()
    assert _status(src) == {"ok": True}
    # A pushed filter only reads less: the rows below its bound may come too; Spark drops them.
    assert [r["value"] for r in rows if r["offset"] >= 3] == [b"v3", b"v4"]
    assert list(pa.ipc.open_stream(src)) == [] and "unknown options" in _status(src)["error"]
    assert _status(src)["error"] == "ValueError: unknown request 'dance'"
    assert src.read(1) == b""


def test_a_refused_request_leaves_its_traceback_in_the_workers_log(tmp_path, caplog):
    """Each request is the worker's error boundary: the JVM gets the message, the executor's log (the
    worker's stderr) where it came from."""
    request = {"op": "plan", "source": "kanal-log", "options": {"path": str(tmp_path), "colour": "blue"}}
    with caplog.at_level(logging.ERROR, logger="kanal.spark.jvm_worker"):
        status = _status(pa.BufferReader(_answers([request])))
    assert not status["ok"] and "unknown options" in status["error"]
    [record] = caplog.records
    assert record.message == "planning a kanal-log read failed" and record.exc_info is not None
