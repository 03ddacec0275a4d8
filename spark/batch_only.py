"""BatchOnly: kanal's Spark sources read in batch only, and say so when asked to stream or to write.

Spark's Python Data Source API answers an unimplemented `streamReader` / `writer` with NOT_IMPLEMENTED
from deep inside PySpark, which reads like a bug. Until the streaming source and the sink land (issue 26),
`spark.readStream.format("kanal-log")` and friends fail with one sentence naming the source, what is
not supported and what to use instead.
"""

from __future__ import annotations

from kanal.v1.error import ErrorCode, KanalError


class BatchOnly:
    """Mixed into a DataSource: streaming reads and every write are refused with a clear error."""

    @classmethod
    def name(cls) -> str:
        raise NotImplementedError

    # What the source is, in the refusal: kanal-metadata, which also streams, says "read-only".
    KIND = "batch-only"

    def _refuse(self, what: str) -> KanalError:
        source = self.name()
        return KanalError(ErrorCode.INVALID_REQUEST, (
            f"the {source} source is {self.KIND}: {what} is not supported; read it with "
            f"spark.read.format(\"{source}\"), or stream and write through brokers with format(\"kanal\")"))

    def streamReader(self, schema):
        raise self._refuse("spark.readStream")

    def simpleStreamReader(self, schema):
        raise self._refuse("spark.readStream")

    def writer(self, schema, overwrite):
        raise self._refuse("writing (df.write)")

    def streamWriter(self, schema, overwrite):
        raise self._refuse("writing a stream (df.writeStream)")
