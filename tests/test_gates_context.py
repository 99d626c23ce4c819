"""The gates' load context: thresholds from the signing policy (shipped, named or the fork's
own), the mutant count, and the pipeline wiring them into the gate steps (no builds)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from engine.candidate import load_candidate
from engine.errors import PolicyError
from engine.gates.context import gate_context, signing_policy_path
from engine.graph import load_graph
from engine.policy.signing_decision import load_signing_rules
from engine.verify.fork_graph import verify_context

REPO = Path(__file__).resolve().parent.parent
FORK = REPO / "tests" / "fixtures" / "fork"
PTR = REPO / "tests" / "fixtures" / "gates" / "cparse-ptr" / "candidate.toml"
PIPELINE = REPO / "tests" / "fixtures" / "gates" / "pipeline.toml"
SHIPPED = REPO / "policy" / "signing.toml"


def applied(ctx: dict[str, Any], gate: str) -> dict[str, Any]:
    """The `policy` parameter the context hands to a gate step, decoded."""
    decoded: dict[str, Any] = json.loads(ctx[gate]["policy"])
    return decoded


def test_the_shipped_policy_by_default() -> None:
    ctx = gate_context(load_candidate(PTR))
    # six mutants: the constant operator also turns the patch's `return 0` into -1 (issue 25)
    assert ctx["mutation"]["mutants"] == 6 and ctx["mutation"]["steps"] == 6
    assert applied(ctx, "scope") == {
        "name": "trace-signing",
        "version": "1.9.0",
        "thresholds": {"max_files": 5, "max_hunks": 10, "max_lines": 100},
    }
    assert applied(ctx, "mutation")["thresholds"] == {"min_score": 0.8}
    assert applied(ctx, "coverage")["thresholds"] == {"min_score": 0.8}
    # [gates.regression] reruns: in the gate's applied policy, and as the test steps' count
    assert applied(ctx, "regression")["thresholds"] == {"reruns": 2}
    assert ctx["regression"]["reruns"] == 2
    # [gates.fuzz] executions and seed (issue 26): the fuzzing gate's budget, never wall time
    assert applied(ctx, "fuzz")["thresholds"] == {"executions": 500, "seed": 0}


@pytest.fixture
def own_policy(tmp_path: Path) -> Path:
    text = SHIPPED.read_text().replace('name = "trace-signing"', 'name = "own-signing"')
    text = text.replace("max_files = 5\n", "").replace(
        'min_score = 0.8\nbelow_threshold = "c', 'min_score = 0.5\nbelow_threshold = "c'
    )
    path = tmp_path / "own.toml"
    path.write_text(text)
    return path


def test_a_named_policy_and_the_fork_s_own(own_policy: Path, tmp_path: Path) -> None:
    cand = load_candidate(PTR)
    ctx = gate_context(cand, own_policy)
    assert applied(ctx, "scope") == {
        "name": "own-signing",
        "version": "1.9.0",
        "thresholds": {"max_hunks": 10, "max_lines": 100},  # no max_files: no bound
    }
    assert applied(ctx, "coverage")["thresholds"] == {"min_score": 0.5}
    # a fork with trace/policy/signing.toml: the file `trace fork` merges over the shipped one
    fork = tmp_path / "fork"
    (fork / "trace" / "policy").mkdir(parents=True)
    shutil.copy(own_policy, fork / "trace" / "policy" / "signing.toml")
    assert signing_policy_path(fork=fork) == fork / "trace" / "policy" / "signing.toml"
    assert applied(gate_context(cand, fork=fork), "scope") == applied(ctx, "scope")
    # the named one wins over the fork's; a fork without one gets the shipped one
    assert signing_policy_path(SHIPPED, fork=fork) == SHIPPED
    assert signing_policy_path(fork=FORK).resolve() == SHIPPED.resolve()


def test_a_bad_policy_stops_the_load(tmp_path: Path) -> None:
    bad = tmp_path / "signing.toml"
    bad.write_text(SHIPPED.read_text().replace("max_lines = 100", "max_lines = -1"))
    with pytest.raises(PolicyError) as exc:
        gate_context(load_candidate(PTR), bad)
    assert exc.value.key == "gates.scope.max_lines"


def test_the_pipeline_hands_each_gate_its_policy(own_policy: Path) -> None:
    cand = load_candidate(PTR)
    ctx = {**verify_context(cand, FORK), "gates": gate_context(cand, own_policy)}
    graph = load_graph(PIPELINE, root=REPO, context=ctx)
    policy, _, _ = load_signing_rules(own_policy)
    for gate in ("scope", "mutation", "coverage", "variants", "regression"):
        assert json.loads(graph.steps[f"gate-{gate}"].params["policy"]) == policy.applied(gate)
    # thresholds are part of the gate steps' keys, not of the builds' or the mutant runs'
    shipped = load_graph(PIPELINE, root=REPO, context=verify_context(cand, FORK))
    assert shipped.steps["gate-mutation"].params != graph.steps["gate-mutation"].params
    for sid in ("post-fix", "mutant-runs", "coverage-run"):
        assert shipped.steps[sid].params == graph.steps[sid].params
