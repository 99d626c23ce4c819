"""Every mutant's run, in ONE derivation; a mutant against the PoC's variants, not only the PoC
(issues 10 and 25).

`run_mutants` (sandbox, `mutant-runs`) is the whole `mutant-runs` step after the mutants'
builds (one derivation per mutant, as before: a build is what TCE compares): for each mutant,
`run_mutant` in `$out/<N>/`, a few mutants at a time, each in a fresh temporary directory of
its own, under one launcher process (the variants gate's batch does the same). A derivation per
mutant cost a sandbox each (Nix's set-up, the interpreter's start and imports) for a second of
work; what each mutant's directory holds, and so the mutation gate's verdict, is what its own
`mutant-run` step held. `$out/outcome.json` (trace.mutant-runs/v1) lists every mutant's
index, check and reproducer record, so a replay that rebuilds the step compares all of them.

A mutant the reproducer does not kill is run against the variants the variants gate ran on the
post-fix build: each variant's reproducer under the same harness, one after another, until one sees
the mutant. A variant sees (kills) a mutant when the mutant's run is not acceptable post-fix
behaviour where the post-fix build's run of the SAME variant was (oracle.py
`newly_unacceptable`: the declared [accept] oracles' input-independent fields, and a fatal
signal, sanitizer report or timeout never acceptable). That is the rule that judges post-fix,
applied to a changed input; the reproducer script's own exit never counts.

`run_variants` writes `$out/variants/<n>/outcome.json` per variant run and `$out/variants.json`;
the mutation gate re-judges those records itself (`variant_kill`) against the variant-post
records it is given, so the step's early stop decides nothing.

`run_mutant` is one mutant's part: the check (equiv.py: stillborn, equivalent, not code, or
run), then for a mutant worth a run the reproducer under the verify harness (its `run`, loaded
into this process as the variants' runs load it) and the variants; for a mutant neither kills,
the fuzz corpus replayed against it and the post-fix build (`survivor.json`: the evidence
survivors.py judges, issue 26).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from types import ModuleType

from ._dataclasses import dataclass
from .modules import load_json_object
from .mutants_not_run import not_run_why, write_not_run
from .scratch import runs_root
from .variant_gate import runs_by_index
from .variant_runs import PARALLEL, harness, launcher_server, remove, run_harness

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

Record = dict[str, "Any"]  # a string: no `typing` at run time
SCHEMA = "trace.mutant-runs/v1"


@dataclass(frozen=True)
class Batch:
    """Where one mutant runs inside the mutant-runs step: `out`, the step's output (every
    mutant's records: no reproducer sees it), and `runs`, the directory holding every run's
    temporary directory (a reproducer sees its own alone). The batch's launcher serves its runs;
    `post_fix` (corpus_replay.PostFix) is the post-fix side of the survivors' corpus replays,
    replayed once for all of them."""

    out: str
    runs: str
    post_fix: Any = None


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


def run_variants(
    cfg: dict[str, Any], out: str, env: dict[str, str] | None = None, batch: Batch | None = None
) -> dict[str, Any]:
    """cfg: plan (the variant-plan dir), variant_runs (the variant-post step's output),
    oracles (JSON); `env`: the harness's environment (default: the derivation's); `out` holds
    the mutant's reproducer record (outcome.json)."""
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
    # the variants' PoC (its secrets' fragments are redacted from what the runs keep,
    # harness/redaction.py), as the variant-runs steps are told it
    env = {**(os.environ if env is None else env), "taint": os.path.join(cfg["plan"], "poc.json")}
    # one launcher process for these runs, as the variants gate's batch (a batch of mutants: its)
    with launcher_server() if batch is None else contextlib.nullcontext():
        for index, meta, post in todo:
            dest = os.path.join(out, "variants", str(index))
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            variant = os.path.join(cfg["plan"], "v", str(index))
            if batch is None:
                run_harness(variant, dest, hide=out, base=env)
            else:
                run_harness(variant, dest, hide=batch.out, runs=batch.runs, base=env)
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


def keep_survivor_evidence(cfg: dict[str, Any], out: str, batch: Batch | None = None) -> None:
    """A mutant neither the reproducer nor a variant killed: the fuzz corpus (cfg corpus: the
    fuzz-plan step's corpus/) replayed against it and the post-fix build (the batch's shared
    post-fix side, when it has one), in `out`'s survivor.json (the mutation gate's
    survivors.py judges it with the runs above)."""
    from .corpus_replay import replay
    from .survivors import EVIDENCE

    shared = None if batch is None else batch.post_fix
    corpus = replay(cfg.get("corpus"), cfg["target"], cfg["post"], shared)
    _write_json(os.path.join(out, EVIDENCE), {"corpus": corpus})


def _write_json(path: str, value: object) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(value, fh, indent=2, sort_keys=True)
        fh.write("\n")


