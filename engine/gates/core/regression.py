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
from typing import Any

from .applied import applied_policy
from .codes import gate_record
from .modules import load_json_object

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


def tests_record(cfg: dict[str, Any]) -> dict[str, Any]:
    """cfg: suite (the wrapped test build: `log`, `status`), has (check, installCheck),
    passthru (name -> {drv, out})."""
    suite = cfg["suite"]
    status = int(_read(os.path.join(suite, "status")).strip() or "1")
    log = _read(os.path.join(suite, "log"))
    parsed = parse_log(log, status)
    units: dict[str, str] = {}
    has = cfg.get("has") or {}
    for phase, key in zip(CHECK_PHASES, ("check", "installCheck"), strict=True):
        if not has.get(key):
            continue
        if phase in parsed["phases"]:
            units[phase] = parsed["phases"][phase]
        else:
            units[phase] = "not-run"  # an earlier phase failed
    for name, state in parsed["tests"].items():
        if has.get("check" if name.startswith("checkPhase") else "installCheck"):
            units[name] = state
    passthru: dict[str, dict[str, str]] = {}
    for name, t in sorted((cfg.get("passthru") or {}).items()):
        failed = os.path.exists(os.path.join(t["out"], ".trace-build-failed"))
        passthru[name] = {"drv": os.path.basename(t["drv"]), "status": "fail" if failed else "pass"}
        units[f"passthru.tests.{name}"] = passthru[name]["status"]
    return {
        "schema": "trace.tests/v1",
        "has": {"check": bool(has.get("check")), "installCheck": bool(has.get("installCheck"))},
        "status": status,
        "phases": parsed["phases"],
        "units": dict(sorted(units.items())),
        "passthru": passthru,
        "log_tail": log[-TAIL:],
    }


def _load(path: str) -> dict[str, Any]:
    return load_json_object(os.path.join(path, "outcome.json"))


def evaluate(cfg: dict[str, Any]) -> dict[str, Any]:
    """cfg: pre and post (tests step dirs), policy."""
    policy = applied_policy(cfg)
    pre, post = _load(cfg["pre"]), _load(cfg["post"])
    # a passthru test that is the same derivation on both sides does not test the patched build
    same = sorted(
        n
        for n, t in pre.get("passthru", {}).items()
        if post.get("passthru", {}).get(n, {}).get("drv") == t["drv"]
    )
    skip = {f"passthru.tests.{n}" for n in same}
    pre_units = {k: v for k, v in pre["units"].items() if k not in skip}
    post_units = {k: v for k, v in post["units"].items() if k not in skip}
    passing = sorted(k for k, v in pre_units.items() if v == "pass")
    regressions = [
        {"test": k, "post": post_units.get(k, "absent")}
        for k in passing
        if post_units.get(k) != "pass"
    ]
    rules: list[str] = []
    if not pre_units:
        rules.append("regression.no-tests")
    elif not passing:
        rules.append("regression.none-pass-pre-fix")
    elif regressions:
        rules.append("regression.introduced")
    measurable = not rules or rules == ["regression.introduced"]
    kept = len(passing) - len(regressions)
    score = round(kept / len(passing), 6) if passing and measurable else None
    summary = (
        f"{len(pre_units)} tests; {len(passing)} pass pre-fix, {len(regressions)} of them fail "
        "post-fix" + (f" ({regressions[0]['test']})" if regressions else "")
    )
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
            "failing_both": sorted(
                k for k, v in pre_units.items() if v != "pass" and post_units.get(k) != "pass"
            ),
            "fixed": sorted(
                k for k, v in pre_units.items() if v != "pass" and post_units.get(k) == "pass"
            ),
            "passthru_not_depending_on_the_patch": same,
            "pre": {"has": pre["has"], "phases": pre["phases"], "status": pre["status"]},
            "post": {"has": post["has"], "phases": post["phases"], "status": post["status"]},
            "post_log_tail": post["log_tail"] if regressions else "",
        },
    )
