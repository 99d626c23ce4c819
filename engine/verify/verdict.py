"""From a run of the verify graph to a `VerifyResult`: claims, reason codes, records per side.

Every verdict comes from how sandboxed builds exited: step statuses (a package that does not
build), the reproducer records the runs wrote, the expectation gate's record and the engine's
`--check` results. The rules that judge records live in one place, the expectation gate
(`trace_sandbox/gates/expectation.py` and the oracles of `oracle.py`), which runs in the sandbox;
this module imports the same code to judge one side on its own when the other side's build is
broken (then the gate step cannot run). A per-invocation oracle that selected no invocation is
a bad declaration: an input error naming the candidate's key, not a verdict.
"""

from __future__ import annotations

from typing import Any

from engine import __version__
from engine.build_records import GateRecord, RunRecord, Side
from engine.candidate import Candidate
from engine.errors import InputError
from engine.graphfile import find_line
from engine.graphtypes import Graph
from engine.paths import cli
from engine.run import RunResult, StepResult
from engine.verify.buildlog import build_failure_detail
from engine.verify_result import ClaimVerdict, SideResult, StepRef, VerifyResult
from trace_sandbox.host import judge_side, side_flaky

OK_STATUSES = ("built", "cached", "substituted", "reused")
BUILD_STEP = {"pre": "pre-fix", "post": "post-fix"}
RUN_STEP = {"pre": "pre-fix-run", "post": "post-fix-run"}
GATE_STEP = "expectation"


def step_ref(res: StepResult | None, sid: str) -> StepRef:
    if res is None:
        return StepRef(id=sid, status="missing")
    return StepRef(
        id=res.id,
        status=res.status,
        key=res.key,
        drv=res.drv,
        out=res.out,
        deterministic=res.deterministic,
        log_tail=res.log_tail or "",
        built_on=res.built_on,
        checked_on=res.checked_on,
    )


def _require(graph: Graph, base: str) -> list[str]:
    ids = [s.id for s in graph.steps.values() if s.base_id == base]
    if not ids:
        raise InputError(
            f"the verify graph has no step '{base}'",
            file=graph.entry,
            hint="include trace:graphs/verify.toml (or declare the standard verify steps)",
        )
    return sorted(ids, key=lambda i: graph.steps[i].repeat_index or 0)


def _side(side: Side, graph: Graph, run: RunResult) -> tuple[SideResult, list[StepRef]]:
    build = step_ref(run.steps.get(BUILD_STEP[side]), BUILD_STEP[side])
    build_ok = build.status in OK_STATUSES
    refs = [step_ref(run.steps.get(i), i) for i in _require(graph, RUN_STEP[side])]
    records: list[RunRecord] = []
    for n, (ref, sid) in enumerate(zip(refs, _require(graph, RUN_STEP[side]), strict=True), 1):
        outcome = run.steps[sid].outcome if sid in run.steps else None
        if build_ok and ref.status in OK_STATUSES and isinstance(outcome, dict):
            # the run derivation is not told its side (the reproducer must not know it): the
            # side comes from the step the record came from
            records.append(RunRecord.model_validate({**outcome, "side": side}))
        elif not build_ok:
            records.append(RunRecord(side=side, run=n, build="failed", target_ran=False))
    result = SideResult(
        side=side,
        build=build,
        build_ok=build_ok,
        runs=records,
        run_steps=refs,
        target_ran=bool(records) and all(r.target_ran for r in records),
        flaky=False,
    )
    return result, refs


def _claim(row: dict[str, Any]) -> ClaimVerdict:
    return ClaimVerdict.model_validate(row)


def _dumps(side: SideResult) -> list[dict[str, Any]]:
    return [r.model_dump(by_alias=True) for r in side.runs]


def _expectation_record(run: RunResult) -> GateRecord | None:
    """The expectation gate step's record, when that step ran and succeeded."""
    gate_res = run.steps.get(GATE_STEP)
    if gate_res is not None and gate_res.status in OK_STATUSES and gate_res.outcome:
        return GateRecord.model_validate(gate_res.outcome)
    return None


