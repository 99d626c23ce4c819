"""`trace mutants CANDIDATE`: the mutants the mutation gate will build, as reviewer diffs.

The same generator the sandbox runs (engine.gates.core.mutate), so what this prints is what the
`mutant-run@N` steps build: mutant N here is step `mutant-run@N`. Which of them are stillborn or
equivalent (TCE) is known only once they are built: `trace verify` reports it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser(
        "mutants",
        help="list the mutants of a candidate's patch (what the mutation gate builds)",
        description="Print every mutant of the lines the candidate's patch adds, as a diff "
        "against the candidate's line. Exit 0; 2 on bad input.",
    )
    p.add_argument("candidate", type=Path, help="candidate TOML file")
    p.add_argument("--json", action="store_true", help="print JSON instead of diffs")
    p.set_defaults(handler=cmd_mutants)


def cmd_mutants(args: argparse.Namespace) -> int:
    from engine.candidate import load_candidate
    from engine.errors import InputError
    from engine.gates.core.diff import DiffError
    from engine.gates.core.mutate import generate

    cand = load_candidate(args.candidate)
    texts = cand.patch_texts()
    try:
        mutants = generate(texts)
    except DiffError as exc:
        raise InputError(
            f"patch is not a unified diff: {exc}",
            file=cand.path,
            key="patches",
            hint="write the patch with `git diff` or `diff -u`",
        ) from None
    if args.json:
        print(json.dumps([m.summary() for m in mutants], indent=2))
        return 0
    for m in mutants:
        print(m.review_diff())
        if m.effect == "over-allocates":
            print(f"({m.id} only enlarges an allocation: unobservable if it survives)\n")
    print(f"{len(mutants)} mutant(s) of {cand.spec.id}")
    print(
        "line numbers are the hunk headers'; `trace verify` builds each mutant, drops the "
        "stillborn and the equivalent (TCE) ones, and reports where the patch landed"
    )
    return 0
