"""The top of a report: what was decided, why, what was proven, and whether the bundle is intact.

Two questions a reviewer asks first, kept apart:
- the decision: ALLOW, DENY, or REVIEW (denied only by reasons a signed waiver may lift), with
  each deny reason's one-line meaning and what to do (as the signing decision carries them from
  policy/reasons.toml; `waivable` from the shipped catalogue);
- integrity, three states and never one colour for two meanings: `verified` (green), `amber`
  (the bundle is intact but unsigned on purpose or its decision is a deny: verify-bundle fails
  only with INTENT_REASONS) and `red` (anything else: a changed file, a bad signature, an
  unknown key).
What was proven comes from the run records and gate records in one sentence each (proven.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel

from engine.audit.checks import BundleVerdict
from engine.audit.signature import Check
from engine.report.lenient_json import as_dict, as_list
from engine.report.load import LoadedBundle
from engine.report.proven import Proof, proofs

Integrity = Literal["verified", "amber", "red"]
Decision = Literal["ALLOW", "DENY", "REVIEW", "NONE", "UNTRUSTED"]

# verify-bundle reasons that say "not trusted as a fix" rather than "not intact": the bundle was
# left unsigned on purpose, or its signing decision is a deny (a denied bundle is not signed).
INTENT_REASONS = frozenset({"bundle.unsigned", "decision.denied"})


class Reason(BaseModel):
    code: str
    message: str = ""
    solution: str = ""
    waivable: bool = False
    details: list[str] = []


class IntegrityLine(BaseModel):
    state: Integrity
    label: str
    reasons: list[str] = []


class Verdict(BaseModel):
    decision: Decision
    headline: str
    reasons: list[Reason]
    warnings: list[Reason] = []
    waived: list[Reason] = []
    proofs: list[Proof]
    integrity: IntegrityLine

    @property
    def trusted(self) -> bool:
        return self.integrity.state != "red"

    routing: str = ""


def not_run(check: Check) -> bool:
    """A check verify-bundle skipped (it carries ok=True and says so): neither pass nor fail."""
    return check.ok and check.detail.startswith("not run")


def integrity(verdict: BundleVerdict) -> IntegrityLine:
    if verdict.passed:
        signed = f"signed ({verdict.mode})" if verdict.mode in ("key", "keyless") else "checked"
        return IntegrityLine(
            state="verified", label=f"Intact: {signed}, every payload digest verified"
        )
    codes = list(dict.fromkeys(verdict.reasons))
    if codes and set(codes) <= INTENT_REASONS:
        what = []
        if "bundle.unsigned" in codes:
            what.append("not signed")
        if "decision.denied" in codes:
            what.append("its decision is a deny")
        return IntegrityLine(
            state="amber",
            label=f"Intact but not vouched for: {' and '.join(what)}; every digest checked",
            reasons=codes,
        )
    return IntegrityLine(
        state="red", label="NOT INTACT: do not trust this bundle", reasons=codes or ["unknown"]
    )


def _waivable_codes() -> dict[str, bool]:
    """code -> waivable, from the shipped catalogue (empty when it cannot be read)."""
    from engine.errors import TraceError
    from engine.paths import data_dir
    from engine.policy.reasons import load_catalogue

    try:
        cat = load_catalogue(data_dir() / "policy" / "reasons.toml")
    except (TraceError, OSError):
        return {}
    return {code: spec.waivable for code, spec in cat.reasons.items()}


def _reasons(items: Iterable[Any], waivable: dict[str, bool]) -> list[Reason]:
    out = []
    for item in items:
        r = as_dict(item)
        code = str(r.get("code") or "")
        if not code:
            continue
        out.append(
            Reason(
                code=code,
                message=str(r.get("message") or ""),
                solution=str(r.get("solution") or ""),
                waivable=waivable.get(code, False),
                details=[str(d) for d in as_list(r.get("details"))],
            )
        )
    return out


def _decision(signing: dict[str, Any], reasons: list[Reason]) -> tuple[Decision, str]:
    value = str(signing.get("decision") or "")
    if value == "allow":
        return "ALLOW", "Allowed: the signing policy found no reason to deny"
    if value != "deny":
        return "NONE", "No signing decision in this bundle"
    if reasons and all(r.waivable for r in reasons):
        n = len(reasons)
        return "REVIEW", f"Review: denied by {n} waivable reason{'s' if n > 1 else ''}"
    n = len(reasons)
    return "DENY", f"Denied by {n} reason{'s' if n != 1 else ''}"


def build_verdict(b: LoadedBundle) -> Verdict:
    signing = as_dict(b.doc("decisions/signing.json"))
    waivable = _waivable_codes()
    reasons = _reasons(as_list(signing.get("reasons")), waivable)
    decision, headline = _decision(signing, reasons)
    line = integrity(b.verdict)
    if line.state == "red":  # what a tampered bundle says it decided is not a decision
        said = decision if decision != "NONE" else "no decision"
        decision, headline = "UNTRUSTED", f"The bundle says {said}, but it is not intact"
    return Verdict(
        decision=decision,
        headline=headline,
        reasons=reasons,
        warnings=_reasons(as_list(signing.get("warnings")), waivable),
        waived=_reasons(as_list(signing.get("waived")), waivable),
        proofs=proofs(b),
        integrity=line,
        routing=str(as_dict(b.doc("decisions/routing.json")).get("state") or ""),
    )
