"""Issue 28: unrelated commits stay cheap. Under `nix run .#verify` (the package set is the
commit's source store path), a commit that changes no file Nix read for a candidate's verdict
keeps that verdict without starting Nix (engine/fork/memo.py `_carried`, what Nix read recorded
by engine/fork/nixreads.py); a commit that changes a file Nix did read verifies in full. Real
`trace fork` runs with the source arguments the app passes (bench/fork_bench.py's helper)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.fork_bench import source_args
from engine.fork.memo import RACY_NS
from engine.fork.nixreads import NixReads, unchanged
from tests.test_flake_fork import fixture_fork, git
from tests.test_fork_once import calls, shim

CANDIDATE = "pager-last-page"
NIX = ("nix ", "nix-instantiate ", "nix-store ", "nix-build ")


def _fork(root: Path, env: dict[str, str]) -> tuple[dict[str, object], str]:
    proc = subprocess.run(
        [sys.executable, "-m", "engine.cli", "fork", "--no-sign", "--json", *source_args(root)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    report: dict[str, object] = json.loads(proc.stdout)
    return report, proc.stderr


def _commit(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.write_text(path.read_text() + text)
    git(root, "commit", "-q", "-am", f"edit {rel}")


def _row(report: dict[str, object]) -> dict[str, object]:
    (row,) = report["candidates"]  # type: ignore[misc]
    assert isinstance(row, dict)
    return row


@pytest.mark.nix
def test_an_unrelated_commit_keeps_the_verdict_and_a_read_file_reverifies(tmp_path: Path) -> None:
    root = fixture_fork(tmp_path / "fork", {CANDIDATE: {}})
    written = time.monotonic()
    log = tmp_path / "calls.log"
    env = {**shim(tmp_path / "bin", log), "TRACE_MEMO_KEY": str(tmp_path / "memo.key")}
    _fork(root, env)  # builds
    # a precondition, not a timed assertion: the fork's files older than the memo's margin when
    # the memoising run starts (a file modified within RACY_NS of a run's start is never
    # memoised; a warm first run can end sooner than that)
    time.sleep(max(0.0, RACY_NS / 1e9 + 0.1 - (time.monotonic() - written)))
    honest, _ = _fork(root, env)  # the full trusted path: memoised
    decision = _row(honest)["decision"]

    _commit(root, "pkgs/cjson/parse.c", "/* unrelated to the pager */\n")
    log.unlink(missing_ok=True)
    kept, err = _fork(root, env)
    assert _row(kept)["decision"] == decision
    assert "verdict of commit" in str(_row(kept)["note"]), (kept, err)
    assert [c for c in calls(log) if c.startswith(NIX)] == [], "kept without starting Nix"

    _commit(root, "pkgs/pager/src/pager/__init__.py", "\n# read by Nix for the pager\n")
    log.unlink(missing_ok=True)
    full, err = _fork(root, env)
    assert [c for c in calls(log) if c.startswith(NIX)], "a read file changed: verified in full"
    assert "which Nix read for this candidate" in err, err[-2000:]
    assert "verdict of commit" not in str(_row(full)["note"])


def test_the_watcher_sees_what_is_opened_and_unchanged_sees_edits_and_listings(
    tmp_path: Path,
) -> None:
    tree = tmp_path / "set"
    (tree / "a").mkdir(parents=True)
    (tree / "b").mkdir()
    (tree / "a" / "read.nix").write_text("1\n")
    (tree / "b" / "other.nix").write_text("2\n")
    watcher = NixReads(tree)
    (tree / "a" / "read.nix").read_bytes()  # as Nix opens a file it imports
    got = watcher.collect()
    assert got is not None and set(got) == {"a", "a/read.nix"}  # and its directory's listing
    assert unchanged(tree, got) is None
    (tree / "b" / "other.nix").write_text("3\n")  # not read: the record still holds
    assert unchanged(tree, got) is None
    (tree / "a" / "new.nix").write_text("")  # a listing read changes (pathExists would see it)
    assert unchanged(tree, got) == "a"
    (tree / "a" / "new.nix").unlink()
    (tree / "a" / "read.nix").write_text("changed\n")
    assert unchanged(tree, got) == "a/read.nix"
