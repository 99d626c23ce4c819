"""The test tiers' rules (tests/conftest.py, docs/performance.md "Test tiers"): the fast tier's
list names real tests, a test using a fixture of a `nix` module is a real-build test, and the
fast tier's shims refuse a build started by an unmarked test while letting others through."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests import conftest

pytestmark = pytest.mark.skipif(shutil.which("nix-build") is None, reason="needs nix on PATH")


def _run(shims: Path, tool: str, test: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTEST_CURRENT_TEST": f"{test} (call)"}
    return subprocess.run(
        [str(shims / tool), *args], env=env, capture_output=True, text=True, check=False
    )


def test_an_unmarked_test_that_builds_is_refused_with_what_to_do(tmp_path: Path) -> None:
    unmarked = "tests/test_x.py::test_builds"
    conftest.write_shims(tmp_path, {unmarked})
    for tool, args in (("nix-build", ["--version"]), ("nix-store", ["--realise", "/x"])):
        proc = _run(tmp_path, tool, unmarked, *args)
        assert proc.returncode == 97, proc
        assert "is not marked nix" in proc.stderr and "FAST_NIX" in proc.stderr
    # not a build (a query), or a test that is allowed to build: the real tool answers
    assert _run(tmp_path, "nix-store", unmarked, "--version").returncode == 0
    assert _run(tmp_path, "nix-build", "tests/test_y.py::test_marked", "--version").returncode == 0


def test_every_fast_entry_names_a_test_file_that_exists() -> None:
    root = Path(conftest.__file__).parent.parent
    for entry in conftest.FAST_NIX:
        assert (root / entry.partition("::")[0]).is_file(), entry
