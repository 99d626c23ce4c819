"""The persistent cache index: step key -> result, plus the state that makes plans explainable.

One SQLite database per state directory (`.trace/state.db`): writes are transactions, so a run
killed at any point leaves the previous consistent state, and the next run completes the work (Nix
keeps whatever outputs were already built). One process at a time holds the state directory
(an `fcntl.flock` on `.trace/lock`, which the kernel releases even when the holder is killed); a
second gets a clear "busy" error instead of waiting silently.

Results are held by GC roots: a symlink per result key under this user's
`/nix/var/nix/gcroots/per-user/<user>/trace/<state-id>/`, so `nix-collect-garbage` never deletes a
cached output. `trace gc` removes roots for keys no graph of its own state directory references
any more; other state directories' folders are touched only with `--all`, and a folder whose state
directory cannot be seen now (deleted, or only unmounted) only with `--prune-missing`.
"""

from __future__ import annotations

import errno
import fcntl
import getpass
import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from engine.errors import BusyError, InputError
from engine.loader import check_path
from engine.plain import Plain
from engine.readonly import read_only_connection

GCROOTS_BASE = Path("/nix/var/nix/gcroots/per-user")


def _flock(fd: int, wait: float) -> bool:
    """Take an exclusive lock, polling for up to `wait` seconds."""
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)


class CachedResult(Plain):
    """A result in the index: a step key, its `.drv` and output, its outcome and who built it
    (`built_on`, `checked_on`: engine.run.StepResult's). A plain class: a dataclass costs ~2-4M
    instructions to make at import (issue 30)."""

    FIELDS = ("key", "step_id", "drv", "out", "outcome", "deterministic", "built_on", "checked_on")
    __slots__ = FIELDS

    def __init__(
        self,
        *,
        key: str,
        step_id: str,
        drv: str,
        out: str,
        outcome: Any = None,
        deterministic: bool | None = None,
        built_on: str | None = None,
        checked_on: str | None = None,
    ) -> None:
        self.key, self.step_id, self.drv, self.out = key, step_id, drv, out
        self.outcome, self.deterministic = outcome, deterministic
        self.built_on, self.checked_on = built_on, checked_on


# columns added after the first release: a state.db made before them gets them (NULL: unknown)
_LATER_COLUMNS = ("built_on TEXT", "checked_on TEXT")


_SCHEMA = """
    CREATE TABLE IF NOT EXISTS results (
        key TEXT PRIMARY KEY, step_id TEXT, drv TEXT, out TEXT, outcome TEXT,
        deterministic INTEGER, created REAL);
    CREATE TABLE IF NOT EXISTS last_keys (
        graph TEXT, step_id TEXT, key TEXT, components TEXT,
        PRIMARY KEY (graph, step_id));
"""


_COLUMNS = "key, step_id, drv, out, outcome, deterministic, built_on, checked_on"


