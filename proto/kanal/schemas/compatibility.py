"""Compatibility levels over a subject's versions (Confluent's names and meanings).

A new schema is checked against the subject's live versions, oldest first:

| level | checked against | as |
|---|---|---|
| `BACKWARD` (the default) | the latest version | the new schema reads data the latest wrote |
| `BACKWARD_TRANSITIVE` | every version | the new schema reads data each wrote |
| `FORWARD` | the latest version | the latest reads data the new schema writes |
| `FORWARD_TRANSITIVE` | every version | each reads data the new schema writes |
| `FULL` | the latest version | both ways |
| `FULL_TRANSITIVE` | every version | both ways |
| `NONE` | nothing | |

A subject with no live version accepts any valid schema.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from kanal.schemas.schema_types import ParsedSchema


class CompatibilityLevel(StrEnum):
    BACKWARD = "BACKWARD"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD = "FORWARD"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL = "FULL"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"
    NONE = "NONE"

    @property
    def transitive(self) -> bool:
        return self.value.endswith("_TRANSITIVE")

    @property
    def backward(self) -> bool:
        return self.value.startswith(("BACKWARD", "FULL"))

    @property
    def forward(self) -> bool:
        return self.value.startswith(("FORWARD", "FULL"))


DEFAULT_LEVEL = CompatibilityLevel.BACKWARD


def incompatibilities(new: ParsedSchema, previous: Sequence[ParsedSchema],
                      level: CompatibilityLevel) -> list[str]:
    """Why `new` may not follow `previous` (a subject's live versions, oldest first) at `level`; [] when it
    may. Each message names the version it fails against (1-based among `previous`) and the direction."""
    if level is CompatibilityLevel.NONE or not previous:
        return []
    checked = list(enumerate(previous, 1)) if level.transitive else [(len(previous), previous[-1])]
    out: list[str] = []
    for number, old in reversed(checked):  # the latest first: the likeliest to be named
        if level.backward:
            out += [f"version {number} (backward: the new schema reading its data): {why}"
                    for why in new.incompatibilities(old)]
        if level.forward:
            out += [f"version {number} (forward: it reading the new schema's data): {why}"
                    for why in old.incompatibilities(new)]
    return out
