"""`as_enum`: an int as the generated enum type of a proto3 field, for the type checker; `enum_name`: a
value's name, or its number when this build does not know it.

protobuf's generated stubs type an enum field's setter as the enum class alone, while at run time an open
(proto3) enum field takes any int. kanal keeps enum values as plain ints where they are keys and flags
(ACL entries, error codes, config resource types), so the one place an int becomes a field's value says so
here, instead of a cast at every call site.
"""

from __future__ import annotations

from typing import Any, TypeVar, cast

E = TypeVar("E", bound=int)


def as_enum(enum: type[E], value: int) -> E:
    """`value` typed as `enum` (a generated enum such as metadata_pb2.AclOperation); unchanged at run time."""
    del enum  # only its type matters
    return cast(E, value)


def enum_name(enum: Any, value: int) -> str:
    """The name of `value` in a generated enum (metadata_pb2.PartitionChangeCause), or the number as text
    for a value this build does not know (a newer writer's; proto3 enums are open), as protobuf's JSON
    form prints it: a reader describing a record must not fail on it."""
    try:
        return str(enum.Name(value))
    except ValueError:
        return str(value)
