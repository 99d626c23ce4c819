"""Digests: canonical JSON, stat-cached file/tree digests, git tree hashes of work trees."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from engine import hashing
from engine.hashing import StatCache, digest_json, git_tree_digest, tree_digest


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


def test_git_tree_digest_tracks_work_tree_not_index(tmp_path: Path) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    assert git_tree_digest(tmp_path) is None
    git("init", "-q")
    (tmp_path / "default.nix").write_text("{ }: { }\n")
    d1 = git_tree_digest(tmp_path)
    assert d1 is not None and d1.startswith("git-tree:")
    (tmp_path / "default.nix").write_text("{ }: { a = 1; }\n")
    d2 = git_tree_digest(tmp_path)
    assert d2 != d1
    (tmp_path / ".trace").mkdir()
    (tmp_path / ".trace" / "junk").write_text("not part of the fork")
    assert git_tree_digest(tmp_path) == d2
    # the user's staging area is untouched
    status = subprocess.run(
        ["git", "-C", str(tmp_path), "status", "--porcelain"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "?? default.nix" in status


def test_git_tree_digest_leaves_out_excluded_paths_committed_or_not(tmp_path: Path) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "default.nix").write_text("{ }: { }\n")
    (tmp_path / "trace").mkdir()
    (tmp_path / "trace" / "c.toml").write_text("id = 1\n")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    before = git_tree_digest(tmp_path, ["trace"])
    (tmp_path / "trace" / "c.toml").write_text("id = 2\n")  # uncommitted change
    assert git_tree_digest(tmp_path, ["trace"]) == before
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "two")  # committed
    assert git_tree_digest(tmp_path, ["trace"]) == before
    assert git_tree_digest(tmp_path) != before
    (tmp_path / "default.nix").write_text("{ }: { a = 1; }\n")
    assert git_tree_digest(tmp_path, ["trace"]) != before
