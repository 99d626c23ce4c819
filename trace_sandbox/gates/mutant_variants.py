"""A mutant against the PoC's variants, not only the PoC (issue 10).

A mutant the reproducer does not kill is run, inside its own `mutant-run` derivation (so a
no-op re-verify builds nothing), against the variants the variants gate ran on the post-fix
build: each variant's reproducer under the same harness, one after another, until one sees
the mutant. A variant sees (kills) a mutant when the mutant's run is not acceptable post-fix
behaviour where the post-fix build's run of the SAME variant was (oracle.py
`newly_unacceptable`: the declared [accept] oracles' input-independent fields, and a fatal
signal, sanitizer report or timeout never acceptable). That is the rule that judges post-fix,
applied to a changed input; the reproducer script's own exit never counts.

`run_variants` writes `$out/variants/<n>/outcome.json` per variant run and `$out/variants.json`;
the mutation gate re-judges those records itself (`variant_kill`) against the variant-post
records it is given, so the step's early stop decides nothing.

`run_mutant` (sandbox, `mutant-run`) is the whole `mutant-run` step after the mutant's build, in
one process: the check (equiv.py: stillborn, equivalent, not code, or run), then for a mutant
worth a run the reproducer under the verify harness (its `run`, loaded into this process as the
variants' runs load it) and the variants.
"""

from __future__ import annotations

import json
import os
from types import ModuleType
from typing import Any

from .modules import load_json_object
from .variant_gate import runs_by_index
from .variant_runs import harness, launcher_server, run_harness

Record = dict[str, Any]


def usable(record: Record) -> bool:
    """A post-fix variant run that can be a baseline: the build worked and the target ran."""
    return record.get("build") != "failed" and bool(record.get("target_ran"))


def variant_kill(judge: ModuleType, mutant: Record, post: Record, oracles: Record) -> str | None:
    """Why the mutant's run of a variant is unacceptable where post-fix's is not (None: it
    is not)."""
    if not usable(post) or not mutant.get("target_ran"):
        return None
    problems = judge.newly_unacceptable(mutant, post, oracles.get("accept") or {})
    return "; ".join(str(p) for p in problems) or None


def run_variants(cfg: dict[str, Any], out: str) -> dict[str, Any]:
    """cfg: plan (the variant-plan dir), variant_runs (the variant-post step's output),
    oracles (JSON), and the harness's environment (the mutant-run step's); `out` holds the
    mutant's reproducer record (outcome.json)."""
    from . import oracle

    oracles = json.loads(cfg.get("oracles") or "{}")
    record = load_json_object(os.path.join(out, "outcome.json"))
    summary: dict[str, Any] = {"ran": [], "killed_by": None}
    if not record.get("target_ran"):
        summary["skipped"] = "the mutant's programs never ran"
        return summary
    ok, _ = oracle.post_fix_acceptable(record, oracles)
    if not ok:
        summary["skipped"] = "the reproducer already kills it"
        return summary
    baselines = sorted(runs_by_index(list(cfg.get("variant_runs") or [])).items())
    todo = [
        (index, meta, post)
        for index, (meta, post) in baselines
        if usable(post) and os.path.isdir(os.path.join(cfg["plan"], "v", str(index)))
    ]
    if not todo:
        return summary
    with launcher_server():  # one launcher process for these runs, as the variants gate's batch
        for index, meta, post in todo:
            dest = os.path.join(out, "variants", str(index))
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            run_harness(os.path.join(cfg["plan"], "v", str(index)), dest, hide=out)
            summary["ran"].append(index)
            why = variant_kill(
                oracle, load_json_object(os.path.join(dest, "outcome.json")), post, oracles
            )
            if why:
                summary["killed_by"] = {"index": index, "id": meta["id"], "why": why}
                break
    return summary


def judged_kill(
    judge: ModuleType, run_dir: str, baselines: dict[int, tuple[Record, Record]], oracles: Record
) -> dict[str, Any] | None:
    """The mutation gate's own verdict on a mutant's variant runs: the first variant (in plan
    order) whose run the post-fix build's run of it says is a kill, else None."""
    root = os.path.join(run_dir, "variants")
    if not os.path.isdir(root):
        return None
    for index in sorted(int(n) for n in os.listdir(root) if n.isdigit()):
        if index not in baselines:
            raise ValueError(f"{run_dir}: variant {index} has no post-fix run")
        meta, post = baselines[index]
        mutant = load_json_object(os.path.join(root, str(index), "outcome.json"))
        why = variant_kill(judge, mutant, post, oracles)
        if why:
            return {
                "index": index,
                "id": meta["id"],
                "description": meta["description"],
                "why": why,
            }
    return None


def _write_json(path: str, value: object) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(value, fh, indent=2, sort_keys=True)
        fh.write("\n")


def run_mutant(cfg: dict[str, Any], env: dict[str, str], out: str) -> dict[str, Any]:
    """The mutant-run step (cfg: target, the mutant's wrapped build; post; mutant, its
    directory; plan, variant_runs, oracles; env: the derivation's environment, the harness's
    inputs): `out` gets check.json, mutant.json and outcome.json (the reproducer's record, or
    a record of a run that did not happen: `build` failed or ok with `target_ran` false), and
    for a run mutant the variants' records. Returns the check."""
    from .equiv import check_mutant

    check = check_mutant(cfg)
    built = not os.path.exists(os.path.join(cfg["target"], ".trace-build-failed"))
    if built and check["status"] == "run":
        harness().run(env)  # creates `out`, writes outcome.json
        _write_json(os.path.join(out, "variants.json"), run_variants(cfg, out))
    else:
        os.makedirs(out)
        record = {"build": "ok" if built else "failed", "run": 1, "schema": "trace.run/v1"}
        _write_json(
            os.path.join(out, "outcome.json"), {**record, "side": "post", "target_ran": False}
        )
    _write_json(os.path.join(out, "check.json"), check)
    with open(os.path.join(cfg["mutant"], "mutant.json"), "rb") as src:
        meta = src.read()
    with open(os.path.join(out, "mutant.json"), "wb") as dest:
        dest.write(meta)
    return check
