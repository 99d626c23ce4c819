"""The mutants are not run when the mutation gate's answer is already decided (issue 30).

The mutation gate's rule `mutation.post-fix-fails` (mutation.py `_rules`: only
`mutation.no-mutants`, which the patch alone decides, comes before it) gives
`mutation-not-measurable` as soon as one unmutated post-fix reproducer run fails, whatever the
mutants do: kills mean nothing against a build that already fails. Which post-fix runs fail is
`post_fix_failures`, THE judgement the gate makes (mutation.py `evaluate` calls it): a run whose
build failed, or whose run is not acceptable post-fix behaviour under the candidate's declared
oracles (`oracle_failed`: oracle.py's `post_fix_acceptable`).

The mutant-runs step is given the same post-fix-run records and the same oracles
(graphs/gates.toml `post_runs`) and asks the same function before any mutant runs
(`not_run_why`). When it lists a failure, no mutant is checked or run: each mutant's directory
holds its mutant.json, a check.json whose status is `not-run` and an outcome.json that is a
`trace.not-run/v1` record, each saying why, and the step's summary says it too (`not_run`). The
gate lists every such mutant as `not-run` (never killed nor survived) and refuses such records
when its own judgement of the post-fix runs finds no failure (`refuse_not_run`). When every
post-fix run passes, nothing here changes what runs or what is written.
"""

from __future__ import annotations

import json
import os
from types import ModuleType

from .modules import load_json_object

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

Record = dict[str, "Any"]  # a string: no `typing` at run time
NOT_RUN = "not-run"  # a mutant's check status, and its status in the gate's results
NOT_RUN_SCHEMA = "trace.not-run/v1"  # the record a reproducer run that did not happen leaves


def oracle_failed(judge: ModuleType, record: Record, oracles: Record) -> tuple[bool, str]:
    """THE rule for "this build still fails", for the unmutated post-fix runs and every mutant:
    the run is not acceptable post-fix behaviour under the candidate's declared oracles
    (`post_fix_acceptable`: a clean rejection declared in [accept] is acceptable; a sanitizer
    report, a fatal signal or a timeout never is). The reproducer script's own exit never
    counts: a reproducer that exits 1 while every target behaved kills nothing."""
    ok, why = judge.post_fix_acceptable(record, oracles)
    return (not ok), str(why)


def post_fix_failures(judge: ModuleType, post: list[Record], oracles: Record) -> list[Record]:
    """The unmutated post-fix runs that fail: the build failed, or `oracle_failed`. One of them
    is the mutation gate's `mutation.post-fix-fails`."""
    return [r for r in post if r.get("build") == "failed" or oracle_failed(judge, r, oracles)[0]]


def not_run_why(judge: ModuleType, post_dirs: list[str], oracles: Record) -> str | None:
    """Why the mutants need not run (None: they run): the post-fix-run step outputs `post_dirs`
    (their outcome.json, as the harness recorded them) judged by `post_fix_failures`. No
    post-fix runs given: they run, as before this check existed."""
    post = [load_json_object(os.path.join(d, "outcome.json")) for d in post_dirs]
    fails = post_fix_failures(judge, post, oracles)
    if not fails:
        return None
    first = fails[0]
    how = (
        "its build failed"
        if first.get("build") == "failed"
        else oracle_failed(judge, first, oracles)[1]
    )
    return (
        f"not run: {len(fails)} of {len(post)} post-fix reproducer run(s) fail their oracles "
        f"(run {first.get('run')}: {how}), so the mutation gate's answer is "
        "mutation.post-fix-fails whatever the mutants do"
    )


def _write_json(path: str, value: object) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(value, fh, indent=2, sort_keys=True)
        fh.write("\n")


def write_not_run(mutants: list[Record], out: str, why: str) -> list[Record]:
    """Each mutant ({index, mutant: its directory}) in `out/<index>/`, not run: its mutant.json,
    check.json (status `not-run`, why) and outcome.json (a trace.not-run/v1 record). Returns
    the runs of the step's summary, as run_mutants lists them."""
    runs = []
    for m in mutants:
        dest = os.path.join(out, str(m["index"]))
        os.makedirs(dest)
        check = {"status": NOT_RUN, "why": why}
        record = {"schema": NOT_RUN_SCHEMA, "run": 1, "side": "post", "target_ran": False}
        record["not_run"] = why
        _write_json(os.path.join(dest, "check.json"), check)
        _write_json(os.path.join(dest, "outcome.json"), record)
        with open(os.path.join(m["mutant"], "mutant.json"), "rb") as src:
            meta = src.read()
        with open(os.path.join(dest, "mutant.json"), "wb") as dst:
            dst.write(meta)
        run = {"index": m["index"], "id": json.loads(meta).get("id"), "check": check}
        runs.append(run | {"outcome": record})
    return runs


def refuse_not_run(results: list[Record], post_fails: list[Record]) -> None:
    """A mutant recorded as not run is the gate's to accept only when its own judgement of the
    post-fix runs finds a failure (the mutant-runs step asked the same function): otherwise the
    pipeline is broken, an error, never a verdict."""
    skipped = [str(r["id"]) for r in results if r["status"] == NOT_RUN]
    if skipped and not post_fails:
        raise ValueError(
            f"mutants {', '.join(skipped)} were not run, yet every post-fix run passes its "
            "oracles: the mutant-runs step was not given this gate's post-fix runs "
            "(graphs/gates.toml: mutant-runs `post_runs`, gate-mutation `post`)"
        )
