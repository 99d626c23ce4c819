"""The signing policy file (policy/signing.toml): its rules, the gates' thresholds and the
review rule, loaded strictly with the reason catalogue it names.
`engine.policy.signing_decision.decide` applies it; `SigningPolicy.applied(gate)` is what a gate
step receives (through `engine.gates.context.gate_context`) and writes back as its record's
`details.policy`.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from engine.errors import PolicyError
from engine.paths import resolve_ref
from engine.policy.reasons import Catalogue, load_catalogue, require_code
from engine.policy.review import ReviewRule
from engine.policy.routing import State
from engine.policy.source import (
    PolicyHeader,
    PolicyRef,
    Strict,
    find_line,
    load_policy,
    ref,
)

SCHEMA = "trace.signing/v1"


class GateRule(Strict):
    required: bool = Field(default=True, description="an absent record denies (evidence-missing)")
    min_score: float | None = Field(
        default=None, ge=0, le=1, description="deny when the gate's score is below this"
    )
    below_threshold: str | None = Field(
        default=None, description="reason code for a score below min_score"
    )
    not_measurable: str | None = Field(
        default=None, description="reason code when the gate could not measure (measurable=false)"
    )
    max_files: int | None = Field(
        default=None, ge=1, description="scope gate only: most files a patch may touch"
    )
    max_hunks: int | None = Field(default=None, ge=1, description="scope gate only: most hunks")
    max_lines: int | None = Field(
        default=None, ge=1, description="scope gate only: most lines added plus removed"
    )
    budget: int | None = Field(
        default=None, ge=1, le=512, description="variants gate only: how many variants of the PoC"
    )
    seed: int | None = Field(
        default=None,
        ge=0,
        description="variants and fuzz gates only: the seed of the variant generator, or of "
        "the fuzzer's mutations",
    )
    executions: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="fuzz gate only: how many executions the fuzzer spends (never wall time)",
    )
    frames: int | None = Field(
        default=None,
        ge=1,
        description="fault-site gate only: K, how many innermost frames of the pre-fix failing "
        "stack (the package's own code) the patch must touch one of",
    )
    reruns: int | None = Field(
        default=None,
        ge=0,
        le=5,
        description="regression gate only: how many times a failing test suite runs again (a "
        "test that passes on a rerun is flaky-test, never regression-introduced)",
    )

    def thresholds(self) -> dict[str, float | int]:
        """The thresholds the gate step applies itself (absent: no bound)."""
        values = {k: getattr(self, k) for k in THRESHOLD_KEYS}
        return {k: v for k, v in values.items() if v is not None}


THRESHOLD_KEYS = (
    "min_score",
    "max_files",
    "max_hunks",
    "max_lines",
    "budget",
    "seed",
    "executions",
    "frames",
    "reruns",
)
SIZE_BOUNDS = ("max_files", "max_hunks", "max_lines")
SIZE_GATE = "scope"
VARIANT_KEYS = ("budget", "seed")
VARIANT_GATE = "variants"
FUZZ_GATE = "fuzz"


_SIGNABLE: tuple[State, ...] = ("auto-merge-eligible", "human-review-required")


class SigningRules(Strict):
    routes: list[State] = Field(
        default_factory=lambda: list(_SIGNABLE),
        description="routing states whose candidates may be signed",
    )
    min_runs: int = Field(default=3, ge=1, description="reproducer runs required per side")
    require_determinism_check: bool = Field(
        default=True, description="a missing --check result denies (determinism-unchecked)"
    )


class SigningFile(Strict):
    catalogue: str = Field(default="reasons.toml", description="reason catalogue, relative")
    policy: PolicyHeader
    signing: SigningRules = Field(default_factory=SigningRules)
    gates: dict[str, GateRule] = Field(default_factory=dict, description="by gate name")
    review: ReviewRule = Field(
        default_factory=ReviewRule, description="what a drafted candidate's review must be"
    )


class SigningPolicy(Strict):
    ref: PolicyRef
    rules: SigningRules
    gates: dict[str, GateRule]
    review: ReviewRule = Field(default_factory=ReviewRule)

    def applied(self, gate: str) -> dict[str, object]:
        """What a gate step applies and states in its record's `details.policy`: this policy's
        name and version and the gate's thresholds (`{}` when the policy sets none)."""
        rule = self.gates.get(gate)
        return {
            "name": self.ref.name,
            "version": self.ref.version,
            "thresholds": rule.thresholds() if rule else {},
        }


def load_signing_rules(path: Path) -> tuple[SigningPolicy, str, str]:
    """The signing policy file alone (no catalogue): the policy, the file's text and the
    catalogue path it names. What the gates need to know of it before anything is built."""
    spec, text, digest = load_policy(path, SigningFile, schema=SCHEMA, what="signing policy")
    # keys that belong to one gate only: (keys, that gate, what they are, the error's prefix)
    owned: tuple[tuple[tuple[str, ...], tuple[str, ...], str, str], ...] = (
        (SIZE_BOUNDS, (SIZE_GATE,), "max_files, max_hunks and max_lines bound", "size bound "),
        (("budget",), (VARIANT_GATE,), "budget and seed set", ""),
        (("seed",), (VARIANT_GATE, FUZZ_GATE), "seeds set", ""),
        (("executions",), (FUZZ_GATE,), "executions set", ""),
        (("reruns",), ("regression",), "reruns apply to", ""),
    )
    for name, rule in spec.gates.items():
        for keys, gates, what, prefix in owned:
            found = [k for k in keys if getattr(rule, k) is not None]
            if found and name not in gates:
                raise PolicyError(
                    f"{prefix}'{found[0]}' on gate '{name}'",
                    file=path,
                    key=f"gates.{name}.{found[0]}",
                    line=find_line(text, ("gates", name, found[0])),
                    hint=f"{what} the [gates.{gates[0]}] gate; move them there",
                )
    policy = SigningPolicy(
        ref=ref(spec.policy, path, digest),
        rules=spec.signing,
        gates=spec.gates,
        review=spec.review,
    )
    return policy, text, spec.catalogue


def load_signing(path: Path) -> tuple[SigningPolicy, Catalogue]:
    """The signing policy and the catalogue it names; every code it names must be catalogued."""
    policy, text, catalogue_name = load_signing_rules(path)
    # relative to the policy file, or `trace:policy/reasons.toml` for the shipped catalogue
    catalogue = load_catalogue(resolve_ref(catalogue_name, path.parent))
    for name, rule in policy.gates.items():
        for field in ("below_threshold", "not_measurable"):
            code = getattr(rule, field)
            if code is not None:
                require_code(catalogue, code, file=path, text=text, loc=("gates", name, field))
        if rule.min_score is not None and rule.below_threshold is None:
            raise PolicyError(
                "min_score without below_threshold",
                file=path,
                key=f"gates.{name}.min_score",
                line=find_line(text, ("gates", name, "min_score")),
                hint="name the reason code a low score denies with, e.g. "
                'below_threshold = "coverage-below-threshold"',
            )
    return policy, catalogue
