"""cleanup.policy: what a topic's log does with old records: deletes them by retention, compacts them by key,
or both.

Text form, as Kafka's: a comma-separated list of `delete` and `compact`, in any order, each named once,
case-insensitive, spaces around the items ignored (`compact,delete`, `delete, compact` and `COMPACT` are
admitted; `compact,foo`, `""`, `compact,` and `delete,delete` are not). With both, retention by time and
size deletes old segments and the cleaner compacts the closed segments that remain; tombstones still go
after delete.retention.ms.

Stored topic configs keep the text the user gave (describe shows it); `str()` of a policy is the canonical
text, `compact,delete` for both, which is what a default or a built LogConfig prints.
"""

from __future__ import annotations

from dataclasses import dataclass

_NAMES = ("compact", "delete")  # the canonical order of str()


@dataclass(frozen=True, slots=True)
class CleanupPolicy:
    """Which of the two cleanups a log runs. Ask `deletes` / `compacts`, never compare texts: a combined
    policy does both."""

    deletes: bool
    compacts: bool

    def __post_init__(self) -> None:
        # A policy with neither would keep every record forever under a name no version admits; refuse it
        # here so no code path has to decide what it means.
        if not (self.deletes or self.compacts):
            raise ValueError("a cleanup policy deletes, compacts or both")

    @classmethod
    def parse(cls, text: str) -> CleanupPolicy:
        """The policy `text` names; ValueError saying what is wrong (topic_config turns it into
        INVALID_CONFIG naming the key)."""
        if not text.strip():
            raise ValueError("empty: give delete, compact, or both as compact,delete")
        items = [item.strip().lower() for item in text.split(",")]
        for item in items:
            if item not in _NAMES:
                shown = repr(item) if item else "an empty item"
                raise ValueError(f"{text!r}: {shown} is not delete or compact (both: compact,delete)")
        if len(set(items)) != len(items):
            raise ValueError(f"{text!r} names a policy twice")
        return cls(deletes="delete" in items, compacts="compact" in items)

    def __str__(self) -> str:
        return ",".join(name for name, on in zip(_NAMES, (self.compacts, self.deletes), strict=True) if on)

    def __repr__(self) -> str:
        return f"<CleanupPolicy {self}>"


DELETE = CleanupPolicy(deletes=True, compacts=False)
COMPACT = CleanupPolicy(deletes=False, compacts=True)
COMPACT_DELETE = CleanupPolicy(deletes=True, compacts=True)
