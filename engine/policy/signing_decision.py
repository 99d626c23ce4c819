"""Signing: after the evidence exists, allow or deny signing its bundle.

`decide()` is pure: the evidence view, the routing decision, the signing policy, the catalogue,
the waivers and `today` in; a `Decision` out. It denies with a catalogued reason code for every
problem it finds, and never allows on absent evidence: a gate the policy requires that left no
record is `evidence-missing`. It re-derives what it can from the raw reproducer run records
instead of trusting the verify summary, and applies its own thresholds to gate scores.

The policy file and the gates' thresholds are engine/policy/signing_rules.py (`load_signing`,
re-exported here); `decide()` denies with `policy-unknown-version` when a gate record applied
another policy's thresholds than `SigningPolicy.applied(gate)`.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import Field

from engine import hostpaths
from engine.build_records import GateRecord, RunRecord
from engine.policy.evidence_view import Evidence, SourceRef
from engine.policy.reasons import Catalogue
from engine.policy.review import ReviewEvidence, review_findings
from engine.policy.routing import RouteDecision
from engine.policy.signing_rules import SigningPolicy, SigningRules
from engine.policy.signing_rules import load_signing as load_signing
from engine.policy.signing_rules import load_signing_rules as load_signing_rules
from engine.policy.source import PolicyRef, Strict
from engine.policy.waivers import IgnoredWaiver, Waiver, WaiverSet
from trace_sandbox.host import judge_pre, post_fix_acceptable


class Hit(Strict):
    """One finding before classification: a code, where it came from, what exactly."""

    code: str
    source: str = Field(description="which record showed it: verify, gate:<name>, routing, ...")
    detail: str = ""


class Reason(Strict):
    code: str
    message: str
    solution: str
    effective_on: dt.date
    sources: list[str]
    details: list[str] = Field(default_factory=list)


class WaiverUse(Strict):
    waiver: Waiver
    status: Literal["applied", "expired", "unused"]


class Decision(Strict):
    """The decision record the evidence bundle includes."""

    schema_: Literal["trace.decision/v1"] = Field(default="trace.decision/v1", alias="schema")
    candidate: str
    decision: Literal["allow", "deny"]
    date: dt.date = Field(description="the day the decision was made (waiver expiry, effective_on)")
    policy: PolicyRef
    catalogue: PolicyRef
    waivers_file: PolicyRef | None
    routing: RouteDecision
    evidence: list[SourceRef]
    reasons: list[Reason] = Field(description="every reason that denies")
    warnings: list[Reason] = Field(description="hits of codes not yet effective on `date`")
    waived: list[Reason] = Field(description="hits lifted by an applied waiver")
    waivers: list[WaiverUse] = Field(description="every waiver naming this candidate")
    maintainers: PolicyRef | None = Field(
        default=None, description="the maintainers policy the waivers' signers were checked against"
    )
    ignored_waivers: list[IgnoredWaiver] = Field(
        default_factory=list,
        description="waiver files ignored (unsigned, foreign-signed, stale...), with why",
    )
    review: ReviewEvidence | None = Field(
        default=None, description="the review claims the decision read (a drafted candidate)"
    )


Outcome = tuple[object, ...]


def _outcome(run: RunRecord) -> Outcome:
    """How a run ended, for comparing runs: the target's own invocations (exit code, signal,
    sanitizer kind each), and the reproducer script's exit code and signal."""
    targets = tuple(
        (i.exit_code, i.signal, i.sanitizer.kind if i.sanitizer else None) for i in run.invocations
    )
    kind = run.sanitizer.kind if run.sanitizer else None
    return (run.failed, targets, kind, run.exit_code, run.signal)


def _misbehaved(run: RunRecord, oracles: dict[str, Any] | None) -> bool:
    """The pre-fix run shows the bug: by the declared [expect] when the result carries it."""
    if oracles is None:
        return run.failed
    invs = [i.model_dump() for i in run.invocations]
    return judge_pre(invs, oracles.get("expect") or {}).holds


def _unacceptable(run: RunRecord, oracles: dict[str, Any] | None) -> bool:
    """The post-fix run is not a fixed behaviour: by the declared [accept] (default: exit 0)."""
    if oracles is None:
        return run.failed
    return not post_fix_acceptable(run.model_dump(by_alias=True), oracles)[0]


