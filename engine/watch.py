"""`trace watch GRAPH` as a library: notice edits of what a graph read, run again, say why.

What is watched is `Graph.reads` (every pipeline file, template, input and package-set tree the
loader read), by the full stat signature the no-op fast path uses (engine/fastpath.py: size,
mtime, inode, ctime, device, mode; an edit that keeps the mtime still moves the ctime), polled.
Where the signature is ambiguous (a file modified within the last second: an edit in the same
clock tick could keep every field), the snapshot also holds the file's sha256, so two edits in
one tick are told apart by content.

A change, and anything the watcher cannot account for (a read that is unreadable or gone, a
snapshot that fails), runs the whole plan again: the graph is loaded again (through the load
cache, engine/loadcache.py, which re-validates only what it cannot prove unchanged), planned
against the index, and the dirty frontier is built; nothing is ever answered from the previous
round's keys. This is the correctness half of issue 30's resident mode; keeping validated steps
and `.drv` paths in memory across rounds (the speed half) is not done (docs/performance.md).
Standard library only.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def _taker(taken: list[tuple[Reads, Snapshot | None]], began: int) -> Callable[[Reads], None]:
    return lambda reads: taken.append((reads, snapshot(reads, since_ns=began)))


def watch(
    load_and_run: Callable[[Callable[[Reads], None]], Any],
    report: Callable[[Round], None],
    *,
    interval: float = 0.2,
    rounds: int | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Run, then poll what the last run read and run again when it changes. `load_and_run`
    calls its argument with the graph's reads right after loading, before building (the
    snapshot is taken there). `rounds`: stop after that many runs (None: until interrupted).
    Returns how many runs were made."""
    why = ["first run"]
    made = 0
    while rounds is None or made < rounds:
        taken: list[tuple[Reads, Snapshot | None]] = []
        result = load_and_run(_taker(taken, time.time_ns()))
        made += 1
        report(Round(why, rebuilt(result), bool(result.ok)))
        if rounds is not None and made >= rounds:
            break
        reads, before = taken[-1] if taken else ((), None)
        while True:
            if before is None or not before.racy:
                sleep(interval)
            why = changed(before, snapshot(reads))
            if why:
                break
    return made


def lines(r: Round) -> Iterable[str]:
    """What `trace watch` prints for a round."""
    shown = ", ".join(r.why[:5]) + (" …" if len(r.why) > 5 else "")
    yield f"watch: {shown}"
    if not r.rebuilt:
        yield "  nothing to rebuild: every step cached"
    for sid, status, reasons in r.rebuilt:
        yield f"  {status} {sid}" + (f" ({'; '.join(reasons)})" if reasons else "")
    yield "  ok" if r.ok else "  FAILED (see above); watching for the next edit"
