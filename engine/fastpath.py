"""The no-op fast path of `trace run`: answer "nothing changed" from stat() alone.

A full run parses TOML, validates with pydantic and hashes inputs: ~0.2 s before any Nix work. When
a run succeeds, it also records a *stamp*: the full stat signature (size, mtime_ns, inode,
ctime_ns, device) of every file and directory that loading read (pipeline files, templates, inputs,
the package-set tree), and the output path of every step. The stamp is taken right after loading,
*before* the build, and is recorded only if the same stamp is seen again after the build. The next
`trace run` of the same graph first compares the stamp with the file system; if nothing differs and
every output still exists, every step is cached and the run ends there, having imported nothing but
the standard library. Any difference, or anything this module does not understand, falls back to
the full run (which is always correct).

An edit that keeps the mtime (`cp -p`, `rsync -t`, `tar x`, `touch -d`) still changes the ctime
(which no tool can set) and usually the inode. As in git's index, a file modified in the same
instant as it was recorded could look unchanged: entries whose mtime *or ctime* is not older than
the run's start are never recorded, nor is a stamp that changed during the run, so the run after an
edit made during a run takes the full path. Warnings of the recorded run (a NONDETERMINISTIC step)
are recorded with it and printed again by every fast answer.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from engine import __version__
from engine.readonly import read_only_connection

SKIP = frozenset({".git", ".trace", "__pycache__", ".hypothesis"})  # = engine.hashing.SKIP_NAMES
# v3: + sandbox, the [nix] extra_sandbox_paths and their identity (engine/hostpaths.py)
TABLE = (
    "CREATE TABLE IF NOT EXISTS fastpath_v3 "
    "(name TEXT PRIMARY KEY, reads TEXT, stamp TEXT, outs TEXT, warnings TEXT, sandbox TEXT)"
)

Entry = tuple[str, int, int, int, int, int, int]


def _sig(path: str, st: os.stat_result) -> Entry:
    # a directory's size is meaningless; its mtime and ctime see entries added, removed, renamed
    size = -1 if stat.S_ISDIR(st.st_mode) else st.st_size
    return (path, size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns, st.st_dev, st.st_mode)


def _walk(root: str, exclude: frozenset[str], rel: str, out: list[Entry]) -> None:
    with os.scandir(os.path.join(root, rel) if rel else root) as it:
        for entry in it:
            relpath = f"{rel}/{entry.name}" if rel else entry.name
            if entry.name in SKIP or relpath in exclude:
                continue
            st = entry.stat(follow_symlinks=False)
            out.append(_sig(entry.path, st))
            if stat.S_ISDIR(st.st_mode):
                _walk(root, exclude, relpath, out)


def stamp(reads: Iterable[tuple[Path, Sequence[str]]]) -> list[Entry]:
    """The signature of every file and directory under the given paths (sorted)."""
    out: list[Entry] = []
    for path, exclude in reads:
        st = os.lstat(path)
        out.append(_sig(str(path), st))
        if stat.S_ISDIR(st.st_mode):
            _walk(str(path), frozenset(e.strip("/") for e in exclude), "", out)
    out.sort()
    return out


def name(entry: Path, root: Path) -> str:
    return json.dumps(
        # realpath: a symlink loop stays as written (the full load refuses it), never a crash
        [__version__, os.path.realpath(entry), str(root), os.environ.get("TRACE_DATA_DIR", "")]
    )


def record(
    db: sqlite3.Connection,
    key: str,
    reads: Iterable[tuple[Path, Sequence[str]]],
    outs: dict[str, str],
    since_ns: int,
    *,
    before: list[Entry] | None,
    warnings: Sequence[str] = (),
    sandbox: tuple[Sequence[str], str | None] = ((), None),
) -> bool:
    """Store the stamp of a successful run; refuse when anything could have changed during it.

    `before` is the stamp taken after loading, before the build: the stamp recorded is that one,
    and only if the file system still shows exactly it now and no entry was modified (mtime or
    ctime) since `since_ns`, the start of the run. On any doubt the old record is dropped too.
    `sandbox`: the graph's extra_sandbox_paths and the identity its keys were made with; a no-op
    is answered only while the files behind them still have it.
    """
    reads = [(Path(p), list(ex)) for p, ex in reads]
    db.execute(TABLE)
    try:
        entries = stamp(reads)
    except OSError:
        entries = None
    if (
        entries is None
        or before is None
        or entries != before
        or any(e[2] >= since_ns or e[4] >= since_ns for e in entries)
    ):
        db.execute("DELETE FROM fastpath_v3 WHERE name = ?", (key,))
        return False
    db.execute(
        "INSERT OR REPLACE INTO fastpath_v3 VALUES (?, ?, ?, ?, ?, ?)",
        (
            key,
            json.dumps([(str(p), ex) for p, ex in reads]),
            json.dumps(entries),
            json.dumps(sorted(outs.items())),
            json.dumps(list(warnings)),
            json.dumps([list(sandbox[0]), sandbox[1]]),
        ),
    )
    return True


def forget(db: sqlite3.Connection, key: str) -> None:
    """Drop the record of a graph (its run did not succeed, or wrote nothing to stamp)."""
    db.execute(TABLE)
    db.execute("DELETE FROM fastpath_v3 WHERE name = ?", (key,))


def _parse(argv: Sequence[str]) -> tuple[Path, Path, Path] | None:
    """`run GRAPH [--root R] [--state-dir S] [-q] [-j N] [--wait S]`; anything else: None."""
    graph: str | None = None
    opts: dict[str, str] = {}
    args = list(argv[1:])
    while args:
        a = args.pop(0)
        if a in ("-q", "--quiet"):
            continue
        if a in ("--root", "--state-dir", "-j", "--jobs", "--wait") and args:
            opts[a] = args.pop(0)
        elif not a.startswith("-") and graph is None:
            graph = a
        else:
            return None  # --json, --help, unknown flags: the full path handles them
    if graph is None:
        return None
    root = Path(opts.get("--root", ".")).resolve()
    state = Path(opts["--state-dir"]).resolve() if "--state-dir" in opts else root / ".trace"
    return Path(graph), root, state


def try_noop(argv: Sequence[str]) -> int | None:
    """Exit status of a no-op `trace run`, or None when the full run must decide."""
    parsed = _parse(argv)
    if parsed is None:
        return None
    graph, root, state = parsed
    db_path = state / "state.db"
    if not db_path.is_file():
        return None
    try:
        db = read_only_connection(db_path)
        try:
            row = db.execute(
                "SELECT reads, stamp, outs, warnings, sandbox FROM fastpath_v3 WHERE name = ?",
                (name(graph, root),),
            ).fetchone()
        finally:
            db.close()
    except sqlite3.Error:
        return None
    if row is None:
        return None
    reads = [(Path(p), ex) for p, ex in json.loads(row[0])]
    recorded = [tuple(e) for e in json.loads(row[1])]
    outs: list[list[str]] = json.loads(row[2])
    try:
        current = stamp(reads)
    except OSError:
        return None
    if current != recorded or not all(os.path.exists(out) for _, out in outs):
        return None
    from engine import hostpaths

    paths, identity = json.loads(row[4])
    if hostpaths.identity(paths) != identity:
        return None
    print(f"{len(outs)} steps: {len(outs)} cached", file=sys.stdout)
    for line in json.loads(row[3]):
        print(line, file=sys.stderr)
    return 0
