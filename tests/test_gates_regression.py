"""The regression gate's log parsing and comparison, without builds
(trace_sandbox/gates/regression.py). The real builds: tests/test_gates_regression_nix.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trace_sandbox.gates.regression import evaluate, parse_log
from trace_sandbox.gates.regression import tests_record as side_record

POLICY = {"name": "p", "version": "1", "thresholds": {}}
LOG = """applying patch fix.patch
Running phase: buildPhase
ok 9 - not a test: the build phase's output
Running phase: checkPhase
ok 1 - prints
not ok 2 - escapes
ok 3 - slow # SKIP no time
ok 4 - prints
Running phase: installPhase
"""


def test_phases_and_tap_tests_of_a_log() -> None:
    parsed = parse_log(LOG, 0)
    assert parsed["phases"] == {"buildPhase": "pass", "checkPhase": "pass", "installPhase": "pass"}
    assert parsed["tests"] == {
        "checkPhase: prints": "pass",
        "checkPhase: escapes": "fail",
        "checkPhase: prints #2": "pass",
    }
    failed = parse_log(LOG.replace("Running phase: installPhase\n", ""), 1)
    assert failed["phases"]["checkPhase"] == "fail"  # the last phase started is the one failing


def _side(tmp: Path, name: str, log: str, status: int, has: dict[str, bool]) -> str:
    suite = tmp / f"{name}-suite"
    suite.mkdir()
    (suite / "log").write_text(log)
    (suite / "status").write_text(f"{status}\n")
    record = side_record({"suite": str(suite), "has": has, "passthru": {}})
    d = tmp / name
    d.mkdir()
    (d / "outcome.json").write_text(json.dumps(record))
    return str(d)


CHECK = {"check": True, "installCheck": False}
POST_FAILS = LOG.replace("ok 1 - prints", "not ok 1 - prints").replace(
    "Running phase: installPhase\n", ""
)


def test_a_test_passing_before_and_failing_after_is_a_regression(tmp_path: Path) -> None:
    cfg: dict[str, Any] = {
        "policy": POLICY,
        "pre": _side(tmp_path, "pre", LOG, 0, CHECK),
        "post": _side(tmp_path, "post", POST_FAILS, 1, CHECK),
    }
    record = evaluate(cfg)
    assert (record["passed"], record["measurable"]) == (False, True)
    assert record["reasons"] == ["regression-introduced"]
    assert record["details"]["regressions"] == [
        {"test": "checkPhase", "post": "fail", "side": "post-fix, patched tests"},
        {"test": "checkPhase: prints", "post": "fail", "side": "post-fix, patched tests"},
    ]
    assert record["details"]["failing_both"] == ["checkPhase: escapes"]  # context, not a regression
    assert record["score"] == round(1 / 3, 6)  # of 3 passing units, 1 still passes


def test_the_same_suite_on_both_sides_passes(tmp_path: Path) -> None:
    cfg = {
        "policy": POLICY,
        "pre": _side(tmp_path, "pre", LOG, 0, CHECK),
        "post": _side(tmp_path, "post", LOG, 0, CHECK),
    }
    record = evaluate(cfg)
    assert (record["passed"], record["reasons"], record["score"]) == (True, [], 1.0)
    assert record["details"]["policy"] == POLICY


def test_no_tests_is_not_measurable_never_a_pass(tmp_path: Path) -> None:
    none = {"check": False, "installCheck": False}
    cfg = {
        "policy": POLICY,
        "pre": _side(tmp_path, "pre", "Running phase: buildPhase\n", 0, none),
        "post": _side(tmp_path, "post", "Running phase: buildPhase\n", 0, none),
    }
    record = evaluate(cfg)
    assert (record["passed"], record["measurable"]) == (False, False)
    assert record["reasons"] == ["regression-not-measurable"]
    assert record["details"]["rules"] == ["regression.no-tests"]
    # TAP-looking output outside a check phase is not a test either
    assert parse_log("ok 1 - x\n", 0)["tests"] == {}


def test_a_passthru_test_that_ignores_the_patch_is_not_compared(tmp_path: Path) -> None:
    sides = {}
    for name, failed in (("pre", False), ("post", True)):
        out = tmp_path / f"{name}-t"
        out.mkdir()
        if failed:
            (out / ".trace-build-failed").write_text("1\n")
        suite = tmp_path / f"{name}-suite"
        suite.mkdir()
        (suite / "log").write_text("Running phase: buildPhase\n")
        (suite / "status").write_text("0\n")
        passthru = {"same": {"drv": "/nix/store/x-same.drv", "out": str(out)}}
        rec = side_record({"suite": str(suite), "has": {}, "passthru": passthru})
        d = tmp_path / name
        d.mkdir()
        (d / "outcome.json").write_text(json.dumps(rec))
        sides[name] = str(d)
    record = evaluate({"policy": POLICY, **sides})
    assert record["details"]["passthru_not_depending_on_the_patch"] == ["same"]
    assert record["details"]["rules"] == ["regression.no-tests"]


# ---- reruns, the base tests, tests-weakened (issue 25) ----


def _runs(tmp: Path, name: str, runs: list[tuple[str, int] | None], **extra: Any) -> str:
    """A side whose suite ran len(runs) times (None: a rerun that was not needed)."""
    dirs = []
    for i, run in enumerate(runs):
        d = tmp / f"{name}-run{i}"
        d.mkdir()
        if run is None:
            (d / "skipped").write_text("skipped\n")
            (d / "status").write_text("0\n")
            (d / "log").write_text("")
        else:
            (d / "log").write_text(run[0])
            (d / "status").write_text(f"{run[1]}\n")
        dirs.append(str(d))
    cfg = {"suite": dirs[0], "reruns": dirs[1:], "has": CHECK, "passthru": {}, **extra}
    out = tmp / name
    out.mkdir()
    (out / "outcome.json").write_text(json.dumps(side_record(cfg)))
    return str(out)


def test_a_test_that_passes_on_a_rerun_is_flaky_never_a_regression(tmp_path: Path) -> None:
    post = _runs(tmp_path, "post", [(POST_FAILS, 1), (LOG, 0), None])
    record = evaluate({"policy": POLICY, "pre": _runs(tmp_path, "pre", [(LOG, 0)]), "post": post})
    assert record["reasons"] == ["flaky-test"]
    assert record["details"]["flaky"] == ["checkPhase", "checkPhase: prints"]
    assert record["details"]["regressions"] == []
    assert json.loads((Path(post) / "outcome.json").read_text())["runs"] == 2


def test_a_test_failing_on_every_rerun_stays_a_regression(tmp_path: Path) -> None:
    post = _runs(tmp_path, "post", [(POST_FAILS, 1), (POST_FAILS, 1), (POST_FAILS, 1)])
    record = evaluate({"policy": POLICY, "pre": _runs(tmp_path, "pre", [(LOG, 0)]), "post": post})
    assert record["reasons"] == ["regression-introduced"]
    assert "checkPhase: prints" in [r["test"] for r in record["details"]["regressions"]]
    assert record["details"]["flaky"] == []


def test_the_base_tests_judge_the_post_fix_build_whatever_the_patched_ones_say(
    tmp_path: Path,
) -> None:
    """The patched suite passes (the patch loosened it); the unpatched suite, run against the
    same post-fix build, fails: regression-introduced, and the weakening is tests-weakened."""
    finding = {"file": "tests/run.sh", "line": 3, "kind": "or-empty", "message": "m", "hunk": "@@"}
    filt = tmp_path / "filter"
    filt.mkdir()
    doc = {"named": [], "dropped": [], "weakened": [finding]}
    (filt / "tests.json").write_text(json.dumps(doc))
    cfg = {
        "policy": POLICY,
        "pre": _runs(tmp_path, "pre", [(LOG, 0)]),
        "post": _runs(tmp_path, "post", [(LOG, 0)]),
        "post_base": _runs(tmp_path, "base", [(POST_FAILS, 1)] * 3, filter=str(filt)),
    }
    record = evaluate(cfg)
    assert record["reasons"] == ["regression-introduced", "tests-weakened"]
    assert {r["side"] for r in record["details"]["regressions"]} == {"post-fix, base tests"}
    assert record["details"]["tests_weakened"] == [finding]
    # without the base side, the loosened suite would have passed
    del cfg["post_base"]
    assert evaluate(cfg)["reasons"] == []


def test_a_suite_that_never_ran_keeps_its_log_for_the_decision(tmp_path: Path) -> None:
    """Nothing passes pre-fix because the build never reached the tests (`sh: gcc: not found`):
    the record keeps the pre-fix log tail, so `trace decide` can say it was the environment."""
    broken = "Running phase: buildPhase\nsh: gcc: not found\n"
    cfg = {
        "policy": POLICY,
        "pre": _side(tmp_path, "pre", broken, 127, CHECK),
        "post": _side(tmp_path, "post", broken, 127, CHECK),
    }
    record = evaluate(cfg)
    assert record["reasons"] == ["regression-not-measurable"]
    assert "sh: gcc: not found" in record["details"]["pre_log_tail"]
    passing = evaluate(
        {
            "policy": POLICY,
            "pre": _side(tmp_path, "pre2", LOG, 0, CHECK),
            "post": _side(tmp_path, "post2", LOG, 0, CHECK),
        }
    )
    assert passing["details"]["pre_log_tail"] == ""
