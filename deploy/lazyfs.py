"""A power-loss filesystem, after Jepsen's LazyFS: writes that were never fsynced can be lost.

Used by the durability tests (the `power_loss_fs` fixture in tests/conftest.py) and by `kanal chaos`'s
`power` nemesis (deploy/chaos), which puts each node's data directory on one and cuts the power of a node or
of every controller at once. It lives in the product because the chaos runner is a product.

SIGKILL keeps the page cache, so killing a process never tests durability. This harness mounts a FUSE
filesystem (mfusepy over Debian's libfuse3 / fusermount3) in front of a backing directory. Every
operation goes through to the backing directory at once (processes read their own writes as usual), but
for each file the filesystem remembers what the file held at its last fsync: the bytes of every 4 KiB
page overwritten since, its size, and the list of writes and truncations since. `cut_power()` puts every
file back to its last-fsynced state (optionally keeping the first N of the pending operations, in the
order they were issued: a kernel that wrote part of its dirty data back before the power went), then
refuses every further operation with EIO and unmounts. Mounting again gives processes exactly what
survived, with a cold page cache.

What it simulates:
- data and size of a regular file are durable only after fsync or fdatasync of that file (both are
  treated alike: fdatasync also makes the size durable, as on Linux for a size that grew);
- writes arriving after the cut (dirty mmap pages the kernel writes back late) are refused;
- a torn prefix of the unsynced operations survives, with `keep_first`.

What it does not simulate (documented semantics, so that tests do not over-claim):
- namespace operations (create, mkdir, rename, unlink, rmdir, link) are durable at once, as if the
  directory were fsynced after each; a file created since its last fsync survives, but with the size
  and bytes it had at its last fsync (zero bytes when never fsynced), as ext4 in data=ordered mode
  typically leaves it. A rename of a file whose data was fsynced therefore behaves atomically and
  durably, which is what the code under test relies on after fsyncing the directory;
- sub-page tearing inside one write, bit rot, reordering of writes inside `keep_first`, lying disks;
- fsync of the backing directory: the backing filesystem's page cache plays the disk.

Shared writable mmap works over it: the kernel writes dirty pages back to the daemon as plain writes (at
the latest when the file is closed), which count as unsynced; msync(MS_SYNC) reaches the daemon as an
fsync, as it does on Linux filesystems. It is not mounted direct_io, so the page cache is in the path.

Run as a daemon: `python -m kanal.deploy.lazyfs BACKING MOUNTPOINT [--allow-other]`; commands on stdin,
one per line, answered with one JSON line on stdout: `stats`, `cut [keep_first]`. Callers use
`PowerLossFS`, which starts the daemon, waits for the mount, and unmounts (fusermount3 -u, lazily if busy)
and closes the daemon's stdin, on which it exits. `--allow-other` lets users other than the mounting one
in (a container's user, for the chaos containers target); the daemon does every operation as its own user.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

PAGE_BYTES = 4096
MOUNT_TIMEOUT_S = 20.0


# -- the filesystem (runs in the daemon process) ---------------------------------------------------


@dataclass
class FileState:
    """What a file held at its last fsync, and what happened to it since."""

    durable_size: int
    saved_pages: dict[int, bytes] = field(default_factory=dict)
    ops: list[tuple[int, str, int, bytes]] = field(default_factory=list)  # (seq, "w"|"t", offset/size, data)


def _make_operations() -> Any:
    import mfusepy

    class PowerLossOperations(mfusepy.Operations):
        use_ns = True

        def __init__(self, backing: str) -> None:
            self.backing = backing
            self._mutex = threading.Lock()
            self.files: dict[str, FileState] = {}
            self.frozen = False
            self.seq = 0
            self.fsyncs = 0
            self.writes = 0

        def _real(self, path: str) -> str:
            return os.path.join(self.backing, path.lstrip("/"))

        def _check(self) -> None:
            if self.frozen:
                raise mfusepy.FuseOSError(errno.EIO)

        def _state(self, path: str, fh: int | None) -> FileState:
            state = self.files.get(path)
            if state is None:
                size = os.fstat(fh).st_size if fh is not None else os.stat(self._real(path)).st_size
                state = self.files[path] = FileState(size)
            return state

        def _save_pages(self, state: FileState, fd: int, start: int, end: int) -> None:
            for page in range(start // PAGE_BYTES, (min(end, state.durable_size) - 1) // PAGE_BYTES + 1):
                if page * PAGE_BYTES < state.durable_size and page not in state.saved_pages:
                    state.saved_pages[page] = os.pread(fd, PAGE_BYTES, page * PAGE_BYTES)

        # -- data

        def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
            with self._mutex:
                self._check()
                state = self._state(path, fh)
                self._save_pages(state, fh, offset, offset + len(data))
                self.seq += 1
                self.writes += 1
                state.ops.append((self.seq, "w", offset, bytes(data)))
                return os.pwrite(fh, data, offset)

        def truncate(self, path: str, length: int, fh: int | None = None) -> int:
            with self._mutex:
                self._check()
                state = self._state(path, fh)
                fd = fh if fh is not None else os.open(self._real(path), os.O_RDWR)
                try:
                    self._save_pages(state, fd, length, state.durable_size)
                    self.seq += 1
                    state.ops.append((self.seq, "t", length, b""))
                    os.ftruncate(fd, length)
                finally:
                    if fh is None:
                        os.close(fd)
                return 0

        def fsync(self, path: str, datasync: int, fh: int) -> int:
            with self._mutex:
                self._check()
                self.fsyncs += 1
                self.files.pop(path, None)  # what it holds now is what survives
                return 0

        def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
            with self._mutex:
                self._check()
                return 0

        def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
            with self._mutex:
                self._check()
                return os.pread(fh, size, offset)

        # -- files and directories

        def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
            with self._mutex:
                self._check()
                st = os.lstat(self._real(path)) if fh is None else os.fstat(fh)
                keys = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_ino", "st_dev",
                        "st_atime_ns", "st_mtime_ns", "st_ctime_ns")
                attrs = {k.replace("_ns", ""): getattr(st, k) for k in keys}
                attrs["st_blocks"], attrs["st_blksize"] = st.st_blocks, st.st_blksize
                return attrs

        def readdir(self, path: str, fh: int) -> list[str]:
            with self._mutex:
                self._check()
                return [".", "..", *os.listdir(self._real(path))]

        def open(self, path: str, flags: int) -> int:
            with self._mutex:
                self._check()
                return os.open(self._real(path), flags & ~os.O_CREAT)

        def create(self, path: str, mode: int, fi: Any = None) -> int:
            with self._mutex:
                self._check()
                real = self._real(path)
                existed = os.path.exists(real)
                fd = os.open(real, os.O_RDWR | os.O_CREAT, mode)
                if not existed:
                    self.files[path] = FileState(0)
                return fd

        def release(self, path: str, fh: int) -> int:
            os.close(fh)
            return 0

        def flush(self, path: str, fh: int) -> int:
            return 0

        def unlink(self, path: str) -> int:
            with self._mutex:
                self._check()
                os.unlink(self._real(path))
                self.files.pop(path, None)
                return 0

        def rename(self, old: str, new: str) -> int:
            with self._mutex:
                self._check()
                os.rename(self._real(old), self._real(new))
                self.files.pop(new, None)
                prefix = old.rstrip("/") + "/"
                for key in [k for k in self.files if k == old or k.startswith(prefix)]:
                    self.files[new + key[len(old):]] = self.files.pop(key)
                return 0

        def mkdir(self, path: str, mode: int) -> int:
            with self._mutex:
                self._check()
                os.mkdir(self._real(path), mode)
                return 0

        def rmdir(self, path: str) -> int:
            with self._mutex:
                self._check()
                os.rmdir(self._real(path))
                return 0

        def chmod(self, path: str, mode: int) -> int:
            with self._mutex:
                self._check()
                os.chmod(self._real(path), mode)
                return 0

        def chown(self, path: str, uid: int, gid: int) -> int:
            with self._mutex:
                self._check()
                os.chown(self._real(path), uid, gid)
                return 0

        def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
            with self._mutex:
                self._check()
                if times is None:  # "now", as utimensat(2) with no times
                    os.utime(self._real(path))
                else:
                    os.utime(self._real(path), ns=times)
                return 0

        def access(self, path: str, amode: int) -> int:
            with self._mutex:
                self._check()
                if not os.access(self._real(path), amode):
                    raise mfusepy.FuseOSError(errno.EACCES)
                return 0

        def statfs(self, path: str) -> dict[str, int]:
            st = os.statvfs(self._real(path))
            keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files", "f_flag",
                    "f_frsize", "f_namemax")
            return {k: getattr(st, k) for k in keys}

        # -- control (the daemon's stdin thread)

        def stats(self) -> dict[str, Any]:
            with self._mutex:
                pending = sum(len(s.ops) for s in self.files.values())
                return {"pending_ops": pending, "files_dirty": len(self.files), "fsyncs": self.fsyncs,
                        "writes": self.writes, "frozen": self.frozen}

        def cut(self, keep_first: int = 0) -> dict[str, Any]:
            """Put every file back to its last fsync, re-apply the first `keep_first` pending operations
            (in issue order), and refuse everything from now on."""
            with self._mutex:
                self.frozen = True
                all_ops = sorted(seq for s in self.files.values() for seq, *_ in s.ops)
                kept = set(all_ops[: max(0, keep_first)])
                dropped = 0
                for path, state in self.files.items():
                    real = self._real(path)
                    if not os.path.exists(real):
                        continue
                    fd = os.open(real, os.O_RDWR)
                    try:
                        for page, data in state.saved_pages.items():
                            os.pwrite(fd, data, page * PAGE_BYTES)
                        os.ftruncate(fd, state.durable_size)
                        for seq, kind, where, data in state.ops:
                            if seq not in kept:
                                dropped += 1
                                continue
                            if kind == "w":
                                os.pwrite(fd, data, where)
                            else:
                                os.ftruncate(fd, where)
                    finally:
                        os.close(fd)
                self.files.clear()
                return {"dropped_ops": dropped, "kept_ops": len(all_ops) - dropped}

    return PowerLossOperations


def _serve(backing: str, mountpoint: str, allow_other: bool = False) -> None:
    import mfusepy

    ops = _make_operations()(backing)

    def control() -> None:
        for line in sys.stdin:
            words = line.split()
            if not words:
                continue
            if words[0] == "stats":
                reply = ops.stats()
            elif words[0] == "cut":
                reply = ops.cut(int(words[1]) if len(words) > 1 else 0)
            else:
                reply = {"error": f"unknown command {words[0]!r}"}
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()
        # The caller closes stdin after unmounting. The unmount alone does not end the FUSE loop when other
        # mount namespaces hold copies of the mount (each node that `ip netns exec` started after it was
        # mounted, each container): the kernel keeps the session until the last copy goes, and the loop
        # would wait for requests that never come. Exit here instead, between two operations (under the
        # mutex); every write has already reached the backing files, so nothing is lost by not unwinding.
        with ops._mutex:
            os._exit(0)

    threading.Thread(target=control, name="lazyfs-control", daemon=True).start()
    extra = {"allow_other": True} if allow_other else {}
    mfusepy.FUSE(ops, mountpoint, foreground=True, nothreads=True, fsname="kanal-lazyfs", **extra)


# -- the caller's side ---------------------------------------------------------------------------------


class PowerLossFS:
    """One power-loss mount of `backing` at `mountpoint`. Use as a context manager (or call `close()`):
    it never leaves a mount behind."""

    def __init__(self, backing: Path, mountpoint: Path, *, allow_other: bool = False) -> None:
        self.backing = backing
        self.mountpoint = mountpoint
        self.allow_other = allow_other
        self._proc: subprocess.Popen[str] | None = None
        self._log_path = backing.parent / f"{backing.name}.lazyfs.log"

    def __repr__(self) -> str:
        pid = None if self._proc is None else self._proc.pid
        return f"<PowerLossFS {self.mountpoint} backing={self.backing} daemon={pid}>"

    def __enter__(self) -> Self:
        self.mount()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def mounted(self) -> bool:
        return self._proc is not None and self._proc.poll() is None and os.path.ismount(self.mountpoint)

    def _in_mount_table(self) -> bool:
        # os.path.ismount says False for a mount whose daemon died ("transport endpoint is not
        # connected"); the kernel's table still lists it, and it must still be unmounted.
        target = os.path.realpath(self.mountpoint)
        with open("/proc/self/mounts") as mounts:
            return any(line.split()[1] == target for line in mounts if len(line.split()) > 1)

    def mount(self) -> None:
        if self._proc is not None:
            raise RuntimeError(f"{self!r} is already mounted")
        if self._in_mount_table():
            raise RuntimeError(f"{self.mountpoint} is already a mount point")
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        with open(self._log_path, "a") as err:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "kanal.deploy.lazyfs", str(self.backing), str(self.mountpoint),
                 *(["--allow-other"] if self.allow_other else [])],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
            )
        deadline = time.monotonic() + MOUNT_TIMEOUT_S
        while not os.path.ismount(self.mountpoint):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(
                    f"the power-loss filesystem did not mount: {self._log_path.read_text()[-2000:]}"
                )
            time.sleep(0.02)

    def _command(self, line: str) -> dict[str, Any]:
        if self._proc is None or self._proc.stdin is None or self._proc.stdout is None:
            raise RuntimeError(f"{self!r} is not mounted")
        self._proc.stdin.write(line + "\n")
        self._proc.stdin.flush()
        reply = self._proc.stdout.readline()
        if not reply:
            raise RuntimeError(f"the power-loss daemon died: {self._log_path.read_text()[-2000:]}")
        return json.loads(reply)

    def stats(self) -> dict[str, Any]:
        return self._command("stats")

    def cut_power(self, keep_first: int = 0) -> dict[str, Any]:
        """Drop every write not fsynced (but the first `keep_first` pending ones) and unmount. Stop the
        processes that use the mount first (SIGKILL): anything they do afterwards fails with EIO."""
        result = self._command(f"cut {keep_first}")
        self.close()
        return result

    def close(self) -> None:
        """Unmount and stop the daemon, whatever state it is in."""
        proc, self._proc = self._proc, None
        if self._in_mount_table():
            fusermount = shutil.which("fusermount3") or "fusermount3"
            done = subprocess.run([fusermount, "-u", str(self.mountpoint)], capture_output=True, check=False)
            if done.returncode != 0 and self._in_mount_table():
                subprocess.run(
                    [fusermount, "-u", "-z", str(self.mountpoint)], capture_output=True, check=False
                )
        if proc is not None:
            if proc.stdin is not None:
                proc.stdin.close()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
            if proc.stdout is not None:
                proc.stdout.close()


def fuse_available() -> str | None:
    """None when power-loss mounts can work here, else why not."""
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is missing (Debian: apt-get install fuse3)"
    try:
        import mfusepy  # noqa: F401
    except ImportError as exc:
        return f"mfusepy is missing (pip install 'kanal[chaos]'): {exc}"
    except OSError as exc:
        return f"mfusepy cannot load libfuse: {exc}"
    return None


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2], allow_other="--allow-other" in sys.argv[3:])