def _run_hits(ev: Evidence, rules: SigningRules) -> list[Hit]:
    """What the raw reproducer run records show, independent of verify's own verdicts."""
    v = ev.verify
    if v is None:
        return [Hit(code="evidence-missing", source="verify", detail="no verify result")]
    hits: list[Hit] = []
    if v.candidate != ev.candidate:
        hits.append(
            Hit(
                code="evidence-candidate-mismatch",
                source="verify",
                detail=f"verify result is for '{v.candidate}', not '{ev.candidate}'",
            )
        )
    for side, res, broken in (
        ("pre", v.pre, "pre-fix-build-broken"),
        ("post", v.post, "post-fix-build-broken"),
    ):
        src = f"verify:{side}"
        built = [r for r in res.runs if r.build == "ok"]
        if not res.build_ok or len(built) < len(res.runs):
            hits.append(Hit(code=broken, source=src, detail=f"{side}-fix build did not succeed"))
            continue
        if len(res.runs) < rules.min_runs:
            hits.append(
                Hit(
                    code="too-few-runs",
                    source=src,
                    detail=f"{len(res.runs)} {side}-fix run(s), policy requires {rules.min_runs}",
                )
            )
        if not res.runs:
            continue
        if any(not r.target_ran for r in res.runs):
            hits.append(
                Hit(code="target-never-ran", source=src, detail=f"a {side}-fix run never ran it")
            )
        if len({_outcome(r) for r in res.runs}) > 1:
            hits.append(Hit(code="flaky", source=src, detail=f"{side}-fix runs disagree"))
        if side == "pre" and not any(_misbehaved(r, v.oracles) for r in res.runs):
            hits.append(
                Hit(code="pre-fix-did-not-fail", source=src, detail="no pre-fix run failed")
            )
        if side == "post" and any(_unacceptable(r, v.oracles) for r in res.runs):
            n = sum(_unacceptable(r, v.oracles) for r in res.runs)
            hits.append(
                Hit(code="post-fix-still-fails", source=src, detail=f"{n} post-fix run(s) failed")
            )
    if v.deterministic is False:
        hits.append(Hit(code="nondeterministic", source="verify", detail="--check differed"))
    elif v.deterministic is None and rules.require_determinism_check:
        hits.append(Hit(code="determinism-unchecked", source="verify", detail="no --check result"))
    for claim in v.claims:
        if not claim.holds:
            hits.append(Hit(code=claim.reason, source=f"verify:{claim.claim}", detail=claim.detail))
    hits += [Hit(code=code, source="verify") for code in v.reasons]
    return hits


def _policy_hit(name: str, rec: GateRecord, policy: SigningPolicy) -> Hit | None:
    """A gate record must have applied the deciding policy's thresholds: it names the policy
    (name, version) and the thresholds it applied in `details.policy`."""
    want = policy.applied(name)
    deciding = f"{want['name']} {want['version']}"
    stated = rec.details.get("policy")
    src = f"gate:{name}"
    if not isinstance(stated, dict):
        if not want["thresholds"]:
            return None  # a gate without thresholds in this policy (expectation, a fork's own)
        return Hit(
            code="policy-unknown-version",
            source=src,
            detail=f"the record names no policy; the deciding policy {deciding} sets "
            f"thresholds for it",
        )
    if (stated.get("name"), stated.get("version")) != (want["name"], want["version"]):
        used = f"{stated.get('name')} {stated.get('version')}"
        return Hit(
            code="policy-unknown-version",
            source=src,
            detail=f"evaluated under {used}; the deciding policy is {deciding}",
        )
    applied = stated.get("thresholds") or {}
    if applied != want["thresholds"]:
        return Hit(
            code="policy-unknown-version",
            source=src,
            detail=f"applied thresholds {_show(applied)}, but {deciding} sets "
            f"{_show(want['thresholds'])} (was the policy edited without a version bump?)",
        )
    return None


def _show(values: object) -> str:
    if not isinstance(values, dict) or not values:
        return "none"
    return ", ".join(f"{k}={v}" for k, v in sorted(values.items()))


ENVIRONMENTAL = "environmental:"


def environmental(gate: str, details: dict[str, Any]) -> str:
    """A gate whose record's logs (details.*log_tail) show a tool missing from the sandbox
    failed for the environment, not for the patch: what it saw and where, else ''."""
    from engine.hostpaths import missing_tool

    for key, value in sorted(details.items()):
        if key.endswith("log_tail") and isinstance(value, str) and (m := missing_tool(value)):
            return (
                f"{ENVIRONMENTAL} `{m[1]}` in the {gate} gate's record (payload/gates/{gate}.json, "
                f"details.{key}): the sandbox has no `{m[0]}`, so the build never reached the "
                "tests; the patch is not what failed"
            )
    return ""


