"""What Nix actually read of a package set during a full run, seen by the kernel (inotify), so
a later commit that changes none of it can keep the verdict (engine/fork/memo.py's carry-over).

Every directory of the package-set tree is watched for opens (IN_OPEN: a file read, a directory
listed) while the run's Nix processes evaluate it; afterwards each opened file is recorded with
the sha256 of its bytes and each listed directory with the sorted names in it. Only opens are
seen: a `builtins.pathExists` that never opens its directory is not, which is why the listing of
the directory of every file read is recorded too. Anything that makes the record incomplete (a
queue overflow, a watch that could not be added, no inotify on this system) gives None: no
carry-over, the full path. Linux only; standard library only (ctypes)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from engine.inotify import (
    IN_CLOEXEC,
    IN_ISDIR,
    IN_NONBLOCK,
    IN_OPEN,
    IN_Q_OVERFLOW,
    MAX_DIRS,
    parse,
)
from engine.inotify import libc as _libc


class NixReads:
    """Watch `root`'s tree from construction until `collect()`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._fd = -1
        self._dirs: dict[int, str] = {}  # watch descriptor -> directory, relative to root
        self._complete = False
        libc = _libc()
        if libc is None or not root.is_dir():
            return
        self._libc = libc
        self._fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if self._fd < 0:
            return
        # the walk above opened every directory: those events are this process's own
        self._complete = self._watch_tree() and self._events() is not None

    def _watch_tree(self) -> bool:
        for base, dirs, _ in os.walk(self.root):
            dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(base, d))]
            if len(self._dirs) >= MAX_DIRS:
                return False
            wd = self._libc.inotify_add_watch(self._fd, os.fsencode(base), IN_OPEN)
            if wd < 0:
                return False
            self._dirs[wd] = os.path.relpath(base, self.root)
        return True

    def _events(self) -> tuple[set[str], set[str]] | None:
        files: set[str] = set()
        dirs: set[str] = set()
        while True:
            try:
                data = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                return files, dirs
            for wd, mask, raw in parse(data):
                if mask & IN_Q_OVERFLOW or wd not in self._dirs:
                    return None
                where = os.path.normpath(os.path.join(self._dirs[wd], os.fsdecode(raw)))
                (dirs if mask & IN_ISDIR or not raw else files).add(where)

    def collect(self) -> dict[str, str] | None:
        """{relative path: digest} of what was opened (a file: `sha256:...` of its bytes; a
        directory: `dir:...` of its names), the directory of every file included; None when
        the record would be incomplete. Stops watching."""
        try:
            got = self._events() if self._complete else None
        finally:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
        if got is None:
            return None
        files, dirs = got
        dirs |= {os.path.dirname(f) or "." for f in files}
        return digests(self.root, files, dirs)


def digests(root: Path, files: set[str], dirs: set[str]) -> dict[str, str] | None:
    """What `collect` records, for these paths under `root` now (None: one is unreadable)."""
    out: dict[str, str] = {}
    for rel in sorted(files | dirs):
        out[rel] = _digest(root / rel, rel in dirs)
    return out


def _digest(path: Path, listing: bool) -> str:
    """`dir:` + the digest of a directory's sorted names, `sha256:` + a file's, or `absent`."""
    try:
        if listing and path.is_dir():
            names = "\0".join(sorted(os.listdir(path)))
            return "dir:" + hashlib.sha256(names.encode("utf-8", "surrogateescape")).hexdigest()
        return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    except (FileNotFoundError, NotADirectoryError):
        return "absent"
    except OSError:
        return "unreadable"


def unchanged(root: Path, recorded: dict[str, str]) -> str | None:
    """None when every recorded path under `root` has its recorded digest, else the first
    that does not."""
    for rel, digest in sorted(recorded.items()):
        if digest == "unreadable" or _digest(root / rel, digest.startswith("dir:")) != digest:
            return rel
    return None
