"""`as_enum`: an int as the generated enum type of a proto3 field, for the type checker.

protobuf's generated stubs type an enum field's setter as the enum class alone, while at run time an open
(proto3) enum field takes any int. kanal keeps enum values as plain ints where they are keys and flags
(ACL entries, error codes, config resource types), so the one place an int becomes a field's value says so
here, instead of a cast at every call site.
"""

from __future__ import annotations

from typing import TypeVar, cast

E = TypeVar("E", bound=int)


def as_enum(enum: type[E], value: int) -> E:
    """`value` typed as `enum` (a generated enum such as metadata_pb2.AclOperation); unchanged at run time."""
    del enum  # only its type matters
    return cast(E, value)
