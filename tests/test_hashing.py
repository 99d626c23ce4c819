"""Digests: canonical JSON, stat-cached file/tree digests, git tree hashes of work trees."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from engine import hashing
from engine.graph import load_graph
from engine.hashing import StatCache, digest_json, tree_digest
from tests.enginekit import make_project


def test_canonical_json_ignores_key_order() -> None:
    assert digest_json({"a": 1, "b": [1, "x"]}) == digest_json({"b": [1, "x"], "a": 1})
    assert digest_json({"a": 1}) != digest_json({"a": 2})


def test_stat_cache_reads_unchanged_files_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[Path] = []
    real = hashing._read_digest

    def counting(path: Path) -> str:
        reads.append(path)
        return real(path)

    monkeypatch.setattr(hashing, "_read_digest", counting)
    monkeypatch.setattr(StatCache, "RACY_NS", -(10**9))  # the files count as old enough
    (tmp_path / "t").mkdir()
    for i in range(5):
        (tmp_path / "t" / f"f{i}").write_text(str(i))
    db = sqlite3.connect(tmp_path / "state.db")
    cache = StatCache(db)
    first = tree_digest(tmp_path / "t", cache)
    cache.flush()
    db.commit()
    assert len(reads) == 5
    # a new process: the cache comes back from the database, nothing is read again
    second = tree_digest(tmp_path / "t", StatCache(sqlite3.connect(tmp_path / "state.db")))
    assert second == first and len(reads) == 5
    (tmp_path / "t" / "f2").write_text("changed")
    third = tree_digest(tmp_path / "t", StatCache(sqlite3.connect(tmp_path / "state.db")))
    assert third != first and reads[-1].name == "f2" and len(reads) == 6


def test_a_file_changed_just_now_is_never_remembered(tmp_path: Path) -> None:
    """Racily clean (as in git): a second same-size edit in the same clock tick keeps the whole
    stat signature, so a digest of a file modified within RACY_NS is not persisted."""
    (tmp_path / "f").write_text("one")
    db = sqlite3.connect(tmp_path / "state.db")
    cache = StatCache(db)
    cache.file_digest(tmp_path / "f")
    cache.flush()
    assert db.execute("SELECT count(*) FROM stat_cache").fetchone()[0] == 0
    old = os.stat(tmp_path / "f").st_mtime_ns - 5 * 10**9
    os.utime(tmp_path / "f", ns=(old, old))  # mtime old, but ctime is now: still racy
    cache = StatCache(db)
    cache.file_digest(tmp_path / "f")
    cache.flush()
    assert db.execute("SELECT count(*) FROM stat_cache").fetchone()[0] == 0


def test_tree_digest_sees_modes_links_and_names(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("x")
    base = tree_digest(tmp_path, StatCache())
    os.chmod(tmp_path / "a", 0o755)
    exe = tree_digest(tmp_path, StatCache())
    (tmp_path / "l").symlink_to("a")
    link = tree_digest(tmp_path, StatCache())
    (tmp_path / ".trace").mkdir()
    (tmp_path / ".trace" / "state").write_text("ignored")
    assert len({base, exe, link}) == 3
    assert tree_digest(tmp_path, StatCache()) == link


def test_tree_digest_exclusions(tmp_path: Path) -> None:
    (tmp_path / "default.nix").write_text("{ }: { }\n")
    (tmp_path / "trace").mkdir()
    (tmp_path / "trace" / "c.toml").write_text("id = 1\n")
    before = tree_digest(tmp_path, StatCache(), ["trace"])
    (tmp_path / "trace" / "c.toml").write_text("id = 2\n")
    assert tree_digest(tmp_path, StatCache(), ["trace/"]) == before
    assert tree_digest(tmp_path, StatCache()) != before
    (tmp_path / "default.nix").write_text("{ }: { a = 1; }\n")
    assert tree_digest(tmp_path, StatCache(), ["trace"]) != before


def test_git_ignored_files_of_the_package_set_are_part_of_every_key(tmp_path: Path) -> None:
    """Nix imports the work tree, ignored files and all: so does the key (an audit found a stale
    answer when the package set read a git-ignored file)."""
    graph = make_project(tmp_path, '[steps.a]\nkind = "text"\n')
    pkgs = tmp_path / "pkgs"
    subprocess.run(["git", "init", "-q", str(pkgs)], check=True)
    (pkgs / ".gitignore").write_text("local.txt\n")
    (pkgs / "local.txt").write_text("one")
    first = load_graph(graph, root=tmp_path).package_set
    (pkgs / "local.txt").write_text("two")
    second = load_graph(graph, root=tmp_path).package_set
    assert first is not None and second is not None and first.digest != second.digest