class IndexView:
    """The index's answers (results, latest keys), read without taking the state directory's
    lock or writing anything: what `trace plan` and the refusals before a run read, so that bad
    input found then exits 2 with the state directory untouched. `Index` adds the writes."""

    state_dir: Path
    db: sqlite3.Connection

    @staticmethod
    def open(state_dir: Path) -> IndexView:
        """The state directory's index as it is now (an empty one when there is none yet)."""
        view = IndexView.__new__(IndexView)  # never an Index: that one takes the lock
        view.state_dir = state_dir
        # not an index this trace wrote (or none yet): nothing cached
        view.db = _read_existing(state_dir / "state.db") or _empty()
        return view

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> IndexView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- results ----
    def results(self, keys: Iterable[str]) -> dict[str, CachedResult]:
        keys = list(keys)
        found: dict[str, CachedResult] = {}
        for i in range(0, len(keys), 500):
            chunk = keys[i : i + 500]
            marks = ",".join("?" * len(chunk))
            for row in self.db.execute(
                f"SELECT {_COLUMNS} FROM results WHERE key IN ({marks})",
                chunk,
            ):
                if type(row[2]) is not str or type(row[3]) is not str:
                    continue  # not a row this index wrote: no result, so the step builds
                found[row[0]] = CachedResult(
                    key=row[0],
                    step_id=row[1],
                    drv=row[2],
                    out=row[3],
                    outcome=json.loads(row[4]) if row[4] is not None else None,
                    deterministic=None if row[5] is None else bool(row[5]),
                    built_on=row[6] if type(row[6]) is str else None,
                    checked_on=row[7] if type(row[7]) is str else None,
                )
        return found

    def last_keys(self, graph: str) -> dict[str, str]:
        """step id -> the key it had in this graph's latest run."""
        return dict(self.db.execute("SELECT step_id, key FROM last_keys WHERE graph = ?", (graph,)))

    def last_components(self, graph: str, step_id: str) -> dict[str, Any] | None:
        """What a step's key was computed from last time (to explain why it is dirty now)."""
        row = self.db.execute(
            "SELECT components FROM last_keys WHERE graph = ? AND step_id = ?", (graph, step_id)
        ).fetchone()
        return None if row is None else dict(json.loads(row[0]))


def _read_existing(db_path: Path) -> sqlite3.Connection | None:
    """A read-only connection to an index with every table and column, else None."""
    if not db_path.is_file():
        return None
    try:
        db = read_only_connection(db_path)
    except sqlite3.Error:
        return None
    try:
        db.execute(f"SELECT {_COLUMNS} FROM results LIMIT 0").fetchall()
        db.execute("SELECT components FROM last_keys LIMIT 0").fetchall()
    except sqlite3.Error:
        db.close()
        return None
    return db


def _empty() -> sqlite3.Connection:
    db = sqlite3.connect(":memory:")
    db.executescript(_SCHEMA)
    for column in _LATER_COLUMNS:
        db.execute(f"ALTER TABLE results ADD COLUMN {column}")
    return db


