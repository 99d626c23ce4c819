"""Digests of JSON values, files and trees, with a stat cache so unchanged files are never re-read.

Canonical JSON is RFC 8785 (JCS), so a key computed here can be recomputed by any other JCS
implementation. Tree digests cover sorted relative paths, entry types, the executable bit, file
contents and symlink targets: exactly what `builtins.path` copies into the Nix store.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import rfc8785

from engine.errors import InputError
from engine.readonly import read_only_connection

# Names never part of a hashed tree: version-control and trace's own state.
SKIP_NAMES = frozenset({".git", ".trace", "__pycache__", ".hypothesis"})
_CHUNK = 1 << 20


def canonical_json(value: Any) -> bytes:
    """RFC 8785 canonical JSON bytes of a JSON-compatible value."""
    return bytes(rfc8785.dumps(value))


def digest_json(value: Any) -> str:
    return hashlib.sha256(canonical_json(value)).hexdigest()


def key_digest(value: Any) -> str:
    """Digest for step keys: compact JSON with sorted keys, UTF-8 (json.dumps, ~6x faster).

    Identical to RFC 8785 for the values keys are made of (strings, integers, booleans, null,
    lists, objects with BMP keys); only floats and ordering among astral-plane key characters
    could differ, and keys never leave this engine. Evidence uses `canonical_json` (RFC 8785).
    """
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def digest_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


_TABLE = (
    "CREATE TABLE IF NOT EXISTS stat_cache (path TEXT PRIMARY KEY, size INTEGER,"
    " mtime_ns INTEGER, ino INTEGER, ctime_ns INTEGER, digest TEXT)"
)


class StatCache:
    """path + (size, mtime_ns, inode, ctime_ns) -> sha256, kept in the state database.

    A file whose stat signature is unchanged is not read again, as git's index and DVC do.
    Without a database it still works, just without memory between runs. As in git ("racily
    clean" entries), a digest is never persisted for a file modified (mtime or ctime) within
    RACY_NS of this cache's creation: a second edit in the same clock tick, keeping the size,
    would leave the whole signature unchanged. Such files are simply hashed again next time.
    """

    RACY_NS = 1_000_000_000

    def __init__(
        self, db: sqlite3.Connection | None = None, *, remember_trees: bool = False
    ) -> None:
        self._db = db
        # `remember_trees`: a directory is walked once for this cache's lifetime (`trace fork`:
        # one run, whose clean check pinned the tree at its start); None: walked every time
        self.trees: dict[tuple[str, frozenset[str]], str] | None = {} if remember_trees else None
        self._racy_from = time.time_ns() - self.RACY_NS
        self._mem: dict[str, tuple[int, int, int, int, str]] = {}
        self._dirty: dict[str, tuple[int, int, int, int, str]] = {}
        if db is not None:
            db.execute(_TABLE)
            self._load(db)

    @classmethod
    def read_only(cls, db_path: Path, *, remember_trees: bool = False) -> StatCache:
        """The cache of an existing state database, opened without writing or creating anything
        (so loading a graph that turns out to be invalid leaves no state behind); persist new
        entries later with `flush(db)`."""
        cache = cls(remember_trees=remember_trees)
        if db_path.is_file():
            try:
                db = read_only_connection(db_path)
                try:
                    cache._load(db)
                finally:
                    db.close()
            except sqlite3.Error:
                pass  # no table yet, or unreadable: start empty, nothing is lost
        return cache

    def _load(self, db: sqlite3.Connection) -> None:
        for row in db.execute("SELECT path, size, mtime_ns, ino, ctime_ns, digest FROM stat_cache"):
            self._mem[row[0]] = (row[1], row[2], row[3], row[4], row[5])

    def file_digest(self, path: Path | str, st: os.stat_result | None = None) -> str:
        # `str` from a tree walk: a Path per file was a third of a 40,000-file walk's time
        st = st or os.stat(path)
        sig = (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)
        key = os.fspath(path)
        hit = self._mem.get(key)
        if hit is not None and hit[:4] == sig:
            return hit[4]
        digest = _read_digest(Path(path))
        entry = (*sig, digest)
        self._mem[key] = entry
        if st.st_mtime_ns < self._racy_from and st.st_ctime_ns < self._racy_from:
            self._dirty[key] = entry
        return digest

    def flush(self, db: sqlite3.Connection | None = None) -> None:
        """Persist new entries into `db` (default: the database it was made with)."""
        db = db or self._db
        if db is None or not self._dirty:
            return
        db.execute(_TABLE)
        db.executemany(
            "INSERT OR REPLACE INTO stat_cache VALUES (?, ?, ?, ?, ?, ?)",
            [(k, *v) for k, v in self._dirty.items()],
        )
        self._dirty.clear()


def _walk(
    root: Path, rel: str = "", exclude: frozenset[str] = frozenset()
) -> Iterator[tuple[str, os.DirEntry[str]]]:
    with os.scandir(root / rel if rel else root) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        relpath = f"{rel}/{entry.name}" if rel else entry.name
        if entry.name in SKIP_NAMES or relpath in exclude:
            continue
        yield relpath, entry
        if entry.is_dir(follow_symlinks=False):
            yield from _walk(root, relpath, exclude)


def _special(path: Path, mode: int) -> InputError:
    """A FIFO, device or socket in what Nix would copy: reading it could block forever, and
    Nix refuses it too."""
    kind = "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
    return InputError(
        f"is {kind}, not a regular file or directory: trace cannot hash it, nor Nix copy it",
        file=path,
        hint="remove it, or move it out of the inputs and the package set",
    )


def tree_digest(root: Path, cache: StatCache, exclude: list[str] | None = None) -> str:
    """Digest of a directory tree (or a single file) as Nix would copy it into the store.

    `exclude` lists paths relative to `root` (files or whole directories) to leave out.
    """
    st = root.lstat()
    if stat.S_ISREG(st.st_mode):
        return "file:" + cache.file_digest(root, st)
    if not (stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode)):
        raise _special(root, st.st_mode)
    skip = frozenset(p.strip("/") for p in exclude or [])
    memo = (str(root), skip)
    if cache.trees is not None and memo in cache.trees:
        return cache.trees[memo]
    h = hashlib.sha256()
    for relpath, entry in _walk(root, "", skip):
        if entry.is_symlink():
            h.update(f"l {relpath}\0{os.readlink(entry.path)}\0".encode())
        elif entry.is_dir(follow_symlinks=False):
            h.update(f"d {relpath}\0".encode())
        else:
            est = entry.stat(follow_symlinks=False)
            if not stat.S_ISREG(est.st_mode):
                raise _special(Path(entry.path), est.st_mode)
            exe = "x" if est.st_mode & 0o111 else "-"
            h.update(f"f{exe} {relpath}\0{cache.file_digest(entry.path, est)}\0".encode())
    digest = "tree:" + h.hexdigest()
    if cache.trees is not None:
        cache.trees[memo] = digest
    return digest
