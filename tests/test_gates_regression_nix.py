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


REFUSE_MEMBERS = Path(__file__).parent / "fixtures" / "gates" / "cjson-refuse-members"
CJSON_TESTS = [
    "passthru.tests.array",
    "passthru.tests.empty-object",
    "passthru.tests.members",
    "passthru.tests.missing-colon",
    "passthru.tests.nested",
    "passthru.tests.spaces-after-comma",
]


def test_passthru_tests_judge_the_patched_build(state: Path) -> None:
    """Issue 10: a package's passthru.tests (cjson's, each running the package as finally built,
    `finalAttrs.finalPackage`) run on both sides. The real upstream CVE fix keeps them passing;
    each side's test is another derivation (it depends on the patched build), so each is
    compared, none set aside as independent of the patch."""
    result = run_candidate("cjson-cve-2023-53154", state)
    pre, post = outcome(result, "tests-pre"), outcome(result, "tests-post")
    assert sorted(pre["passthru"]) == [t.removeprefix("passthru.tests.") for t in CJSON_TESTS]
    assert all(pre["passthru"][n]["drv"] != post["passthru"][n]["drv"] for n in pre["passthru"])
    assert pre["has"] == {"check": False, "installCheck": False}  # passthru.tests only
    gate = outcome(result, "gate-regression")
    assert (gate["passed"], gate["measurable"], gate["reasons"]) == (True, True, [])
    assert gate["details"]["passing_pre_fix"] == len(CJSON_TESTS)
    assert gate["details"]["passthru_not_depending_on_the_patch"] == []


def test_a_fix_that_breaks_a_passthru_test_is_a_regression(state: Path) -> None:
    """A plausible wrong fix of the same CVE: nothing may follow a comma. The PoC passes (its
    inputs are rejected cleanly) and no variant crashes; the passthru tests with two members
    pass before the fix and fail after it: regression-introduced, named per test."""
    result = run_candidate(REFUSE_MEMBERS / "candidate.toml", state)
    assert outcome(result, "expectation")["passed"] is True
    gate = outcome(result, "gate-regression")
    assert (gate["passed"], gate["measurable"]) == (False, True)
    assert gate["reasons"] == ["regression-introduced"]
    assert [r["test"] for r in gate["details"]["regressions"]] == [
        "passthru.tests.members",
        "passthru.tests.nested",
        "passthru.tests.spaces-after-comma",
    ]
    assert all(r["post"] == "fail" for r in gate["details"]["regressions"])
