"""The regression gate with real builds: the fixture packages' own test suites (TAP, in
checkPhase or installCheckPhase, off by default as in nixpkgs) on both sides.

A "fix" that refuses everything (cparse-refuse-all) removes the overflow, passes the PoC, its
boundary case and every variant; cparse's own tests, passing before, fail after:
regression-introduced. The correct fix keeps every test passing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.gatekit import outcome, run_candidate

pytestmark = pytest.mark.nix


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("regression-state")


TESTS = [
    "checkPhase",
    "checkPhase: a 15-byte key fits",
    "checkPhase: prints key and value",
    "checkPhase: skips comments",
    "checkPhase: skips lines without =",
    "checkPhase: unescapes a tab",
]


def test_a_fix_that_refuses_everything_is_denied_by_the_package_s_tests(state: Path) -> None:
    result = run_candidate("cparse-refuse-all", state)
    assert outcome(result, "expectation")["passed"] is True  # PoC gone, post-fix survives
    assert outcome(result, "gate-variants")["passed"] is True  # nothing crashes any more
    gate = outcome(result, "gate-regression")
    assert (gate["passed"], gate["measurable"]) == (False, True)
    assert gate["reasons"] == ["regression-introduced"]
    assert [r["test"] for r in gate["details"]["regressions"]] == TESTS
    assert "not ok 2 - skips comments" in gate["details"]["post_log_tail"]
    pre = outcome(result, "tests-pre")
    assert pre["has"] == {"check": True, "installCheck": False}
    assert set(pre["units"].values()) == {"pass"}


def test_the_correct_fix_keeps_the_package_s_tests_passing(state: Path) -> None:
    gate = outcome(run_candidate("cparse-key-overflow", state), "gate-regression")
    assert (gate["passed"], gate["reasons"], gate["score"]) == (True, [], 1.0)
    assert gate["details"]["passing_pre_fix"] == len(TESTS)


def test_a_python_package_s_install_check(state: Path) -> None:
    gate = outcome(run_candidate("pager-last-page", state), "gate-regression")
    assert (gate["passed"], gate["reasons"]) == (True, [])
    assert gate["details"]["post"]["has"] == {"check": False, "installCheck": True}
    assert gate["details"]["passing_pre_fix"] == 5  # the phase and its four TAP tests
