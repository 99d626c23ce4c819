"""The gates' part of a pipeline's var context: what must be known before Nix evaluates.

The mutation steps are one repeated step per mutant, so the number of mutants must be known when
the graph is loaded. It is computed here with the same pure generator the sandbox runs
(engine.gates.core.mutate), so both sides agree; the mutation gate checks that they do.
Merge into the load context as `{"gates": gate_context(candidate)}`.
"""

from __future__ import annotations

from typing import Any

from engine.candidate import Candidate
from engine.errors import InputError
from engine.gates.core.diff import DiffError
from engine.gates.core.mutate import generate


def mutant_count(candidate: Candidate) -> int:
    texts: list[str] = []
    for rel in candidate.spec.patches:
        path = candidate.file(rel)
        texts.append(path.read_text(encoding="utf-8", errors="surrogateescape"))
    try:
        return len(generate(texts))
    except DiffError as exc:
        raise InputError(
            f"patch is not a unified diff: {exc}",
            file=candidate.path,
            key="patches",
            hint="write the patch with `git diff` or `diff -u`",
        ) from None


def gate_context(candidate: Candidate) -> dict[str, Any]:
    n = mutant_count(candidate)
    # `repeat` must be at least 1: a patch without mutants still gets one placeholder step.
    return {"mutation": {"mutants": n, "steps": max(1, n)}}
