"""The mutation gate: make mutant N's patch series, and judge the mutants' reproducer runs.

`write_mutants` runs once, in one derivation: for each mutant it writes the mutated patch series
(`p0.patch`, `p1.patch`, ...) and `mutant.json` (id, operator, location, reviewer diff) into a
directory (`N/`) that mutant N's build applies. The mutant-run step then checks the built mutant
(`equiv.check_mutant`: stillborn, equivalent by TCE or AST, not code) and runs the reproducer
only against the others. `evaluate` reads every mutant's records: killed when a TARGET
invocation failed on the mutant, judged by the one rule that judges the post-fix runs
(`oracle_failed`: oracle.py's `post_fix_acceptable` under the declared oracles; the
reproducer script's exit is never a kill), or when a variant of the PoC sees it (the mutant-run
step ran the reproducer's survivors against the variants: mutant_variants.py, judged here
against the post-fix build's run of the same variant), survived otherwise; a survivor that only
over-allocates is unobservable. Score = killed / (killed + survived); stillborn, equivalent,
not-code and unobservable mutants are counted nowhere, and each is listed with why. The
unmutated post-fix runs must pass that same rule, or kills mean nothing.
"""

from __future__ import annotations

import json
import os
from types import ModuleType
from typing import Any

from .applied import applied_policy, threshold
from .codes import gate_record
from .landing import landed, load_landing
from .modules import load_json_object, load_module
from .mutant_variants import judged_kill, mutant_dirs
from .mutate import Mutant, generate
from .variant_gate import runs_by_index


def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="surrogateescape") as fh:
        return fh.read()


def mutant_meta(m: Mutant) -> dict[str, object]:
    return {**m.summary(), "patch_index": m.patch_index}


def write_mutants(cfg: dict[str, Any], out: str) -> None:
    """Every mutant's patch series, mutant N in `out/N` (write_mutant); a patch without
    mutants gets the placeholder `out/1` (its one mutant-run step)."""
    count = len(generate([_read(p) for p in cfg["patches"]]))
    for index in range(1, max(1, count) + 1):
        write_mutant({**cfg, "index": index}, os.path.join(out, str(index)))


def write_mutant(cfg: dict[str, Any], out: str) -> None:
    """The patch series of mutant number cfg['index'] (1-based) into directory `out`."""
    texts = [_read(p) for p in cfg["patches"]]
    mutants = generate(texts)
    index = int(cfg["index"])
    os.makedirs(out, exist_ok=True)
    if not 1 <= index <= len(mutants):
        meta: dict[str, object] = {"id": None, "index": index, "of": len(mutants)}
        series: tuple[str, ...] = tuple(texts)
    else:
        m = mutants[index - 1]
        meta = {**mutant_meta(m), "index": index, "of": len(mutants)}
        series = m.patches
    for k, text in enumerate(series):
        with open(os.path.join(out, f"p{k}.patch"), "w", encoding="utf-8") as fh:
            fh.write(text)
    with open(os.path.join(out, "mutant.json"), "w", encoding="utf-8") as fh:
        json.dump(meta, fh, indent=2, sort_keys=True)
        fh.write("\n")


def load_judge(path: str) -> ModuleType:
    """The oracle rules (trace_sandbox/gates/oracle.py), loaded from the file the pipeline gives
    this gate: mutants are judged by the very function that judges post-fix."""
    return load_module("trace_verify_gate", path, "the post-fix judge")


def oracle_failed(
    judge: ModuleType, record: dict[str, Any], oracles: dict[str, Any]
) -> tuple[bool, str]:
    """THE rule for "this build still fails", for the unmutated post-fix runs and every mutant:
    the run is not acceptable post-fix behaviour under the candidate's declared oracles
    (`post_fix_acceptable`: a clean rejection declared in [accept] is acceptable; a sanitizer
    report, a fatal signal or a timeout never is). The reproducer script's own exit never
    counts: a reproducer that exits 1 while every target behaved kills nothing."""
    ok, why = judge.post_fix_acceptable(record, oracles)
    return (not ok), str(why)


def classify(
    meta: dict[str, Any],
    check: dict[str, Any],
    record: dict[str, Any],
    judge: ModuleType,
    oracles: dict[str, Any],
) -> tuple[str, str]:
    """(status, why) of one mutant: stillborn, equivalent, not-code (none counted), killed,
    survived, or unobservable (survived, but only over-allocates: not counted)."""
    if record.get("build") == "failed":
        return "stillborn", str(check.get("why") or "the mutant does not build")
    status = str(check.get("status") or "run")
    if status in ("stillborn", "equivalent", "not-code"):
        return status, str(check.get("why") or "")
    if not record.get("target_ran"):
        return "stillborn", "the reproducer never ran the mutant's programs (does it import?)"
    failed, why = oracle_failed(judge, record, oracles)
    if failed:
        return "killed", why
    if meta.get("effect") == "over-allocates":
        return "unobservable", "survived, but it only makes an allocation larger: no oracle sees it"
    return "survived", str(judge.describe(record))


STATUSES = ("killed", "survived", "unobservable", "equivalent", "stillborn", "not-code")

_WHY = {
    "mutation.no-mutants": "no mutant generated: the patch adds no mutable code line",
    "mutation.post-fix-fails": "the unmutated post-fix build already fails its oracles",
    "mutation.none-built": "no mutant built: every mutant was stillborn",
    "mutation.none-judged": "no mutant could be judged: every built mutant was equivalent, "
    "not code or unobservable",
}


