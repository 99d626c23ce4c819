"""Issue 28: state directories where users put them. `trace fork --state-dir` outside the fork
keeps the index, results and bundles there (trace's generated entry pipelines stay in the fork's
own `.trace`, which the replay record names relative to the fork), and a state directory inside
the fork is trace's, not a change of the fork: neither makes the next run refuse a dirty tree.
Real `trace fork` runs of one fixture candidate (its builds are reused from the store)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.fork.config import ForkConfig
from tests.test_flake_fork import fixture_fork

CANDIDATE = "pager-last-page"


def _fork(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", "fork", "--no-sign", "--json", *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=1200,
    )


def _decisions(proc: subprocess.CompletedProcess[str]) -> dict[str, str]:
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    return {c["candidate"]: c["decision"] for c in report["candidates"]}


@pytest.mark.nix
@pytest.mark.parametrize("where", ["outside", "inside"])
def test_a_state_dir_anywhere_runs_twice_without_a_dirty_tree(where: str, tmp_path: Path) -> None:
    root = fixture_fork(tmp_path / "fork", {CANDIDATE: {}})
    state = tmp_path / "elsewhere" / "state" if where == "outside" else root / "my-state"
    first = _fork(root, "--state-dir", str(state))
    assert "escapes" not in first.stderr and "outside the project root" not in first.stderr
    decisions = _decisions(first)
    assert set(decisions.values()) <= {"allow", "deny"}, first.stdout  # no "error" row
    again = _fork(root, "--state-dir", str(state))
    assert "uncommitted changes" not in again.stderr, again.stderr[-2000:]
    assert _decisions(again) == decisions
    assert (state / "state.db").is_file() and any((state / "bundles").iterdir())
    if where == "outside":  # only trace's generated files entered the fork, under .trace
        status = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=all"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert all(line[3:].startswith(".trace/fork/") for line in status.splitlines()), status


def test_generated_files_stay_in_the_package_set(tmp_path: Path) -> None:
    root = tmp_path / "fork"

    def cfg(state: Path) -> ForkConfig:
        return ForkConfig(
            root=root,
            package_set=root,
            config=root / "trace",
            candidates=root / "trace" / "candidates",
            steps=None,
            policy=None,
            state=state,
            bundles=state / "bundles",
        )

    assert cfg(root / ".trace").generated == root / ".trace" / "fork"  # as before
    assert cfg(root / "st").generated == root / "st" / "fork"
    assert cfg(tmp_path / "out").generated == root / ".trace" / "fork"
