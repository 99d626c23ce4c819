"""Shared by the gates' real-build tests: a fixture-fork candidate through the gates pipeline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.candidate import load_candidate
from engine.graph import load_graph
from engine.run import RunResult, run_graph
from engine.verify.command import verify_context

REPO = Path(__file__).resolve().parent.parent
FORK = REPO / "tests" / "fixtures" / "fork"
CANDIDATES = FORK / "trace" / "candidates"
PIPELINE = REPO / "tests" / "fixtures" / "gates" / "pipeline.toml"


def run_candidate(name: str, state: Path) -> RunResult:
    """The fixture fork's candidate `name` through the verify pipeline and every gate (the
    shipped signing policy's thresholds)."""
    cand = load_candidate(CANDIDATES / name / "candidate.toml")
    graph = load_graph(PIPELINE, root=REPO, context=verify_context(cand, FORK))
    return run_graph(graph, state)


def outcome(result: RunResult, step: str) -> dict[str, Any]:
    """The step's outcome record; the step must have been built or answered from the cache."""
    s = result.steps[step]
    assert s.status in ("built", "cached", "reused"), (step, s.status, s.log_tail)
    assert isinstance(s.outcome, dict)
    return s.outcome