def _summary(counts: dict[str, int], rules: list[str], results: list[dict[str, Any]]) -> str:
    parts = [f"{counts[s]} {s}" for s in STATUSES if counts.get(s)]
    text = ", ".join(parts) or "no mutants"
    text += "".join(f"; {_WHY[r]}" for r in rules if r in _WHY)
    for r in results:
        if r["status"] == "survived":
            text += f"\nsurvivor {r['id']} ({r['description']}):\n{r['diff'].rstrip()}"
    return text


def _judged_mutant(
    run_dir: str,
    judge: ModuleType,
    oracles: dict[str, Any],
    baselines: dict[int, tuple[dict[str, Any], dict[str, Any]]],
    landing: dict[str, Any],
) -> dict[str, Any] | None:
    """One mutant-run step's mutant, its status and why, where it landed (None: the placeholder
    step of a patch without mutants)."""
    meta = load_json_object(os.path.join(run_dir, "mutant.json"))
    if meta.get("id") is None:
        return None
    record = load_json_object(os.path.join(run_dir, "outcome.json"))
    check_path = os.path.join(run_dir, "check.json")
    check = load_json_object(check_path) if os.path.exists(check_path) else {}
    status, why = classify(meta, check, record, judge, oracles)
    by_variant = None
    if status in ("survived", "unobservable"):
        by_variant = judged_kill(judge, run_dir, baselines, oracles)
        if by_variant is not None:
            status = "killed"
            why = f"variant {by_variant['id']} ({by_variant['description']}): "
            why += by_variant["why"]
    line = landed(landing, str(meta["file"]), int(meta["line"]))
    diff = str(meta["diff"])
    if line != meta["line"]:
        diff = diff.replace(f"line {meta['line']})", f"line {line})")
        diff = diff.replace(f"@@ -{meta['line']} +{meta['line']} @@", f"@@ -{line} +{line} @@")
    return {**meta, "line": line, "stated_line": meta["line"], "diff": diff} | {
        "status": status,
        "why": why,
        "killed_by_variant": by_variant,
    }


def _rules(
    expected: list[Mutant],
    post: list[dict[str, Any]],
    post_fails: list[dict[str, Any]],
    results: list[dict[str, Any]],
    judged: int,
    score: float | None,
    min_score: float | None,
) -> list[str]:
    """The mutation gate's reason codes (at most one), first match wins."""
    if not expected:
        return ["mutation.no-mutants"]
    if post_fails or not post:
        return ["mutation.post-fix-fails"]
    if not any(r["status"] != "stillborn" for r in results):
        return ["mutation.none-built"]
    if not judged:
        return ["mutation.none-judged"]
    if score is not None and min_score is not None and score < min_score:
        return ["mutation.score-below-threshold"]
    return []


def evaluate(cfg: dict[str, Any]) -> dict[str, Any]:
    """cfg: patches, policy (the signing policy's name, version and min_score; no min_score: no
    threshold), mutant_runs (the mutant-runs step's output, whose `<N>/` hold mutant N's
    mutant.json, check.json and outcome.json, and variants/<n>/outcome.json; or such dirs),
    variant_runs (the variant-post dirs), post_runs,
    judge (templates/verify/gate.py), landing (the patched-source step's landing.json)."""
    policy = applied_policy(cfg)
    min_score = threshold(policy, "min_score")
    judge = load_judge(cfg["judge"])
    oracles = json.loads(cfg.get("oracles") or "{}")
    landing = load_landing(cfg.get("landing"))
    expected = generate([_read(p) for p in cfg["patches"]])
    baselines = runs_by_index(list(cfg.get("variant_runs") or []))
    judged_runs = (
        _judged_mutant(d, judge, oracles, baselines, landing)
        for d in mutant_dirs(list(cfg["mutant_runs"]))
    )
    results = [r for r in judged_runs if r is not None]
    results.sort(key=lambda r: str(r["id"]))
    ids = [r["id"] for r in results]
    want = [m.id for m in expected]
    if ids != want:
        raise ValueError(f"mutant runs {ids} do not match the patch's mutants {want}")
    post = [load_json_object(os.path.join(d, "outcome.json")) for d in cfg["post_runs"]]
    post_fails = [
        r for r in post if r.get("build") == "failed" or oracle_failed(judge, r, oracles)[0]
    ]

    counts = {s: sum(1 for r in results if r["status"] == s) for s in STATUSES}
    judged = counts["killed"] + counts["survived"]
    score = round(counts["killed"] / judged, 6) if judged else None
    rules = _rules(expected, post, post_fails, results, judged, score, min_score)
    measurable = not rules or rules == ["mutation.score-below-threshold"]
    keys = ("id", "operator", "file", "line", "stated_line", "description", "effect")
    return gate_record(
        "mutation",
        rules,
        measurable=measurable,
        score=score if measurable else None,
        details={
            "summary": _summary(counts, rules, results),
            "mutants": len(expected),
            **counts,
            # kept under its old name for readers of earlier records: the stillborn mutants
            "did_not_build": counts["stillborn"],
            "threshold": min_score,
            "policy": policy,
            "judge": "target invocations under the declared oracles (post_fix_acceptable)",
            "post_fix_runs": len(post),
            "post_fix_failed": len(post_fails),
            "results": [
                {k: r.get(k) for k in keys} | {"status": r["status"], "why": r["why"]}
                for r in results
            ],
            "killed_by_variants": sum(1 for r in results if r["killed_by_variant"]),
            "variants_judged_against": len(baselines),
            "survivors": [
                {"id": r["id"], "description": r["description"], "diff": r["diff"]}
                for r in results
                if r["status"] == "survived"
            ],
            "unobservable": [
                {"id": r["id"], "description": r["description"], "diff": r["diff"]}
                for r in results
                if r["status"] == "unobservable"
            ],
        },
    )