def _gate_claims(
    candidate: Candidate, gate_record: GateRecord, pre: SideResult, post: SideResult
) -> dict[str, ClaimVerdict]:
    """The claims as the expectation gate step judged them in the sandbox (and its flakiness)."""
    claims: dict[str, ClaimVerdict] = {}
    details: dict[str, Any] = dict(gate_record.details)
    for row in details.get("claims", []):
        _unmatched(candidate, row)
        c = _claim(row)
        claims[c.claim] = c
    flaky: dict[str, Any] = details.get("flaky", {})
    pre.flaky = bool(flaky.get("pre"))
    post.flaky = bool(flaky.get("post"))
    return claims


def _side_claim(
    candidate: Candidate,
    run: RunResult,
    side: SideResult,
    refs: list[StepRef],
    name: str,
    oracles: dict[str, Any],
) -> ClaimVerdict:
    """One side's claim judged here (no expectation gate step): its build, its runs, its oracles."""
    failed_runs = [r.id for r in refs if r.status == "failed"]
    if not side.build_ok:
        return ClaimVerdict(
            claim=name,
            evidence=f"step {side.build.id}: {side.build.status}",
            holds=False,
            reason=f"{side.side}-fix-build-broken",
            detail=build_failure_detail(
                side.build.log_tail,
                side.build.drv,
                [candidate.file(p) for p in candidate.spec.patches],
            ),
        )
    if failed_runs:
        return ClaimVerdict(
            claim=name,
            evidence=", ".join(failed_runs) + ": failed",
            holds=False,
            reason="run-step-failed",
            detail=_last_line(run.steps[failed_runs[0]].log_tail or ""),
        )
    row = judge_side(side.side, _dumps(side), oracles)
    _unmatched(candidate, row)
    side.flaky = side_flaky(_dumps(side), oracles)
    return _claim(row)


def _host_claims(
    candidate: Candidate,
    run: RunResult,
    sides: tuple[tuple[SideResult, list[StepRef]], tuple[SideResult, list[StepRef]]],
    oracles: dict[str, Any],
) -> dict[str, ClaimVerdict]:
    """Both sides' claims judged here, and whether their runs agreed."""
    (pre, pre_refs), (post, post_refs) = sides
    claims: dict[str, ClaimVerdict] = {}
    for side, refs, name in (
        (pre, pre_refs, "pre-fix-fails-as-expected"),
        (post, post_refs, "post-fix-survives"),
    ):
        claims[name] = _side_claim(candidate, run, side, refs, name, oracles)
    any_flaky = pre.flaky or post.flaky
    claims["runs-agree"] = ClaimVerdict(
        claim="runs-agree",
        evidence="runs compared on the sides whose builds succeeded",
        holds=not any_flaky,
        reason="flaky" if any_flaky else "ok",
    )
    return claims


def _gate_records(graph: Graph, run: RunResult) -> dict[str, GateRecord]:
    """The run's derived gate records, then every successful gate step's own, in graph order."""
    gates: dict[str, GateRecord] = {r.gate: r for r in derived_gate_records(run)}
    for sid in graph.order:
        res = run.steps.get(sid)
        if sid == GATE_STEP or res is None or res.status not in OK_STATUSES:
            continue
        outcome = res.outcome
        if isinstance(outcome, dict) and outcome.get("schema") == "trace.gate/v1":
            record = GateRecord.model_validate(outcome)
            gates[record.gate] = record
    return gates


CLAIM_ORDER = ("pre-fix-fails-as-expected", "post-fix-survives", "runs-agree", "deterministic")


