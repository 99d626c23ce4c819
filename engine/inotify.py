"""Linux inotify through ctypes (standard library only): the libc handle and the event records
that engine/fork/nixreads.py (what Nix opened) and `trace watch` (engine/watch.py: what was
edited) read.

`Changes` wakes `trace watch` as soon as something in the directories of a graph's reads changes.
It only wakes: what changed is decided by comparing the full stat signature (and digests) of
everything read, as before. It says `lost` when the kernel dropped events (a queue overflow) or
a watched directory itself went away or moved: then the caller runs a full plan.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import select
import stat
import struct
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Literal

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_OPEN = 0x00000020
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ISDIR = 0x40000000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
EVENT = struct.Struct("iIII")

EDITS = (
    IN_MODIFY
    | IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
)
LOST = IN_Q_OVERFLOW | IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED
MAX_DIRS = 20_000  # more directories than this: not watched (the caller polls)
SETTLE = 0.1  # seconds to wait for the close of a file seen being written


@functools.cache
def libc() -> ctypes.CDLL | None:
    """The C library, found once per process: `find_library` runs `ldconfig -p` in a child
    process (milliseconds), which `trace watch` would otherwise pay in every round, between
    the edit and the build."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name, use_errno=True) if name else None
    except OSError:
        return None


Event = tuple[int, int, bytes]  # watch descriptor, mask, name


def parse(data: bytes) -> Iterator[Event]:
    """The events of one read() of an inotify descriptor."""
    offset = 0
    while offset < len(data):
        wd, mask, _, size = EVENT.unpack_from(data, offset)
        name = data[offset + EVENT.size : offset + EVENT.size + size].rstrip(b"\0")
        offset += EVENT.size + size
        yield wd, mask, name


def directories(reads: Iterable[tuple[Path, Sequence[str]]]) -> set[str]:
    """The directories whose entries hold every read: a file's parent, a tree's every folder."""
    dirs: set[str] = set()
    for path, _ in reads:
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            dirs.add(os.path.dirname(path))
            continue
        if not stat.S_ISDIR(mode):
            dirs.add(os.path.dirname(path))
            continue
        dirs.add(os.path.dirname(path))  # the tree itself renamed or replaced
        for base, subdirs, _ in os.walk(path):
            subdirs[:] = [d for d in subdirs if not os.path.islink(os.path.join(base, d))]
            dirs.add(base)
    return dirs


Wake = Literal["changed", "lost", "timeout"]


class Changes:
    """Watch the directories of `reads` for edits from construction until `close()`; `watch`
    adds the directories of a later round's reads. One descriptor for the whole `trace watch`:
    closing an inotify descriptor waits for the kernel's RCU grace period (~20 ms wall, measured
    in a round between the edit and the build), and its queue keeps the events of a round's
    build for the next wait. `ok` is False when inotify is not there or a watch could not be
    added (then: poll); after a loss, the next `watch` starts a new descriptor."""

    def __init__(self, reads: Iterable[tuple[Path, Sequence[str]]] = ()) -> None:
        self.ok = False
        self._fd = -1
        self._dirs: set[str] = set()
        self.watch(reads)

    def watch(self, reads: Iterable[tuple[Path, Sequence[str]]]) -> None:
        """Also watch the directories of `reads` (those watched already keep their watch and
        their queued events)."""
        if not self.ok:  # never started, failed or lost: start afresh
            self.close()
        lib = libc()
        if lib is None:
            return
        if self._fd < 0:
            self._fd = lib.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
            if self._fd < 0:
                return
        self.ok = False
        dirs = directories(reads) - self._dirs
        if len(dirs) + len(self._dirs) > MAX_DIRS:
            return
        for d in sorted(dirs):
            if lib.inotify_add_watch(self._fd, os.fsencode(d), EDITS) < 0:
                return
            self._dirs.add(d)
        self.ok = True

    def _read(self, timeout: float) -> list[Event] | None:
        """The events that arrive within `timeout` seconds (None: none did)."""
        ready, _, _ = select.select([self._fd], [], [], max(timeout, 0.0))
        if not ready:
            return None
        try:
            return list(parse(os.read(self._fd, 1 << 16)))
        except BlockingIOError:
            return []

    def wait(self, timeout: float) -> Wake:
        """Block until an edit (then wait up to SETTLE for the close of files seen being
        written, so a round does not start on a half-written file), a loss, or `timeout`."""
        events = self._read(timeout)
        if events is None:
            return "timeout"
        writing: set[tuple[int, bytes]] = set()
        deadline = time.monotonic() + SETTLE
        while True:
            for wd, mask, name in events:
                if mask & LOST:
                    self.ok = False  # a watch is gone or events were dropped: start afresh
                    return "lost"
                if mask & IN_MODIFY:
                    writing.add((wd, name))
                if mask & IN_CLOSE_WRITE:
                    writing.discard((wd, name))
            left = deadline - time.monotonic()
            if not writing or left <= 0:
                return "changed"
            events = self._read(left) or []

    def close(self) -> None:
        self.ok = False
        self._dirs = set()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
