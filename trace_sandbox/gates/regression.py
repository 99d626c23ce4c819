"""The regression gate, sandbox side: the package's own tests on both sides, compared.

`tests_record` (derivations `tests-pre`, `tests-post`) reads one side's test build: the package
built with `doCheck = true; doInstallCheck = true` through a wrapper that keeps the builder's
log and exit status (a failing test is an outcome, not a failed step), plus each
`passthru.tests` derivation built the same way. From the log it takes the phases as nixpkgs'
stdenv announces them (`Running phase: NAME`: the last phase started is the one that failed)
and TAP lines (`ok 3 - name`, `not ok 3 - name`, `# SKIP` not counted). The units compared are
each TAP test (`checkPhase: name`), each check phase that ran, and each passthru test.

`evaluate` (derivation `gate-regression`): a unit that passes pre-fix and fails (or is absent)
post-fix is `regression-introduced`. A package without tests (no checkPhase or doCheck, no
installCheckPhase or doInstallCheck, no passthru.tests) is `regression-not-measurable`, never a
pass; so is one none of whose tests pass before the fix. A passthru test whose derivation is
the same on both sides does not depend on the patched build: it is listed, not compared.
"""

from __future__ import annotations

import os
import re

from .applied import applied_policy
from .codes import gate_record
from .modules import load_json_object

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

CHECK_PHASES = ("checkPhase", "installCheckPhase")
_PHASE_RE = re.compile(r"^Running phase: (\w+)\s*$")
_TAP_RE = re.compile(r"^(not )?ok\b(?:\s+(\d+))?(?:\s*-)?\s*(.*?)\s*$")
TAIL = 2000


def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as fh:
        return fh.read()


def parse_log(log: str, status: int) -> dict[str, Any]:
    """Phases (each pass/fail) and TAP tests (by phase) of one test build's log."""
    phases: list[str] = []
    tests: dict[str, str] = {}
    for line in log.splitlines():
        m = _PHASE_RE.match(line)
        if m:
            phases.append(m.group(1))
            continue
        t = _TAP_RE.match(line)
        if t and phases and phases[-1] in CHECK_PHASES:
            desc = t.group(3) or f"test {t.group(2)}"
            if re.search(r"#\s*skip", desc, re.IGNORECASE):
                continue
            plain = re.sub(r"\s*#.*$", "", desc)
            name = f"{phases[-1]}: {plain}"
            k, unique = 2, name
            while unique in tests:
                unique, k = f"{name} #{k}", k + 1
            tests[unique] = "fail" if t.group(1) else "pass"
    phase_status = {p: "pass" for p in phases}
    if status != 0 and phases:
        phase_status[phases[-1]] = "fail"
    return {"status": status, "phases": phase_status, "tests": tests}


def _run_units(parsed: dict[str, Any], has: dict[str, Any]) -> dict[str, str]:
    """One run's units: each declared check phase (pass, fail, not-run) and each TAP test."""
    units: dict[str, str] = {}
    for phase, key in zip(CHECK_PHASES, ("check", "installCheck"), strict=True):
        if not has.get(key):
            continue
        # absent: an earlier phase failed
        units[phase] = parsed["phases"].get(phase, "not-run")
    for name, state in parsed["tests"].items():
        if has.get("check" if name.startswith("checkPhase") else "installCheck"):
            units[name] = state
    return units


def merge_runs(runs: list[dict[str, str]]) -> dict[str, str]:
    """The units over a suite's runs (the first, then each rerun made): `pass` when the first run
    passed it, `flaky` when it failed (or did not run) there and passed on a rerun, else its first
    state."""
    merged: dict[str, str] = {}
    for name in dict.fromkeys(n for run in runs for n in run):
        states = [run[name] for run in runs if name in run]
        if runs[0].get(name) == "pass":
            merged[name] = "pass"
        elif "pass" in states:
            merged[name] = "flaky"
        else:
            merged[name] = states[0]
    return merged


