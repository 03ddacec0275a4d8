"""Distinct quantities of the log, as distinct types, so that mypy catches an offset used as a position."""

from typing import NewType

# A record's position in a partition's log: 0, 1, 2, ... (never reused, never reordered).
Offset = NewType("Offset", int)
# A byte position inside one segment file.
FilePosition = NewType("FilePosition", int)
# The leader epoch a batch was appended in (bumped on every leader change).
LeaderEpoch = NewType("LeaderEpoch", int)