class Index(IndexView):
    def __init__(self, state_dir: Path, *, wait: float = 0) -> None:
        self.state_dir = state_dir
        check_path(state_dir, "state directory", key="--state-dir")
        try:
            state_dir.mkdir(parents=True, exist_ok=True)
            if not os.access(state_dir, os.W_OK):
                raise PermissionError(errno.EACCES, "not writable")
            self._lock_fd = os.open(state_dir / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise InputError(
                f"cannot use {state_dir} as the state directory: {exc.strerror or exc}",
                key="--state-dir",
                hint="pass --state-dir a directory trace may create and write "
                "(default ROOT/.trace)",
            ) from None
        if not _flock(self._lock_fd, wait):
            os.close(self._lock_fd)
            raise BusyError(
                f"another trace process is using {state_dir}",
                hint="wait for it to finish, or pass --wait SECONDS to wait for it",
            )
        self._writer: sqlite3.Connection | None = None
        db_path = state_dir / "state.db"
        # Under the lock no other process writes: a complete index with no WAL to replay is
        # read without creating a file, until the first write (`writable`). Bad input found
        # while the index is open (a graph that does not evaluate) so leaves it as it was.
        reader = None if os.path.lexists(f"{db_path}-wal") else _read_existing(db_path)
        self.db = reader or self.writable()
        self.gcroots = self._gcroot_dir()

    def writable(self) -> sqlite3.Connection:
        """The connection that writes (opened, and the schema made, on first use); `db` is it
        from then on."""
        if self._writer is None:
            db = sqlite3.connect(self.state_dir / "state.db", isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(_SCHEMA)
            have = {row[1] for row in db.execute("PRAGMA table_info(results)")}
            for column in _LATER_COLUMNS:
                if column.split()[0] not in have:
                    db.execute(f"ALTER TABLE results ADD COLUMN {column}")
            reader = getattr(self, "db", None)
            if reader is not None:
                reader.close()
            self._writer = self.db = db
        return self._writer

    def close(self) -> None:
        self.db.close()
        fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        os.close(self._lock_fd)

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def record(
        self, results: Iterable[CachedResult], last: dict[str, tuple[str, str, Any]], graph: str
    ) -> None:
        """Store new results (rooting their outputs first) and every step's latest key."""
        results = list(results)
        for r in results:
            self.add_root(r.key, r.out)
        now = time.time()
        db = self.writable()
        with db:
            db.execute("BEGIN")
            db.executemany(
                "INSERT OR REPLACE INTO results (key, step_id, drv, out, outcome, deterministic,"
                " created, built_on, checked_on) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        r.key,
                        r.step_id,
                        r.drv,
                        r.out,
                        None if r.outcome is None else json.dumps(r.outcome, sort_keys=True),
                        None if r.deterministic is None else int(r.deterministic),
                        now,
                        r.built_on,
                        r.checked_on,
                    )
                    for r in results
                ],
            )
            db.executemany(
                "INSERT OR REPLACE INTO last_keys VALUES (?, ?, ?, ?)",
                [
                    (graph, sid, key, json.dumps(comp, sort_keys=True))
                    for sid, (key, _, comp) in last.items()
                ],
            )

    # ---- GC roots ----
    def _gcroot_dir(self) -> Path:
        base = gcroot_folder(self.state_dir)
        try:
            base.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(
                f"cannot create GC roots under {base}: {exc}",
                hint="create /nix/var/nix/gcroots/per-user/<you> writable by you "
                "(scripts/setup does), so cached results survive nix-collect-garbage",
            ) from None
        link = self.state_dir / "gcroots"
        if not link.is_symlink():
            tmp = self.state_dir / "gcroots.tmp"
            if tmp.is_symlink():
                tmp.unlink()
            tmp.symlink_to(base)
            os.replace(tmp, link)
        marker = base / ".state-dir"
        if not marker.exists():
            marker.write_text(str(self.state_dir.resolve()) + "\n")
        return base

    def add_root(self, key: str, out: str) -> None:
        link = self.gcroots / key
        try:  # a new root: one syscall (symlink creation is atomic)
            os.symlink(out, link)
            return
        except FileExistsError:
            if os.path.islink(link) and os.readlink(link) == out:
                return
        tmp = self.gcroots / f".{key}.tmp"
        if tmp.is_symlink():
            tmp.unlink()
        tmp.symlink_to(out)
        os.replace(tmp, link)

    def forget_graphs(self) -> tuple[list[str], list[str]]:
        """Drop the latest keys of graphs whose pipeline file is gone; return (gone, unsure).

        Graph ids are absolute paths (plus `#variant`), so the answer does not depend on the
        directory gc runs from. Ids of older versions are relative to the project root, taken as
        the state directory's parent; one that cannot be found there, or any file whose
        existence cannot be checked (permissions), is kept and reported as unsure.
        """
        gone: list[str] = []
        unsure: list[str] = []
        for (gid,) in self.db.execute("SELECT DISTINCT graph FROM last_keys").fetchall():
            entry = Path(gid.split("#", 1)[0])
            absolute = entry.is_absolute()
            path = entry if absolute else self.state_dir.resolve().parent / entry
            state = _exists(path)
            if state is False and absolute:
                gone.append(gid)
            elif state is not True:
                unsure.append(gid)
        db = self.writable()
        with db:
            db.execute("BEGIN")
            db.executemany("DELETE FROM last_keys WHERE graph = ?", [(g,) for g in gone])
        return gone, unsure

    def prune_build_files(self, keep: int = 0) -> int:
        """Remove generated `build/*.nix` files but the `keep` newest; return how many went."""
        build = self.state_dir / "build"
        if not build.is_dir():
            return 0
        files = sorted(
            (p for p in build.iterdir() if p.is_file()),
            key=lambda p: p.stat().st_mtime_ns,
            reverse=True,
        )
        for p in files[keep:]:
            p.unlink(missing_ok=True)
        return max(0, len(files) - keep)

    def gc(self, keep: set[str]) -> list[str]:
        """Drop roots and index entries of results no graph references; return dropped keys."""
        dropped = [
            p.name
            for p in self.gcroots.iterdir()
            if not p.name.startswith(".") and p.name not in keep
        ]
        for key in dropped:
            (self.gcroots / key).unlink(missing_ok=True)
        db = self.writable()
        with db:
            db.execute("BEGIN")
            db.executemany("DELETE FROM results WHERE key = ?", [(k,) for k in dropped])
        return dropped