def _suite_run(path: str) -> tuple[int, str] | None:
    """(status, log) of one run of the suite; None for a rerun that was not needed."""
    if os.path.exists(os.path.join(path, "skipped")):
        return None
    return int(_read(os.path.join(path, "status")).strip() or "1"), _read(os.path.join(path, "log"))


def tests_record(cfg: dict[str, Any]) -> dict[str, Any]:
    """cfg: suite (the wrapped test build: `log`, `status`), reruns (its reruns' builds, each
    made only when the one before failed), has (check, installCheck), passthru (name -> {drv,
    out}), filter (base_tests side: the base-test-patches output, its tests.json)."""
    runs = [r for r in map(_suite_run, [cfg["suite"], *(cfg.get("reruns") or [])]) if r]
    status, log = runs[0]
    parsed = parse_log(log, status)
    has = cfg.get("has") or {}
    units = merge_runs([_run_units(parse_log(lg, st), has) for st, lg in runs])
    passthru: dict[str, dict[str, str]] = {}
    for name, t in sorted((cfg.get("passthru") or {}).items()):
        failed = os.path.exists(os.path.join(t["out"], ".trace-build-failed"))
        passthru[name] = {"drv": os.path.basename(t["drv"]), "status": "fail" if failed else "pass"}
        units[f"passthru.tests.{name}"] = passthru[name]["status"]
    record = {
        "schema": "trace.tests/v1",
        "has": {"check": bool(has.get("check")), "installCheck": bool(has.get("installCheck"))},
        "status": status,
        "phases": parsed["phases"],
        "runs": len(runs),
        "units": dict(sorted(units.items())),
        "passthru": passthru,
        "log_tail": log[-TAIL:],
    }
    if cfg.get("filter"):
        record["base_tests"] = load_json_object(os.path.join(cfg["filter"], "tests.json"))
        # the filtered series was the candidate's byte for byte: the patched suite's run, reused
        record["base_tests"]["reused_patched_suite"] = os.path.exists(
            os.path.join(cfg["suite"], "reused")
        )
    return record


def _load(path: str) -> dict[str, Any]:
    return load_json_object(os.path.join(path, "outcome.json"))


PASSED = ("pass", "flaky")


def _regressions(passing: list[str], sides: dict[str, dict[str, str]]) -> list[dict[str, str]]:
    """Each unit passing pre-fix that fails on a post-fix side every time it ran there."""
    out: list[dict[str, str]] = []
    for k in passing:
        for side, units in sides.items():
            if units.get(k) not in PASSED:
                out.append({"test": k, "post": units.get(k, "absent"), "side": side})
                break
    return out


