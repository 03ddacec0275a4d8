"""What the nodes' data directories sit on during a chaos run, for the faults that need more than a directory.

- `BrokerDisks` (the `disk` fault): each broker's storage is a tmpfs of `BROKER_DISK_BYTES` of its own, which
  the fault fills to the last byte with one ballast file (`BALLAST`, which the broker ignores: it is not a
  partition directory) and empties by deleting it.
- `PowerDisks` (the `power` fault): each node's data directory `<data_dir>/<node>` is a power-loss
  filesystem (deploy/lazyfs.py) over `<data_dir>/.backing/<node>`. Cutting a node's power drops every
  write it did not fsync and mounts its directory again with a cold page cache; the node itself must have
  been killed first (its further writes would fail with EIO).

With both faults a broker's tmpfs holds its backing directory, so the ballast fills what the power-loss
filesystem writes to (the broker sees ENOSPC through it). Every mount is undone by `unmount()` / `close()`,
by path, also after a failure.
"""

from __future__ import annotations

import errno
import logging
import os
import subprocess
from pathlib import Path

from kanal.deploy.lazyfs import PowerLossFS, fuse_available

log = logging.getLogger("kanal.chaos.storage")

BALLAST = ".kanal-chaos-ballast"  # the file the disk fault fills a broker's filesystem with
BROKER_DISK_BYTES = 256 * 1024 * 1024
BACKING = ".backing"  # under the data directory: what the power-loss mounts write to


def storage_root(data_dir: Path, power: bool) -> Path:
    """Where a node's bytes really live: `<data_dir>/<node>` itself, or its backing directory when the
    node's data directory is a power-loss mount."""
    return data_dir / BACKING if power else data_dir


class BrokerDisks:
    """A tmpfs per broker under `root` (when sized), filled and emptied by the disk fault."""

    def __init__(self, root: Path, size_bytes: int | None) -> None:
        self.root = root
        self.size_bytes = size_bytes
        self.mounts: list[Path] = []

    def mount(self, names: list[str]) -> None:
        if self.size_bytes is None:
            return
        for name in names:
            if name.startswith("broker-"):
                path = self.root / name
                path.mkdir(parents=True, exist_ok=True)
                subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size_bytes}",
                                f"kanal-chaos-{os.getpid()}", str(path)], check=True, capture_output=True)
                self.mounts.append(path)

    def _ballast(self, name: str) -> Path:
        if self.root / name not in self.mounts:
            raise RuntimeError(
                f"{name} has no disk of its own to fill (the disk fault needs broker_disk_bytes)"
            )
        return self.root / name / BALLAST

    def fill(self, name: str) -> None:
        """Fill the broker's data filesystem to the last byte with one file."""
        path = self._ballast(name)
        with open(path, "ab") as f:
            # Whole free space first, then ever smaller pieces: the filesystem's own bookkeeping makes the
            # exact free byte count unreliable, so fill until it says no at 4 KiB.
            stat = os.statvfs(path.parent)
            chunk = stat.f_bavail * stat.f_frsize
            while chunk >= 4096:
                try:
                    os.posix_fallocate(f.fileno(), os.fstat(f.fileno()).st_size, chunk)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    chunk //= 2

    def empty(self, name: str) -> None:
        self._ballast(name).unlink(missing_ok=True)

    def unmount(self) -> None:
        for mount in reversed(self.mounts):
            result = subprocess.run(["umount", str(mount)], capture_output=True, text=True, check=False)
            if result.returncode != 0:
                log.warning("could not unmount %s: %s", mount, result.stderr.strip())
        self.mounts.clear()


class PowerDisks:
    """A power-loss mount per node data directory (when `enabled`). `allow_other` lets a container's user
    in (the containers target)."""

    def __init__(self, data_dir: Path, enabled: bool, *, allow_other: bool = False) -> None:
        self.data_dir = data_dir
        self.enabled = enabled
        self.allow_other = allow_other
        self.mounts: dict[str, PowerLossFS] = {}

    def mount(self, names: list[str]) -> None:
        if not self.enabled:
            return
        reason = fuse_available()
        if reason is not None:
            raise RuntimeError(f"the power fault needs FUSE: {reason}")
        for name in names:
            fs = PowerLossFS(
                self.data_dir / BACKING / name, self.data_dir / name, allow_other=self.allow_other
            )
            self.mounts[name] = fs
            fs.mount()

    def cut(self, name: str) -> dict:
        """Drop every write `name` did not fsync and mount its directory again (its process is dead)."""
        if name not in self.mounts:
            raise RuntimeError(
                f"{name}'s data directory is not a power-loss mount (the power fault needs them)"
            )
        fs = self.mounts[name]
        result = fs.cut_power()
        fs.mount()
        return result

    def close(self) -> None:
        for fs in self.mounts.values():
            fs.close()
        self.mounts.clear()
