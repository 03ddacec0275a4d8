"""Schemas as the schema registry keeps them (issue 45): the three formats Confluent's registry speaks
(Avro, JSON Schema, Protobuf), each parsed, normalized and checked for compatibility by a module of its own
behind one interface (`schema_types.ParsedSchema`), the compatibility levels over a subject's versions
(`compatibility.py`), and the wire framing every registry-aware client writes (`framing.py`).

A shared package, as kanal.v1 is: the controller (which decides a registration), the brokers (which
validate produced records against it), the clients (serializers) and Spark (decoding) all use it, so it
imports nothing of kanal but kanal.v1, and is pure: no I/O, no clocks.
"""