def judge(candidate: Candidate, graph: Graph, run: RunResult) -> VerifyResult:
    """The verdict of one `trace verify` run."""
    oracles = candidate.oracles()
    pre, pre_refs = _side("pre", graph, run)
    post, post_refs = _side("post", graph, run)
    gate_record = _expectation_record(run)
    if gate_record is not None:
        claims = _gate_claims(candidate, gate_record, pre, post)
    else:
        claims = _host_claims(candidate, run, ((pre, pre_refs), (post, post_refs)), oracles)
    claims["deterministic"] = determinism_claim(run)
    rows = [claims[c] for c in CLAIM_ORDER if c in claims]
    reasons: list[str] = []
    for row in rows:
        if not row.holds and row.reason not in reasons:
            reasons.append(row.reason)
    steps = {sid: step_ref(res, sid) for sid, res in run.steps.items()}
    return VerifyResult(
        candidate=candidate.spec.id,
        candidate_file=str(candidate.path),
        package=candidate.spec.package,
        passed=not reasons,
        reasons=reasons,
        claims=rows,
        pre=pre,
        post=post,
        expectation=gate_record,
        gates=_gate_records(graph, run),
        deterministic=claims["deterministic"].holds
        if claims["deterministic"].reason in ("ok", "nondeterministic")
        else None,
        flaky=pre.flaky or post.flaky,
        oracles=oracles,
        steps=steps,
        graph=str(graph.entry),
        engine_version=__version__,
    )


def _unmatched(candidate: Candidate, row: dict[str, Any]) -> None:
    """A per-invocation oracle that selected no target invocation: the declaration is wrong (an
    oracle for an invocation that never happened), so say which key, not a verdict."""
    keys = row.pop("unmatched", None)
    if not keys:
        return
    key = str(keys[0])
    text = candidate.path.read_text(encoding="utf-8")
    raise InputError(
        f"the oracle '{key}' selected no target invocation of the reproducer "
        f"({row['claim']}: {', '.join(str(k) for k in keys)})",
        file=candidate.path,
        key=key,
        line=find_line(text, key.split(".")[:2]),
        hint="fix its selector (target, args regex, 1-based index in canonical order: by "
        "program, then arguments) or make the reproducer run that invocation; the run records "
        f"list every invocation (`{cli('verify --json')}`)",
    )


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def _repeat(sid: str) -> int:
    return int(sid.rsplit("@", 1)[1]) if "@" in sid else 0


def determinism_claim(run: RunResult) -> ClaimVerdict:
    """From the engine's `--check` results of the post-fix build and its reproducer runs."""
    build = run.steps.get(BUILD_STEP["post"])
    runs = sorted(
        (r for r in run.steps.values() if r.id.split("@")[0] == RUN_STEP["post"]),
        key=lambda r: _repeat(r.id),
    )
    evidence = "--check rebuild of " + ", ".join([BUILD_STEP["post"], *(r.id for r in runs)])
    if build is None or build.status not in OK_STATUSES:
        return ClaimVerdict(
            claim="deterministic",
            evidence=evidence,
            holds=False,
            reason="post-fix-build-broken",
            detail="nothing to rebuild",
        )
    checked = [build, *runs]
    differed = [r.id for r in checked if r.deterministic is False]
    if differed:
        return ClaimVerdict(
            claim="deterministic",
            evidence=evidence,
            holds=False,
            reason="nondeterministic",
            detail="output differed on rebuild: " + ", ".join(differed),
        )
    unchecked = [r.id for r in checked if r.deterministic is None]
    if unchecked:
        return ClaimVerdict(
            claim="deterministic",
            evidence=evidence,
            holds=False,
            reason="determinism-unchecked",
            detail="no --check result for " + ", ".join(unchecked),
        )
    return ClaimVerdict(claim="deterministic", evidence=evidence, holds=True, reason="ok")


DETERMINISM_GATE = "determinism"


def derived_gate_records(run: RunResult) -> list[GateRecord]:
    """Gate records `trace verify` derives in Python from the run itself, beside the records the
    gate steps write: `determinism` (the `--check` rebuild happens after the expectation gate's
    derivation is built, so that gate cannot carry it; issue 3's "both results": the flakiness is
    in the expectation record, the determinism in this one)."""
    claim = determinism_claim(run)
    checked = {
        r.id: r.deterministic
        for r in run.steps.values()
        if r.id == BUILD_STEP["post"] or r.id.split("@")[0] == RUN_STEP["post"]
    }
    record = GateRecord(
        gate=DETERMINISM_GATE,
        passed=claim.holds,
        measurable=claim.reason in ("ok", "nondeterministic"),
        reasons=[] if claim.holds else [claim.reason],
        details={
            "summary": claim.detail or "rebuilt identically with --check",
            "evidence": claim.evidence,
            "checked": dict(sorted(checked.items())),
        },
    )
    return [record]
