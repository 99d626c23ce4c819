"""Issue 28: reading the state database writes nothing. A read-only reader of a WAL database
(engine/readonly.py) creates no `-wal`/`-shm`, yet reads through a `-wal` a killed writer left;
an Index opened on a complete state directory creates no file until its first write."""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

from engine.cache import CachedResult, Index, IndexView, gcroot_folder
from engine.readonly import read_only_connection


def _names(folder: Path) -> set[str]:
    return set(os.listdir(folder))


def test_a_read_only_reader_creates_no_file_and_reads_what_is_committed(tmp_path: Path) -> None:
    db_path = tmp_path / "state.db"
    db = sqlite3.connect(db_path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE t (x)")
    db.execute("INSERT INTO t VALUES (1)")
    db.close()  # the last connection: SQLite folds the WAL in and removes it
    before = _names(tmp_path)
    ro = read_only_connection(db_path)
    assert ro.execute("SELECT x FROM t").fetchall() == [(1,)]
    ro.close()
    assert _names(tmp_path) == before == {"state.db"}
    # a writer still open (or killed): its rows are in the -wal, and the reader sees them
    writer = sqlite3.connect(db_path, isolation_level=None)
    writer.execute("INSERT INTO t VALUES (2)")
    ro = read_only_connection(db_path)
    assert sorted(ro.execute("SELECT x FROM t").fetchall()) == [(1,), (2,)]
    ro.close()
    writer.close()


def test_an_index_writes_nothing_until_its_first_write(tmp_path: Path) -> None:
    state = tmp_path / "st"
    result = CachedResult(key="k", step_id="a", drv="/nix/store/x.drv", out="/nix/store/x")
    with Index(state) as index:
        index.record([result], {"a": ("k", "a", {})}, "g")
    before = {n: (state / n).stat().st_mtime_ns for n in _names(state)}
    with Index(state) as index:
        assert index.results(["k"])["k"].out == "/nix/store/x"
        assert not (state / "state.db-wal").exists(), "a read opened no writer"
    assert {n: (state / n).stat().st_mtime_ns for n in _names(state)} == before
    with Index(state) as index:
        index.record([], {"b": ("k2", "b", {})}, "g")  # the first write opens the writer
        assert index.last_keys("g") == {"a": "k", "b": "k2"}
    with IndexView.open(state) as view:
        assert view.last_keys("g") == {"a": "k", "b": "k2"}
    with IndexView.open(tmp_path / "none") as empty:
        assert empty.results(["k"]) == {} and not (tmp_path / "none").exists()
    shutil.rmtree(gcroot_folder(state))  # its root names no real store path
