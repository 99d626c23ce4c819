"""The gates' part of a pipeline's var context: what must be known before Nix evaluates.

* The mutants are built one derivation each (the mutant-runs step's template makes them from
  its `count`, then runs them all in one derivation), so the number of mutants must be known
  when the graph is loaded. It is computed here with the same pure generator the sandbox runs
  (trace_sandbox.gates.mutate), so both sides agree; the mutation gate checks that they do.
* The gates' thresholds live in the signing policy only ([gates.mutation] and [gates.coverage]
  min_score, [gates.scope] max_files/max_hunks/max_lines, [gates.fault-site] frames). Each gate
  step receives, as its `policy` parameter, `SigningPolicy.applied(gate)` as JSON: the policy's
  name, version and that gate's thresholds. The gate applies them and writes them back as its
  record's `details.policy`, which `trace decide` checks against the policy deciding.

Merge into the load context as `{"gates": gate_context(candidate, ...)}`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engine.candidate import Candidate

# A fork's own signing policy, where `trace fork` looks for it by default (CONFIG/policy, with
# CONFIG = trace): it replaces the shipped one, so the gates must apply its thresholds.
FORK_SIGNING = Path("trace") / "policy" / "signing.toml"
GATES = (
    "scope",
    "mutation",
    "coverage",
    "variants",
    "regression",
    "fault-site",
    "detector",
    "fuzz",
)


def mutant_count(candidate: Candidate) -> int:
    from engine.gates.mutants import mutants_of

    return len(mutants_of(candidate))


def signing_policy_path(signing_policy: Path | None = None, fork: Path | None = None) -> Path:
    """The signing policy whose thresholds the gates apply: the one named; else the fork's own
    (FORK/trace/policy/signing.toml, as `trace fork` merges it); else the shipped one."""
    from engine.policy.registry import SIGNING, policy_dir

    if signing_policy is not None:
        return signing_policy
    if fork is not None and (fork / FORK_SIGNING).is_file():
        return fork / FORK_SIGNING
    return policy_dir() / SIGNING


def gate_policies(signing_policy: Path) -> dict[str, str]:
    """gate name -> the JSON its step's `policy` parameter carries (canonical: sorted keys)."""
    from engine.policy.signing_decision import load_signing_rules

    policy, _, _ = load_signing_rules(signing_policy)
    return {
        gate: json.dumps(policy.applied(gate), sort_keys=True, separators=(",", ":"))
        for gate in GATES
    }


def reruns(applied: str) -> int:
    """[gates.regression] reruns from the regression gate's applied policy (absent: none)."""
    value = json.loads(applied).get("thresholds", {}).get("reruns", 0)
    return int(value)


def gate_context(
    candidate: Candidate, signing_policy: Path | None = None, *, fork: Path | None = None
) -> dict[str, Any]:
    """`signing_policy`: the policy whose thresholds the gates apply (see `signing_policy_path`
    for the default); `trace decide` must decide with the same policy, or it denies."""
    n = mutant_count(candidate)
    applied = gate_policies(signing_policy_path(signing_policy, fork))
    return {
        # `steps` is at least 1: a patch without mutants still gets one placeholder mutant run.
        "mutation": {"mutants": n, "steps": max(1, n), "policy": applied["mutation"]},
        "coverage": {"policy": applied["coverage"]},
        "scope": {"policy": applied["scope"]},
        # the variants run in one derivation per side: the budget is the plan's, not a step count
        "variants": {"policy": applied["variants"]},
        # how many times a failing suite runs again: one derivation per rerun and side
        "regression": {"policy": applied["regression"], "reruns": reruns(applied["regression"])},
        "fault_site": {"policy": applied["fault-site"]},
        "detector": {"policy": applied["detector"]},
        # executions and seed of the fuzzing gate: one exploration step, whatever the budget
        "fuzz": {"policy": applied["fuzz"]},
    }
