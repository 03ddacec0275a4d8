"""DecodedColumns: `kanal-log`'s table when keys or values are decoded (`valueFormat=avro`,
`keyFormat=avro`), and the step that makes a batch of it from a batch of the plain table.

The decoded table is columns.LOG_TABLE with, per decoded side, `value` (`key`) of the reader schema's
Spark type (avro_types.py) instead of binary, and `value_schema_id` int and `value_error` string
(`key_...`) before `_corrupt` (value_decoding.py says what they hold). Its Spark schema depends on the
registry, so it is a StructType made when the DataFrame is (`decoded_schema`); a reader gets it back from
Spark and builds its Table from it (`read_table`), Arrow types by pyspark's own mapping, so the batches
are what Spark expects of that schema.

A read then walks the plain table's columns (the C walk or the Python rows, log_columns.py), with the
raw bytes of each decoded side, and `BatchDecoder` swaps in the decoded columns. A query that uses no
decoded column decodes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_type, to_arrow_type
from pyspark.sql.types import BinaryType, DataType, StructField, StructType

from kanal.spark.columns import LOG_TABLE, Column, Table
from kanal.spark.decoding_options import DecodingOptions
from kanal.spark.value_decoding import AvroDecoding, RecordUndecodable, SideDecoder, error_column, id_column

_ID_DOC = "the schema id the record's {side} carries (Confluent's framing); null when it carries none"
_ERROR_DOC = "null when the {side} decoded (or is null); otherwise why it does not (the {side} is then null)"
_DECODED_DOC = "the {side} decoded with its writer's schema into the reader schema ({source})"
# Columns read along with the raw bytes whatever the query asks: FAILFAST's message names the record.
_WHERE = ("topic", "partition", "offset")


def decoded_schema(decodings: Mapping[str, AvroDecoding]) -> StructType:
    """The whole decoded table's Spark schema (module docstring)."""
    fields: list[StructField] = []
    extra: list[StructField] = []
    for column in LOG_TABLE.columns:
        decoding = decodings.get(column.name)
        if decoding is not None:
            typed, schema_id, error = decoding.fields()
            fields.append(typed)
            extra += [schema_id, error]
        elif column.name == "_corrupt":
            fields += extra
            fields.append(_plain_field(column))
        else:
            fields.append(_plain_field(column))
    return StructType(fields)


def _plain_field(column: Column) -> StructField:
    return StructField(column.name, from_arrow_type(column.arrow_type), True)


def read_table(schema: StructType, decoding: DecodingOptions | None) -> Table:
    """The Table a reader builds for the Spark schema it is given: LOG_TABLE's columns, and with
    `decoding` the decoded sides' columns with the types the schema says (checked against the registry's
    when the read is planned: check_types)."""
    columns = []
    for f in schema.fields:
        side = decoding.side(f.name) if decoding is not None else None
        if side is not None:
            if isinstance(f.dataType, BinaryType):
                raise ValueError(f"with {f.name}Format=avro, {f.name} is the decoded value: read the bytes "
                                 f"without {f.name}Format")
            columns.append(_decoded_column(f.name, f.dataType))
        elif decoding is not None and f.name in _side_extras(decoding):
            columns.append(Column(f.name, f.dataType.simpleString(), to_arrow_type(f.dataType), ""))
        else:
            columns.append(LOG_TABLE.select([f.name]).columns[0])
    return Table(tuple(columns))


def _side_extras(decoding: DecodingOptions) -> set[str]:
    return {name for s in decoding.sides for name in (id_column(s.side), error_column(s.side))}


def _decoded_column(name: str, data_type: DataType) -> Column:
    # A decoded side's Column: spark_type is the type's text (for messages), the Arrow type pyspark's.
    return Column(name, data_type.simpleString(), to_arrow_type(data_type, timezone="UTC"),
                  _DECODED_DOC.format(side=name, source="the registry"))


def wanted_sides(table: Table, decoding: DecodingOptions | None) -> tuple[str, ...]:
    """The sides the query's columns need decoded."""
    if decoding is None:
        return ()
    names = set(table.names())
    return tuple(s.side for s in decoding.sides
                 if names & {s.side, id_column(s.side), error_column(s.side)})


def check_types(table: Table, decodings: Mapping[str, AvroDecoding]) -> None:
    """The reader schema found now must give the type the DataFrame was made with (the subject's latest
    version may have changed since); nullability aside, as Spark compares a user's schema."""
    for column in table.columns:
        decoding = decodings.get(column.name)
        if decoding is None:
            continue
        now = decoding.shape().data_type.simpleString()
        if now != column.spark_type:
            raise ValueError(f"{column.name}: the reader schema ({decoding.source}) is {now}, but the "
                             f"DataFrame was made with {column.spark_type} (a new version since?): make the "
                             f"DataFrame again, or pin the schema with {column.name}SchemaId")


class BatchDecoder:
    """Makes batches of `table` (with decoded columns) from batches of `raw_table` (module docstring)."""

    def __init__(self, table: Table, decodings: Mapping[str, AvroDecoding], fail_fast: bool) -> None:
        self.table = table
        self.fail_fast = fail_fast
        self.types = {c.name: c.arrow_type for c in table.columns}
        self.sides = {side: SideDecoder(d, self.types.get(side)) for side, d in decodings.items()}
        raw: list[str] = []
        for name in (*table.names(), *_WHERE):
            plain = next((side for side in self.sides if name in (side, id_column(side), error_column(side))),
                         name)
            if plain not in raw:
                raw.append(plain)
        self.raw_table = LOG_TABLE.select(raw)

    def __repr__(self) -> str:
        return f"<BatchDecoder sides={sorted(self.sides)} columns={len(self.table.columns)}>"

    def batch(self, raw: pa.RecordBatch) -> pa.RecordBatch:
        out: dict[str, pa.Array] = {}
        for side, decoder in self.sides.items():
            values, ids, errors = decoder.decode(raw.column(side).to_pylist())
            if self.fail_fast:
                self._raise_first(raw, side, errors)
            if values is not None:
                out[side] = values
            out[id_column(side)] = pa.array(ids, self.types.get(id_column(side), pa.int32()))
            out[error_column(side)] = pa.array(errors, self.types.get(error_column(side), pa.string()))
        arrays = [out[c.name] if c.name in out else raw.column(c.name) for c in self.table.columns]
        return pa.RecordBatch.from_arrays(arrays, schema=self.table.arrow_schema())

    @staticmethod
    def _raise_first(raw: pa.RecordBatch, side: str, errors: list[str | None]) -> None:
        for row, error in enumerate(errors):
            if error is not None:
                topic, partition, offset = (raw.column(n)[row].as_py() for n in _WHERE)
                raise RecordUndecodable(f"{topic}-{partition} offset {offset}: the {side} does not decode: "
                                        f"{error} (mode FAILFAST; PERMISSIVE gives a null {side} and "
                                        f"{error_column(side)})")
