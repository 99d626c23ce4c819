"""The mutants of a candidate's patch, as the mutation gate will build them (`trace mutants`).

The same generator the sandbox runs (trace_sandbox.gates.mutate), so mutant N here is `<N>/` in
the output of the `mutant-runs` step. Which of them are stillborn or equivalent (TCE) is known
only once they are built: `trace verify` reports it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.candidate import Candidate
    from trace_sandbox.host import Mutant


def candidate_mutants(candidate_file: Path) -> tuple[Candidate, list[Mutant]]:
    """The candidate and every mutant of the lines its patches add; bad input when a patch is not
    a unified diff."""
    from engine.candidate import load_candidate

    cand = load_candidate(candidate_file)
    return cand, mutants_of(cand)


def mutants_of(cand: Candidate) -> list[Mutant]:
    """Every mutant of the lines the candidate's patches add (the mutation gate's own count)."""
    from engine.errors import InputError
    from trace_sandbox.host import DiffError, generate_mutants

    try:
        return generate_mutants(cand.patch_texts())
    except DiffError as exc:
        raise InputError(
            f"patch is not a unified diff: {exc}",
            file=cand.path,
            key="patches",
            hint="write the patch with `git diff` or `diff -u`",
        ) from None
