"""The Python side of `kanal-log` and `kanal-metadata` on the JVM: plans and reads for spark/jvm/.

    python -m kanal.spark.jvm_worker      # started by the JVM (spark/jvm/PythonWorkers.java), not by hand

The JVM table (column pruning, columnar batches) asks; this process answers with the Python source's own
objects, so the rows are the Python source's rows: `plan` is the reader's partitions() (the committed-copy
plan, or the partitions of a live cluster), each pickled; `read` is the reader's read() of one of them
with the columns the query needs, written as an Arrow IPC stream; `schema` is the table's schema when
options shape it (kanal-log's decoded keys and values: decoded_columns.py), as Spark's JSON, else null
(the jar's `.ddl`). A plan or read that carries `schema` (Spark's JSON of the columns wanted) builds its
table from it, so decoded columns have the types the DataFrame was made with. The protocol (a JSON
request line on stdin; an IPC stream and/or a JSON status line on stdout) is described in
PythonWorkers.java, which reads it. An error is a status line, never a traceback on stdout: the stream is
always ended first, so the worker stays in step and serves the next task. Each request is the worker's
error boundary: the JVM fails the task with the error's message, and the traceback goes to stderr (the
executor's log).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import pickle
import sys
from typing import IO, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader
from pyspark.sql.types import StructType

from kanal.spark.columns import LOG_TABLE, METADATA_TABLE, Table
from kanal.spark.log_source import KanalLogDataSource
from kanal.spark.metadata_source import KanalMetadataDataSource
from kanal.spark.pushdown import Pushed

# The IPC stream is written in pieces of a batch's buffers; a large pipe buffer keeps the writes few.
OUT_BUFFER_BYTES = 1 << 20

log = logging.getLogger(__name__)


def _error(exc: BaseException) -> dict[str, Any]:
    return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


# Each source the JVM serves: its full table, and how its DataSource opens a reader (options, columns,
# pushed filters).
SOURCES = {
    "kanal-log": (LOG_TABLE, KanalLogDataSource.open_reader),
    "kanal-metadata": (METADATA_TABLE, KanalMetadataDataSource.open_reader),
}


def _source(name: str) -> tuple[Table, Any]:
    if name not in SOURCES:
        raise ValueError(f"no source {name!r}; the JVM worker serves {sorted(SOURCES)}")
    return SOURCES[name]


def _table(request: dict[str, Any], columns: Any = None) -> Table:
    """The columns a request wants: its `schema` (Spark's JSON), else its column names, else all."""
    table = _source(request["source"])[0]
    if request.get("schema"):
        schema = StructType.fromJson(json.loads(request["schema"]))
        if request["source"] == "kanal-log":
            return KanalLogDataSource.read_table(request["options"], schema)
        return table.select(schema.fieldNames())
    return table if columns is None else table.select(columns)


def _reader(request: dict[str, Any], columns: Any = None) -> DataSourceReader:
    make = _source(request["source"])[1]
    return make(request["options"], _table(request, columns), Pushed.parse(request.get("filters")))


def schema(request: dict[str, Any]) -> dict[str, Any]:
    """The table's schema for these options when they shape it (Spark's JSON), else null."""
    try:
        _source(request["source"])
        decoded = (KanalLogDataSource.decoded_schema(request["options"]) if request["source"] == "kanal-log"
                   else None)
    except Exception as exc:  # the boundary, as in plan()
        log.exception("the schema of a %s read failed", request.get("source"))
        return _error(exc)
    return {"ok": True, "schema": None if decoded is None else decoded.json()}


def plan(request: dict[str, Any]) -> dict[str, Any]:
    try:
        parts = [base64.b64encode(pickle.dumps(p)).decode() for p in _reader(request).partitions()]
    except Exception as exc:  # the boundary: the JVM gets the message, the executor's log the traceback
        log.exception("planning a %s read failed", request.get("source"))
        return _error(exc)
    return {"ok": True, "partitions": parts}


def read(request: dict[str, Any], out: IO[bytes]) -> dict[str, Any]:
    status: dict[str, Any] = {"ok": True}
    try:
        arrow_schema = _table(request, request["columns"]).arrow_schema()
    except Exception as exc:  # the boundary, as in plan()
        log.exception("a %s read of columns %s was refused", request.get("source"), request.get("columns"))
        status, arrow_schema = _error(exc), pa.schema([])
    writer = pa.ipc.new_stream(out, arrow_schema)
    if status["ok"]:
        try:
            reader = _reader(request, request["columns"])
            partition = pickle.loads(base64.b64decode(request["partition"]))
            for batch in reader.read(partition):
                writer.write_batch(batch)
        except Exception as exc:  # the boundary, as in plan() (a FAILFAST read, an unreadable cluster)
            log.exception("a %s read failed", request.get("source"))
            status = _error(exc)
    writer.close()  # the end-of-stream marker; `out` stays open for the status line
    return status


def serve(requests: IO[bytes], out: IO[bytes]) -> None:
    for line in requests:
        request = json.loads(line)
        op = request.get("op")
        if op == "plan":
            status = plan(request)
        elif op == "read":
            status = read(request, out)
        elif op == "schema":
            status = schema(request)
        else:
            status = {"ok": False, "error": f"ValueError: unknown request {op!r}"}
        out.write(json.dumps(status).encode() + b"\n")
        out.flush()


def main() -> None:
    # The protocol owns the real stdout; whatever else prints (a library, a warning) goes to stderr.
    out = os.fdopen(os.dup(1), "wb", buffering=OUT_BUFFER_BYTES)
    os.dup2(2, 1)
    serve(sys.stdin.buffer, out)


if __name__ == "__main__":
    main()
