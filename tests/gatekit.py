"""Shared by the gates' real-build tests: a fixture-fork candidate through the gates pipeline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.candidate import load_candidate
from engine.graph import load_graph
from engine.run import RunResult, run_graph
from engine.verify.fork_graph import verify_context

REPO = Path(__file__).resolve().parent.parent
FORK = REPO / "tests" / "fixtures" / "fork"
CANDIDATES = FORK / "trace" / "candidates"
PIPELINE = REPO / "tests" / "fixtures" / "gates" / "pipeline.toml"


def run_candidate(name: str | Path, state: Path) -> RunResult:
    """The fixture fork's candidate `name` (or the candidate file at a path, anywhere) through
    the verify pipeline and every gate (the shipped signing policy's thresholds)."""
    path = name if isinstance(name, Path) else CANDIDATES / name / "candidate.toml"
    cand = load_candidate(path)
    root = REPO if path.is_relative_to(REPO) else Path("/")  # inputs outside the repo
    graph = load_graph(PIPELINE, root=root, context=verify_context(cand, FORK))
    return run_graph(graph, state)


def outcome(result: RunResult, step: str) -> dict[str, Any]:
    """The step's outcome record; the step must have been built or answered from the cache."""
    s = result.steps[step]
    assert s.status in ("built", "cached", "reused"), (step, s.status, s.log_tail)
    assert isinstance(s.outcome, dict)
    return s.outcome
