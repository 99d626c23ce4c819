"""The test tiers' rules (tests/conftest.py, docs/performance.md "Test tiers"): the fast tier's
list names real tests, a test using a fixture of a `nix` module is a real-build test, and the
fast tier's shims refuse a build started by an unmarked test while letting others through."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
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


class _Item:
    """A collected test as the tier rule reads it: its node id and its marks' names."""

    def __init__(self, nodeid: str, *marks: str) -> None:
        self.nodeid, self.marks = nodeid, set(marks)

    def get_closest_marker(self, name: str) -> object | None:
        return name if name in self.marks else None


def test_a_slow_test_runs_in_all_only_even_when_fast_nix_lists_it() -> None:
    listed = conftest.FAST_NIX[0] + "x]"
    fast = {
        "tests/test_a.py::test_plain": True,
        "tests/test_a.py::test_builds": False,  # nix, unlisted
        listed: True,  # nix, listed
    }
    for nodeid, expected in fast.items():
        marks = () if nodeid.endswith("plain") else ("nix",)
        assert conftest.in_fast_tier(_Item(nodeid, *marks)) is expected, nodeid  # type: ignore[arg-type]
        slow = _Item(nodeid, "slow", *marks)
        assert conftest.in_fast_tier(slow) is False, nodeid  # type: ignore[arg-type]


def test_a_fast_nix_entry_naming_only_slow_tests_stops_the_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    entry = "tests/test_a.py::test_row["
    monkeypatch.setattr(conftest, "FAST_NIX", (entry,))
    conftest._check_listed([_Item(entry + "a]", "nix")])  # type: ignore[list-item]
    with pytest.raises(pytest.UsageError, match="outside the `slow` mark"):
        conftest._check_listed([_Item(entry + "a]", "nix", "slow")])  # type: ignore[list-item]


def _collected(*args: str) -> set[str]:
    root = Path(conftest.__file__).parent.parent
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider", *args],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {line for line in proc.stdout.splitlines() if "::" in line}


def test_the_fast_tier_deselects_the_slow_marked_tests_of_a_real_module() -> None:
    """tests/test_fuzz_hang.py: its costly runs are `slow`; a loop is a hang and a SIGSEGV is a
    crash stay in the fast tier; --all collects every test of it."""
    module = "tests/test_fuzz_hang.py"
    every, fast = _collected(module), _collected("--fast", module)
    slow = {n for n in every if n.split("::")[1] in FUZZ_HANG_SLOW}
    assert len(slow) == len(FUZZ_HANG_SLOW) and fast == every - slow
    assert f"{module}::test_a_cpu_loop_is_a_hang_by_its_cpu_time_both_ways" in fast
    assert f"{module}::test_a_crash_is_a_crash_and_not_a_hang" in fast


FUZZ_HANG_SLOW = {
    "test_sleeping_past_the_old_wall_timeout_is_not_a_hang",
    "test_the_corpus_replay_judges_a_hang_by_the_same_limits",
    "test_the_python_fallback_without_a_tracer_judges_a_hang_by_cpu_time",
    "test_the_same_work_is_judged_the_same_on_a_loaded_machine",
}
