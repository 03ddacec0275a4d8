"""Durable small-file writes, the one implementation every storage file of kanal uses.

`write_file_atomically(path, data)`: the new contents go to `<name>.tmp` beside the file, are fsynced,
renamed over the file, and the directory is fsynced, so after a crash (a power cut included) the file is
wholly the old or wholly the new contents, and a completed call's new contents survive. Readers never see
a half-written file. `fsync_directory` makes creations, renames and removals of names in a directory
durable (a rename is only in the directory's own blocks until they are synced).
"""

from __future__ import annotations

import os
from pathlib import Path

TEMP_SUFFIX = ".tmp"


def fsync_directory(directory: Path) -> None:
    """Make creations, renames and removals of names in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file_atomically(path: Path, data: bytes) -> None:
    """Replace `path` with `data`: whole, durable, and never half-visible."""
    path = Path(path)
    temp = path.with_name(path.name + TEMP_SUFFIX)
    with open(temp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temp, path)
    fsync_directory(path.parent)
