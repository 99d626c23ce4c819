"""The machine-readable result of `trace verify` (consumed by evidence bundles and policies).

Field names are a stable contract: bundles and the signing policy refer to them. Reason codes
(`REASONS`, declared in policy/reasons.toml), once published, never change meaning.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from engine.build_records import GateRecord, RunRecord, Side

# The codes `trace verify` emits ("ok": the claim holds). Their messages, solutions, effective
# dates and waivability are declared once, in the reason catalogue policy/reasons.toml
# (engine.policy.reasons; tests/test_policy_signing.py holds each code to it).
REASONS: tuple[str, ...] = (
    "ok",
    "pre-fix-build-broken",
    "post-fix-build-broken",
    "pre-fix-did-not-fail",
    "pre-fix-wrong-failure",
    "post-fix-still-fails",
    "target-never-ran",
    "flaky",
    "nondeterministic",
    "determinism-unchecked",
    "run-step-failed",
)

Claim = Literal["pre-fix-fails-as-expected", "post-fix-survives", "runs-agree", "deterministic"]
StepStatus = Literal["built", "cached", "substituted", "reused", "failed", "skipped", "missing"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class StepRef(_Model):
    """One engine step that contributed evidence."""

    id: str
    status: StepStatus
    key: str | None = None
    drv: str | None = None
    out: str | None = None
    deterministic: bool | None = Field(default=None, description="--check result (check steps)")
    log_tail: str = ""
    built_on: str | None = Field(
        default=None,
        description="the machine that made the output: 'local', a builder's store URI or "
        "'cache:<url>' (not in a bundle's payload: see MACHINE_KEYS)",
    )
    checked_on: str | None = Field(
        default=None, description="the machine that did the --check rebuild (check steps)"
    )


# Where a step ran is a fact about one run, not about the evidence: a second machine that
# substitutes the first one's outputs has the same evidence. These keys stay out of a bundle's
# payload (its digests are the same on both machines) and go to the statement's runDetails.
MACHINE_KEYS = frozenset({"built_on", "checked_on"})


class SideResult(_Model):
    """One side (pre-fix or post-fix): its build and every reproducer run against it."""

    side: Side
    build: StepRef
    build_ok: bool
    runs: list[RunRecord] = Field(description="one record per run (K); build failures included")
    run_steps: list[StepRef]
    target_ran: bool = Field(description="every run reached the package's program or module")
    flaky: bool = Field(description="the runs' outcomes disagree")


class ClaimVerdict(_Model):
    """One row of the verdict table."""

    claim: Claim
    evidence: str = Field(description="which steps/records the verdict was read from")
    holds: bool
    reason: str = Field(description="a code from REASONS; 'ok' when the claim holds")
    detail: str = ""


class VerifyResult(_Model):
    """Everything `trace verify` decided, and from which builds."""

    schema_: Literal["trace.verify/v1"] = Field(default="trace.verify/v1", alias="schema")
    candidate: str = Field(description="candidate id")
    candidate_file: str
    package: str
    passed: bool = Field(description="every claim holds (exit 0)")
    reasons: list[str] = Field(description="reason codes of every claim that does not hold")
    claims: list[ClaimVerdict]
    pre: SideResult
    post: SideResult
    expectation: GateRecord | None = Field(
        default=None, description="the expectation gate step's own record, when it ran"
    )
    gates: dict[str, GateRecord] = Field(
        default_factory=dict,
        description="records of the other gate steps that ran (scope, mutation, coverage, a "
        "fork's own gates), by gate name, plus `determinism`, derived from the engine's --check "
        "results of the post-fix build and its reproducer runs; the signing policy judges them, "
        "not `trace verify`",
    )
    deterministic: bool | None = Field(
        description="post-fix build and records rebuilt identically with --check (None: unknown)"
    )
    oracles: dict[str, Any] | None = Field(
        default=None,
        description="the candidate's declared oracles ({expect, accept}, as "
        "trace_sandbox/gates/oracle.py reads them) the claims were judged by; the signing policy "
        "judges the raw run records by the same (None: an older result, judged by exit 0)",
    )
    flaky: bool
    steps: dict[str, StepRef] = Field(description="every step of the graph by id")
    graph: str = Field(description="entry pipeline file")
    engine_version: str

    def machines(self) -> dict[str, dict[str, int]]:
        """{'built': {machine: steps}, 'checked': {machine: steps}} over every step."""
        out: dict[str, dict[str, int]] = {"built": {}, "checked": {}}
        for step in self.steps.values():
            for what, where in (("built", step.built_on), ("checked", step.checked_on)):
                if where:
                    out[what][where] = out[what].get(where, 0) + 1
        return out
