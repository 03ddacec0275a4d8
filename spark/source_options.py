"""SourceOptions: the options of kanal's Spark data sources, typed and validated.

Spark hands a data source its options as a case-insensitive map of strings; unknown keys are refused here
(a typo such as `mdoe` must not silently read with defaults). Keys are compared lower-cased.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

MODES = ("PERMISSIVE", "FAILFAST")
_KNOWN = {"path", "paths", "bootstrap", "topics", "includeinternal", "mode", "bytesperpartition"}


@dataclass(frozen=True, slots=True)
class SourceOptions:
    path: str = ""
    bootstrap: str = ""
    topics: frozenset[str] | None = None
    include_internal: bool = False
    # PERMISSIVE: damage becomes a `_corrupt` row; FAILFAST: the scan stops at the first damage.
    mode: str = "PERMISSIVE"
    bytes_per_partition: int = 0  # 0: the default (segment_files.GROUP_BYTES_MAX_DEFAULT)

    @property
    def fail_fast(self) -> bool:
        return self.mode == "FAILFAST"

    @classmethod
    def parse(cls, options: Mapping[str, str], *, files_only: bool = False) -> SourceOptions:
        given = {k.lower(): v for k, v in options.items()}
        unknown = sorted(set(given) - _KNOWN)
        if unknown:
            raise ValueError(f"unknown options {unknown}; known: {sorted(_KNOWN)}")
        mode = given.get("mode", "PERMISSIVE").upper()
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES} (rows are never dropped silently), got {mode!r}")
        path = given.get("path", "")
        bootstrap = given.get("bootstrap", "")
        if files_only and bootstrap:
            raise ValueError("this source reads files only: give a path, not a bootstrap")
        if not path and not bootstrap:
            raise ValueError("give a data directory to load() or the option bootstrap=host:port")
        topics = frozenset(t.strip() for t in given["topics"].split(",") if t.strip()) if "topics" in given else None
        internal = given.get("includeinternal", "false").lower()
        if internal not in ("true", "false"):
            raise ValueError(f"includeInternal must be true or false, got {internal!r}")
        try:
            per_partition = int(given.get("bytesperpartition", "0"))
        except ValueError:
            raise ValueError(f"bytesPerPartition must be an integer, got {given['bytesperpartition']!r}") from None
        if per_partition < 0:
            raise ValueError(f"bytesPerPartition must be >= 0, got {per_partition}")
        return cls(path, bootstrap, topics, internal == "true", mode, per_partition)
