"""Where a batch of harness runs puts its runs' directories (trace_sandbox/gates/scratch.py):
the memory file system when it has room for them, else the derivation's TMPDIR. The memory file
system is faked by a directory (SHM) and its free space by statvfs."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from trace_sandbox.gates import scratch


@pytest.fixture
def shm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "shm"
    d.mkdir()
    monkeypatch.setattr(scratch, "SHM", str(d))
    return d


def _free(monkeypatch: pytest.MonkeyPatch, nbytes: int) -> None:
    monkeypatch.setattr(
        scratch.os, "statvfs", lambda _: SimpleNamespace(f_bavail=nbytes, f_frsize=1)
    )


def _package(root: Path, size: int) -> str:
    (root / "pkg" / "lib").mkdir(parents=True)
    (root / "pkg" / "lib" / "data").write_bytes(b"x" * size)
    (root / "pkg" / "bin").mkdir()
    (root / "pkg" / "bin" / "tool").write_bytes(b"y" * 10)
    os.symlink("/nonexistent/huge", root / "pkg" / "link")  # not followed, not counted
    return str(root / "pkg")


def test_tree_bytes_counts_regular_files_only(tmp_path: Path) -> None:
    assert scratch.tree_bytes(_package(tmp_path, 1000)) == 1010
    assert scratch.tree_bytes(str(tmp_path / "absent")) == 0


def test_runs_go_to_the_memory_file_system_when_it_has_room(
    tmp_path: Path, shm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pkg = _package(tmp_path, 1 << 20)
    # 4 runs at a time, each a copy of the package and as much again, plus the spare
    need = 2 * 4 * scratch.tree_bytes(pkg) + scratch.SHM_SPARE
    _free(monkeypatch, need)
    assert scratch.runs_root([pkg], 4, "/build") == str(shm)
    _free(monkeypatch, need - 1)
    assert scratch.runs_root([pkg], 4, "/build") == "/build"
    # the largest of the targets decides (a batch of mutants: one build each)
    small = _package(tmp_path / "small", 10)
    _free(monkeypatch, need)
    assert scratch.runs_root([small, pkg], 4, "/build") == str(shm)
    assert scratch.runs_root([small, pkg], 5, "/build") == "/build"


def test_no_writable_memory_file_system_means_the_fallback(
    tmp_path: Path, shm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _free(monkeypatch, 1 << 40)
    monkeypatch.setattr(scratch, "SHM", str(tmp_path / "absent"))
    assert scratch.runs_root([], 4, "/build") == "/build"
    assert scratch.scratch_root() != str(tmp_path / "absent")
    monkeypatch.setattr(scratch, "SHM", str(shm))
    shm.chmod(0o500)
    try:
        if os.access(shm, os.W_OK):  # root ignores the mode
            monkeypatch.setattr(scratch.os, "access", lambda *_: False)
        assert scratch.runs_root([], 4, "/build") == "/build"
    finally:
        shm.chmod(0o700)