def evaluate(cfg: dict[str, Any]) -> dict[str, Any]:
    """cfg: pre, post and post_base (tests step dirs; post_base: the post-fix build with the
    unpatched tree's tests), policy."""
    policy = applied_policy(cfg)
    pre, post = _load(cfg["pre"]), _load(cfg["post"])
    base = _load(cfg["post_base"]) if cfg.get("post_base") else None
    # a passthru test that is the same derivation on both sides does not test the patched build
    same = sorted(
        n
        for n, t in pre.get("passthru", {}).items()
        if post.get("passthru", {}).get(n, {}).get("drv") == t["drv"]
    )
    skip = {f"passthru.tests.{n}" for n in same}
    pre_units = {k: v for k, v in pre["units"].items() if k not in skip}
    post_units = {k: v for k, v in post["units"].items() if k not in skip}
    sides = {"post-fix, base tests": _units(base, skip)} if base is not None else {}
    sides["post-fix, patched tests"] = post_units
    passing = sorted(k for k, v in pre_units.items() if v in PASSED)
    regressions = _regressions(passing, sides)
    regressed = {r["test"] for r in regressions}
    flaky = sorted(
        {k for units in (pre_units, *sides.values()) for k, v in units.items() if v == "flaky"}
        - regressed
    )
    weakened = (base or {}).get("base_tests", {}).get("weakened", [])
    rules = _rules(bool(pre_units), bool(passing), bool(regressions), bool(flaky), bool(weakened))
    measurable = not {"regression.no-tests", "regression.none-pass-pre-fix"} & set(rules)
    kept = len(passing) - len(regressions)
    score = round(kept / len(passing), 6) if passing and measurable else None
    summary = _summary(len(pre_units), len(passing), regressions, flaky, weakened)
    return gate_record(
        "regression",
        rules,
        measurable=measurable,
        score=score,
        details={
            "summary": summary,
            "policy": policy,
            "tests": len(pre_units),
            "passing_pre_fix": len(passing),
            "regressions": regressions,
            "flaky": flaky,
            "tests_weakened": weakened,
            "why": _why(regressions, flaky, weakened),
            "failing_both": sorted(
                k
                for k, v in pre_units.items()
                if v not in PASSED and post_units.get(k) not in PASSED
            ),
            "fixed": sorted(
                k for k, v in pre_units.items() if v not in PASSED and post_units.get(k) in PASSED
            ),
            "new_tests": sorted(set(post_units) - set(pre_units)),
            "passthru_not_depending_on_the_patch": same,
            "pre": _side_summary(pre),
            "post": _side_summary(post),
            **({"post_base": _side_summary(base)} if base is not None else {}),
            "post_log_tail": _tail(regressions, post, base),
            # when nothing passes pre-fix: why (a tool missing from the sandbox, a build that
            # never reached the tests), read by `trace decide` (engine/policy/signing_decision.py)
            "pre_log_tail": str(pre.get("log_tail", "")) if pre_units and not passing else "",
        },
    )


def _rules(tests: bool, passing: bool, regressed: bool, flaky: bool, weakened: bool) -> list[str]:
    """The regression gate's reason codes: at most one of the first three, then the others."""
    rules: list[str] = []
    if not tests:
        rules.append("regression.no-tests")
    elif not passing:
        rules.append("regression.none-pass-pre-fix")
    elif regressed:
        rules.append("regression.introduced")
    if flaky:
        rules.append("regression.flaky-test")
    if weakened:
        rules.append("regression.tests-weakened")
    return rules


def _summary(
    tests: int,
    passing: int,
    regressions: list[dict[str, str]],
    flaky: list[str],
    weakened: list[dict[str, Any]],
) -> str:
    return (
        f"{tests} tests; {passing} pass pre-fix, {len(regressions)} of them fail "
        "post-fix"
        + (f" ({regressions[0]['test']}, {regressions[0]['side']})" if regressions else "")
        + (f"; flaky (passed on a rerun): {', '.join(flaky)}" if flaky else "")
        + (
            f"; the patch weakens the package's tests ({len(weakened)} finding(s))"
            if weakened
            else ""
        )
    )


def _why(
    regressions: list[dict[str, str]], flaky: list[str], weakened: list[dict[str, Any]]
) -> dict[str, str]:
    """What each code of the record saw, for `trace decide`'s reason details."""
    why: dict[str, str] = {}
    if regressions:
        why["regression-introduced"] = "; ".join(
            f"{r['test']} ({r['side']}: {r['post']})" for r in regressions
        )
    if flaky:
        why["flaky-test"] = "passed on a rerun: " + ", ".join(flaky)
    if weakened:
        why["tests-weakened"] = "; ".join(
            f"{w['file']}:{w['line'] or ''} {w['message']}" for w in weakened
        )
    return why


def _units(record: dict[str, Any], skip: set[str]) -> dict[str, str]:
    return {k: v for k, v in record["units"].items() if k not in skip}


def _side_summary(record: dict[str, Any]) -> dict[str, Any]:
    keys = ("has", "phases", "status", "runs")
    return {k: record[k] for k in keys if k in record}


def _tail(
    regressions: list[dict[str, str]], post: dict[str, Any], base: dict[str, Any] | None
) -> str:
    if not regressions:
        return ""
    if regressions[0]["side"] == "post-fix, base tests" and base is not None:
        return str(base["log_tail"])
    return str(post["log_tail"])