def gcroot_folder(state_dir: Path) -> Path:
    """This user's GC-root folder of a state directory (one per resolved state path)."""
    # os.fsencode: a state dir whose name is not UTF-8 is refused, never a crash here
    state_id = hashlib.sha256(os.fsencode(os.path.realpath(state_dir))).hexdigest()[:16]
    return GCROOTS_BASE / getpass.getuser() / "trace" / state_id


def _exists(path: Path) -> bool | None:
    """True or False when the file system says so; None when it cannot tell (no permission, an
    I/O error): callers must never delete anything on None."""
    try:
        os.stat(path)
    except FileNotFoundError:
        return False
    except NotADirectoryError:
        return False
    except OSError:
        return None
    return True


class RootFolder:
    """One state directory's GC-root folder under this user's gcroots/trace/: `state_dir` None:
    no marker (not trace's, or half-made): never touched; `seen`: whether state_dir exists now
    (None: cannot tell)."""

    __slots__ = ("folder", "seen", "state_dir")

    def __init__(self, *, folder: Path, state_dir: Path | None, seen: bool | None) -> None:
        self.folder, self.state_dir, self.seen = folder, state_dir, seen


def root_folders(base: Path | None = None) -> list[RootFolder]:
    base = base or GCROOTS_BASE / getpass.getuser() / "trace"
    if not base.is_dir():
        return []
    out: list[RootFolder] = []
    for folder in sorted(base.iterdir()):
        marker = folder / ".state-dir"
        try:
            state = Path(marker.read_text().strip())
        except OSError:
            out.append(RootFolder(folder=folder, state_dir=None, seen=None))
            continue
        out.append(RootFolder(folder=folder, state_dir=state, seen=_exists(state)))
    return out


def remove_root_folder(folder: Path) -> None:
    import shutil

    shutil.rmtree(folder, ignore_errors=True)


def sweep_orphans(base: Path | None = None) -> list[Path]:
    """Remove this user's GC-root folders whose state directory no longer exists (a deleted
    project or temporary directory): their results are referenced by nothing."""
    import shutil

    base = base or GCROOTS_BASE / getpass.getuser() / "trace"
    removed: list[Path] = []
    if not base.is_dir():
        return removed
    for folder in base.iterdir():
        marker = folder / ".state-dir"
        if not marker.is_file():
            continue
        if not Path(marker.read_text().strip()).is_dir():
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


class nothing_written_on_bad_input:
    """Bad input exits 2 having written nothing: if this command created the state directory
    (and its GC-root folder) and then fails with an exit-2 error, both are removed again."""

    def __init__(self, state: Path) -> None:
        self.state = state
        self.existed = state.exists()

    def __enter__(self) -> None:
        return None

    def __exit__(self, t: Any, exc: BaseException | None, tb: Any) -> None:
        from engine.errors import TraceError

        if self.existed or not isinstance(exc, TraceError) or exc.exit_code != 2:
            return
        import shutil

        folder = gcroot_folder(self.state)
        if folder.is_dir() and {p.name for p in folder.iterdir()} <= {".state-dir"}:
            shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(self.state, ignore_errors=True)
