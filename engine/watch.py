"""`trace watch GRAPH` as a library: notice edits of what a graph read, run again, say why.

What is watched is `Graph.reads` (every pipeline file, template, input and package-set tree the
loader read), by the full stat signature the no-op fast path uses (engine/fastpath.py: size,
mtime, inode, ctime, device, mode; an edit that keeps the mtime still moves the ctime), polled.
Where the signature is ambiguous (a file modified within the last second: an edit in the same
clock tick could keep every field), the snapshot also holds the file's sha256, so two edits in
one tick are told apart by content.

The loop sleeps in inotify (engine/inotify.py: the directories of every read), so an edit wakes
it at once; it also looks every `interval` seconds. Either way what changed is decided by the
stat signature and digests above, never by the events; events the kernel lost (a queue overflow,
a watched directory removed or moved) are a full plan whatever the signature says.

Each round is told why it runs: the changed paths, or a sentence when the change cannot be
accounted for (a read that is unreadable or gone, a snapshot that failed, lost events), which
must be a full plan: the graph loaded again (through the load cache, engine/loadcache.py),
planned against the index, the dirty frontier built. `trace watch` (engine/cli/watch.py) answers
an edit of step tables in pipeline files from its resident graph instead (engine/resident.py:
only the edited steps re-validated, unchanged steps' keys and `.drv` paths from memory), and
anything else with a full plan. Standard library only.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from engine.fastpath import Entry, stamp

AMBIGUOUS_NS = 1_000_000_000  # modified this recently: the signature alone may not see an edit
Reads = Sequence[tuple[Path, Sequence[str]]]


@dataclass(frozen=True)
class Snapshot:
    """The stat entries of everything read, the sha256 of the ambiguous files, and the paths
    modified since the load began (racy: the loader may have read them before the edit)."""

    entries: tuple[Entry, ...]
    digests: tuple[tuple[str, str], ...]
    racy: tuple[str, ...] = ()


def _sha256(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def snapshot(
    reads: Reads, now_ns: int | None = None, since_ns: int | None = None
) -> Snapshot | None:
    """The snapshot of `reads`, or None when any of it cannot be read (then: a full plan).
    `since_ns`: when the load began; what was modified after it is racy."""
    import stat as st

    now = time.time_ns() if now_ns is None else now_ns
    try:
        entries = stamp([(Path(p), list(ex)) for p, ex in reads])
        digests = tuple(
            (e[0], _sha256(e[0]))
            for e in entries
            if st.S_ISREG(e[6]) and max(e[2], e[4]) >= now - AMBIGUOUS_NS
        )
    except OSError:
        return None
    racy = () if since_ns is None else tuple(e[0] for e in entries if max(e[2], e[4]) >= since_ns)
    return Snapshot(tuple(entries), digests, racy)


def changed(before: Snapshot | None, after: Snapshot | None) -> list[str]:
    """The paths whose entry or digest differs ('(unreadable)' when a snapshot failed)."""
    if before is None or after is None:
        return ["(a read could not be stat'ed or read: full plan)"]
    if before.racy:  # modified while the last run loaded: what it read is unknown
        return [f"{p} (modified during the last run)" for p in before.racy]
    old = {e[0]: e for e in before.entries}
    new = {e[0]: e for e in after.entries}
    paths = {p for p in old.keys() | new.keys() if old.get(p) != new.get(p)}
    da, db = dict(before.digests), dict(after.digests)
    paths |= {p for p in da.keys() & db.keys() if da[p] != db[p]}
    return sorted(paths)


@dataclass
class Round:
    """One run of the watch loop: what changed, and each step that was not cached, with why."""

    why: list[str]
    rebuilt: list[tuple[str, str, list[str]]]  # (step, status, reasons)
    ok: bool


def rebuilt(result: Any) -> list[tuple[str, str, list[str]]]:
    return [
        (r.id, r.status, list(r.reasons))
        for r in result.steps.values()
        if r.status not in ("cached",)
    ]


class Waiter(Protocol):
    """What wakes the loop early (engine/inotify.py Changes), one for the whole watch: `watch`
    adds a round's reads, `wait` returns 'changed', 'lost' (events were lost: a full plan) or
    'timeout'; `ok` False: it cannot, so the loop polls."""

    ok: bool

    def watch(self, reads: Reads) -> None: ...

    def wait(self, timeout: float) -> str: ...

    def close(self) -> None: ...


LOST = "(inotify lost events or a watched directory: full plan)"


class _Watcher:
    """The loop's waiter: made once, on the first round's reads; each round adds its reads."""

    def __init__(self, changes: Callable[[Reads], Waiter] | None) -> None:
        self.changes = changes
        self.waiter: Waiter | None = None

    def take(self, reads: Reads, began: int) -> Snapshot | None:
        """Watch `reads`, then their snapshot (in that order: an edit after the snapshot always
        wakes the waiter). `began`: when the round's load began; what was modified since is
        racy."""
        if self.changes is not None:
            if self.waiter is None:
                self.waiter = self.changes(reads)
            else:
                self.waiter.watch(reads)
        return snapshot(reads, since_ns=began)

    def next_change(
        self, reads: Reads, before: Snapshot | None, interval: float, sleep: Callable[[float], None]
    ) -> list[str]:
        """Wait for a change of what the last round read: woken by the waiter (or every
        `interval` seconds, also with a waiter), decided by the full stat signature and digests.
        A waiter's loss is a full plan, whatever the signature says."""
        waiter = self.waiter
        while True:
            lost = False
            if before is None or not before.racy:
                if waiter is not None and waiter.ok:
                    lost = waiter.wait(interval) == "lost"
                else:
                    sleep(interval)
            why = changed(before, snapshot(reads))
            if lost:
                return [LOST, *why]
            if why:
                return why

    def close(self) -> None:
        if self.waiter is not None:
            self.waiter.close()
            self.waiter = None