def run_mutant(
    cfg: dict[str, Any], env: dict[str, str], out: str, batch: Batch | None = None
) -> dict[str, Any]:
    """One mutant (cfg: target, the mutant's wrapped build; post; mutant, its directory; plan,
    variant_runs, oracles; env: the harness's inputs, `out` among them; `batch`: the
    mutant-runs step it runs in): `out` gets check.json, mutant.json and outcome.json (the
    reproducer's record, or a record of a run that did not happen: `build` failed or ok with
    `target_ran` false), and for a run mutant the variants' records. Returns the check."""
    from .equiv import check_mutant

    check = check_mutant(cfg)
    built = not os.path.exists(os.path.join(cfg["target"], ".trace-build-failed"))
    if built and check["status"] == "run":
        harness().run(env)  # creates `out`, writes outcome.json
        summary = run_variants(cfg, out, env, batch)
        _write_json(os.path.join(out, "variants.json"), summary)
        if summary.get("killed_by") is None and "skipped" not in summary:
            keep_survivor_evidence(cfg, out, batch)
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


def _not_run(cfg: dict[str, Any]) -> str | None:
    """Why no mutant runs (mutants_not_run.not_run_why: a post-fix run fails its oracles under
    the mutation gate's own judgement); None, they run (and without `post_runs`, as before)."""
    if not cfg.get("post_runs"):
        return None
    from . import oracle

    return not_run_why(oracle, list(cfg["post_runs"]), json.loads(cfg.get("oracles") or "{}"))


def run_mutants(
    cfg: dict[str, Any], env: dict[str, str], out: str, *, parallel: int = PARALLEL
) -> dict[str, Any]:
    """The mutant-runs step (cfg: mutants, one {index, target, mutant} each; post, plan,
    variant_runs, oracles, post_runs; env: the derivation's environment): mutant N's records in
    `out/N/` (run_mutant), `parallel` mutants at a time, each with its own temporary directory,
    `target` and `out`; `out/outcome.json` lists them all. Returns that summary. When a post-fix
    run in `post_runs` fails its oracles, no mutant runs: each one's records say why
    (mutants_not_run.write_not_run), and so does the summary's `not_run`."""
    from concurrent.futures import ThreadPoolExecutor

    os.makedirs(out)
    why = _not_run(cfg)
    if why is not None:  # the mutation gate's answer is decided: nothing runs (mutants_not_run)
        runs = write_not_run(list(cfg["mutants"]), out, why)
        summary = {"schema": SCHEMA, "mutants": len(runs), "runs": runs, "not_run": why}
        _write_json(os.path.join(out, "outcome.json"), summary)
        return summary
    targets = [str(m["target"]) for m in cfg["mutants"]]
    parent = runs_root(targets, parallel, env.get("TMPDIR", "/tmp"))  # scratch.py
    post_fix = None
    if cfg.get("corpus"):  # the survivors' corpus replays share their post-fix side
        from .corpus_replay import PostFix

        post_fix = PostFix(cfg.get("corpus"), cfg["post"])
    runs_dir = tempfile.mkdtemp(prefix="runs-", dir=parent)
    batch = Batch(out=out, runs=runs_dir, post_fix=post_fix)

    def one(m: dict[str, Any]) -> dict[str, Any]:
        dest = os.path.join(out, str(m["index"]))
        tmp = tempfile.mkdtemp(prefix="m-", dir=batch.runs)
        own = {**env, "target": m["target"], "out": dest, "TMPDIR": tmp}
        own.update(hide=out, only=batch.runs)
        try:
            return run_mutant(
                {**cfg, "target": m["target"], "mutant": m["mutant"]}, own, dest, batch
            )
        finally:
            remove(tmp)

    mutants = list(cfg["mutants"])
    try:
        with launcher_server(), ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
            checks = list(pool.map(one, mutants))  # a mutant that failed to run raises here
    finally:
        if post_fix is not None:
            post_fix.close()
    remove(batch.runs)
    runs = []
    for m, check in zip(mutants, checks, strict=True):
        dest = os.path.join(out, str(m["index"]))
        meta = load_json_object(os.path.join(dest, "mutant.json"))
        record = load_json_object(os.path.join(dest, "outcome.json"))
        runs.append({"index": m["index"], "id": meta.get("id"), "check": check, "outcome": record})
    summary = {"schema": SCHEMA, "mutants": len(runs), "runs": runs}
    _write_json(os.path.join(out, "outcome.json"), summary)
    return summary


def mutant_dirs(dirs: list[str]) -> list[str]:
    """The per-mutant directories of mutant-runs step outputs (`<d>/<N>` for each mutant its
    outcome.json lists, in its order); a directory without that summary is one mutant itself."""
    out: list[str] = []
    for d in dirs:
        path = os.path.join(d, "outcome.json")
        summary = load_json_object(path) if os.path.isfile(path) else {}
        if summary.get("schema") == SCHEMA:
            out += [os.path.join(d, str(r["index"])) for r in summary["runs"]]
        else:
            out.append(d)
    return out
