"""`nix run .#verify` (`trace fork`) when Nix itself fails (a store it cannot open): exit 4 with
what Nix said, for the whole run, not one 'candidate error' per candidate (exit 2) and not a
template that does not evaluate (issue 28)."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.test_flake_fork import fixture_fork
from tests.test_fork_once import TRACE

pytestmark = pytest.mark.nix


def test_a_store_nix_cannot_open_fails_the_fork_run_with_exit_4(tmp_path: Path) -> None:
    root = fixture_fork(tmp_path / "fork", {"pager-last-page": {}})
    env = {k: v for k, v in os.environ.items() if k not in ("TRACE_DATA_DIR", "TRACE_CLI")}
    env["TRACE_MEMO_KEY"] = ""
    env["NIX_REMOTE"] = f"/proc/trace-no-store-{uuid.uuid4().hex}"
    proc = subprocess.run(
        [TRACE, "fork", "--no-sign"], cwd=root, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 4, proc.stderr[-2000:]
    assert "creating directory '/proc/trace-no-store-" in proc.stderr
    assert "Nix itself failed" in proc.stderr and "does not evaluate" not in proc.stderr
