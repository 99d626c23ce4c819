"""`nix run .#verify -- --rebuild STEP…` (`trace fork`): a rebuild is never answered from the
verdict memo, really rebuilds the named steps with Nix's --check, and an unknown name is that
candidate's error. Real builds (issue 28)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.test_flake_fork import fixture_fork
from tests.test_fork_once import TRACE

pytestmark = pytest.mark.nix
ALLOWED = "pager-last-page"


def fork(root: Path, env: dict[str, str], *extra: str) -> tuple[int, dict[str, object], str]:
    proc = subprocess.run(
        [TRACE, "fork", "--no-sign", "--json", *extra],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def test_a_fork_rebuild_rebuilds_and_bypasses_the_memo(tmp_path: Path) -> None:
    root = fixture_fork(tmp_path / "fork", {ALLOWED: {}})
    env = {k: v for k, v in os.environ.items() if k not in ("TRACE_DATA_DIR", "TRACE_CLI")}
    env["TRACE_MEMO_KEY"] = str(tmp_path / "memo.key")
    rc, first, _ = fork(root, env)
    assert rc == 0, first
    rc, _, err = fork(root, env)  # memoised now, or verified in full: either way cached
    assert rc == 0
    rc, rebuilt, err = fork(root, env, "--rebuild", "pre-fix", "post-fix-run")
    assert rc == 0, err[-2000:]
    (row,) = rebuilt["candidates"]  # type: ignore[misc]
    assert row["decision"] == "allow" and row["rebuilt_differently"] == []
    assert row["cached"] == len(row["steps"]), "nothing needed building: only --check rebuilds"
    assert "verified in full" not in err  # the memo was not asked at all
    rc, _, err = fork(root, env, "--rebuild", "no-such-step")
    assert rc == 2
    assert "--rebuild no-such-step: the graph has no step of that name" in err
