"""Where a gate's many short-lived files go: a memory file system when there is one.

Nix's sandbox has a tmpfs at /dev/shm; its build directory (TMPDIR, /build) is on the host's
disk. A batch of harness runs creates and removes a few hundred files and directories per run
(the working directory, the package's view, wrappers, sockets): on a disk file system that
churn is paid in the kernel (ext4 scans its inode tables for a free inode that was not
recently deleted, ~15 % of a variant batch's CPU on the shared machine, `perf`), on tmpfs it is
not. Where the files live does not show in a record (the harness normalises every run's
directories to `<tmp>`, `<work>`, `$TARGET`).
"""

from __future__ import annotations

import os
import stat
import tempfile

SHM = "/dev/shm"
# room left on the memory file system beside what the runs hold at once
SHM_SPARE = 64 << 20


def scratch_root() -> str:
    """A memory file system when there is one (/dev/shm, also in Nix's sandbox), else the
    temporary directory (the fuzzing loop's files)."""
    if os.path.isdir(SHM) and os.access(SHM, os.W_OK | os.X_OK):
        return SHM
    return tempfile.gettempdir()


def tree_bytes(path: str) -> int:
    """Bytes of the regular files under `path` (symlinks not followed)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    return total


def runs_root(trees: list[str], parallel: int, fallback: str) -> str:
    """Where a batch of harness runs makes its runs' directories: /dev/shm when it has room for
    `parallel` runs at a time, each a copy of the largest of `trees` (the package a run's view
    copies) and as much again for its working directory, plus SHM_SPARE; else `fallback` (the
    derivation's TMPDIR). A run never fills the memory file system it was put on."""
    root = scratch_root()
    if root != SHM:
        return fallback
    largest = max((tree_bytes(t) for t in trees), default=0)
    st = os.statvfs(SHM)
    free = st.f_bavail * st.f_frsize
    return SHM if free >= 2 * parallel * largest + SHM_SPARE else fallback