def watch(
    load_and_run: Callable[[Callable[[Reads], None], list[str]], Any],
    report: Callable[[Round], None],
    *,
    interval: float = 0.2,
    rounds: int | None = None,
    sleep: Callable[[float], None] = time.sleep,
    changes: Callable[[Reads], Waiter] | None = None,
) -> int:
    """Run, then wait for a change of what the last run read and run again. `load_and_run`
    gets a function to call with the graph's reads right after loading, before building (the
    snapshot is taken there), and why this round runs (the changed paths, or a sentence when
    the change cannot be accounted for: then it must run a full plan). `changes`: makes the
    waiter, once, for the first round's reads (None: poll every `interval`). `rounds`: stop
    after that many runs (None: until interrupted). A round that loaded nothing (it failed)
    keeps watching what the round before it read. Returns how many runs were made."""
    why = ["first run"]
    made = 0
    reads: Reads = ()
    w = _Watcher(changes)
    try:
        while rounds is None or made < rounds:
            taken: list[tuple[Reads, Snapshot | None]] = []
            began = time.time_ns()

            def take(r: Reads, began: int = began, taken: list[Any] = taken) -> None:
                taken.append((r, w.take(r, began)))

            result = load_and_run(take, why)
            made += 1
            report(Round(why, rebuilt(result), bool(result.ok)))
            if rounds is not None and made >= rounds:
                break
            if taken:
                reads, before = taken[-1]
            else:
                before = w.take(reads, began)
            why = w.next_change(reads, before, interval, sleep)
    finally:
        w.close()
    return made


def lines(r: Round, how: str = "") -> Iterable[str]:
    """What `trace watch` prints for a round (`how`: how it was planned, e.g. 'full plan')."""
    shown = ", ".join(r.why[:5]) + (" …" if len(r.why) > 5 else "")
    yield f"watch: {shown}" + (f" [{how}]" if how else "")
    if not r.rebuilt:
        yield "  nothing to rebuild: every step cached"
    for sid, status, reasons in r.rebuilt:
        yield f"  {status} {sid}" + (f" ({'; '.join(reasons)})" if reasons else "")
    yield "  ok" if r.ok else "  FAILED (see above); watching for the next edit"