def _gate_hits(ev: Evidence, policy: SigningPolicy, catalogue: Catalogue) -> list[Hit]:
    hits: list[Hit] = []
    for name, rule in sorted(policy.gates.items()):
        if name not in ev.gates and rule.required:
            hits.append(
                Hit(code="evidence-missing", source=f"gate:{name}", detail="no record written")
            )
    for name, rec in sorted(ev.gates.items()):
        src = f"gate:{name}"
        # a gate may say, per code, what exactly it saw (details.why: code -> text)
        why = rec.details.get("why")
        env = environmental(name, rec.details)
        for code in rec.reasons:
            if code in catalogue:
                said = why.get(code) if isinstance(why, dict) else None
                detail = "; ".join(d for d in (env, str(said or "")) if d)
                hits.append(Hit(code=code, source=src, detail=detail))
            else:
                hits.append(Hit(code="evidence-unknown-reason", source=src, detail=code))
        if not rec.passed and not rec.reasons:
            hits.append(Hit(code="evidence-unexplained-failure", source=src))
        mismatch = _policy_hit(name, rec, policy)
        if mismatch is not None:
            hits.append(mismatch)
        gate_rule = policy.gates.get(name)
        if gate_rule is None or gate_rule.min_score is None:
            continue
        if not rec.measurable:
            code = gate_rule.not_measurable or "evidence-missing"
            # the gate's own account of why (its summary's first line), else a generic word;
            # a tool missing from the sandbox first (`environmental`)
            why = str(rec.details.get("summary") or "").split("\n", 1)[0].strip()
            said = "; ".join(d for d in (env, why or "gate could not measure") if d)
            hits.append(Hit(code=code, source=src, detail=said))
        elif rec.score is None:
            hits.append(Hit(code="evidence-missing", source=src, detail="record has no score"))
        elif rec.score < gate_rule.min_score:
            hits.append(
                Hit(
                    code=gate_rule.below_threshold or "evidence-missing",
                    source=src,
                    detail=f"score {rec.score:g} < {gate_rule.min_score:g}",
                )
            )
    return hits


def _hits(
    evidence: Evidence, routing: RouteDecision, policy: SigningPolicy, catalogue: Catalogue
) -> list[Hit]:
    """Every finding: the route, the candidate named, the runs, the gates, the review."""
    hits: list[Hit] = []
    if routing.state not in policy.rules.routes:
        hits.append(Hit(code="routing-not-signable", source="routing", detail=routing.state))
    if routing.facts.candidate != evidence.candidate:
        hits.append(
            Hit(
                code="evidence-candidate-mismatch",
                source="routing",
                detail=f"routed '{routing.facts.candidate}', evidence for '{evidence.candidate}'",
            )
        )
    hits += _run_hits(evidence, policy.rules)
    hits += _gate_hits(evidence, policy, catalogue)
    origin = routing.facts.origin
    for code, source, detail in review_findings(policy.review, evidence.review, origin):
        hits.append(Hit(code=code, source=source, detail=detail))
    return hits


def _merge(hits: list[Hit], catalogue: Catalogue) -> dict[str, tuple[list[str], list[str]]]:
    """code -> (its sources, its details), in order of first finding; an uncatalogued code is
    `evidence-unknown-reason` (its code kept as the detail)."""
    merged: dict[str, tuple[list[str], list[str]]] = {}
    for h in hits:
        code = h.code if h.code in catalogue else "evidence-unknown-reason"
        sources, details = merged.setdefault(code, ([], []))
        if h.source not in sources:
            sources.append(h.source)
        detail = h.detail if code == h.code else (h.detail or h.code)
        if detail and detail not in details:
            details.append(detail)
    return merged


Classified = tuple[list[Reason], list[Reason], list[Reason], set[str]]


def _classify(
    merged: dict[str, tuple[list[str], list[str]]],
    catalogue: Catalogue,
    active: dict[str, Waiver],
    today: dt.date,
) -> Classified:
    """(reasons that deny, warnings not yet effective, waived reasons, the codes waived)."""
    used: set[str] = set()
    reasons: list[Reason] = []
    warnings: list[Reason] = []
    waived: list[Reason] = []
    for code, (sources, details) in merged.items():
        spec = catalogue.reasons[code]
        env = any(d.startswith(ENVIRONMENTAL) for d in details)
        reason = Reason(
            code=code,
            message=spec.message,
            solution=hostpaths.ADVICE if env else spec.solution,
            effective_on=spec.effective_on,
            sources=sources,
            details=details,
        )
        if spec.effective_on > today:
            warnings.append(reason)
        elif code in active and spec.waivable:
            waived.append(reason)
            used.add(code)
        else:
            reasons.append(reason)
    return reasons, warnings, waived, used


def decide(
    evidence: Evidence,
    routing: RouteDecision,
    policy: SigningPolicy,
    catalogue: Catalogue,
    waivers: WaiverSet,
    today: dt.date,
) -> Decision:
    """Allow only when no effective, unwaived reason remains. Pure: no I/O, no clock."""
    merged = _merge(_hits(evidence, routing, policy, catalogue), catalogue)
    mine = waivers.for_candidate(evidence.candidate)
    active = {w.reason: w for w in mine if w.active_on(today)}
    reasons, warnings, waived, used = _classify(merged, catalogue, active, today)
    uses = [
        WaiverUse(
            waiver=w,
            status="expired"
            if not w.active_on(today)
            else ("applied" if w.reason in used else "unused"),
        )
        for w in mine
    ]
    return Decision(
        candidate=evidence.candidate,
        decision="deny" if reasons else "allow",
        date=today,
        policy=policy.ref,
        catalogue=catalogue.ref,
        waivers_file=waivers.ref,
        routing=routing,
        evidence=evidence.sources,
        reasons=reasons,
        warnings=warnings,
        waived=waived,
        waivers=uses,
        maintainers=waivers.maintainers,
        ignored_waivers=[i for i in waivers.ignored if i.candidate in (None, evidence.candidate)],
        review=evidence.review,
    )
