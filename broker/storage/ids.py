"""Distinct quantities of the log, as distinct types, so that mypy catches an offset used as a position."""

from typing import NewType

# The leader epoch a batch was appended in: the metadata image's LeaderEpoch (bumped on every leader
# change), one type whether it comes from a partition record or from a batch header.
from kanal.metadata.ids import LeaderEpoch

__all__ = ["FilePosition", "LeaderEpoch", "Offset"]

# A record's position in a partition's log: 0, 1, 2, ... (never reused, never reordered).
Offset = NewType("Offset", int)
# A byte position inside one segment file.
FilePosition = NewType("FilePosition", int)
