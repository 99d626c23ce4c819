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
over-allocates is unobservable. A survivor is then judged by every input tried (survivors.py:
the reproducer's calls, the variants, the fuzz corpus): `survived` (distinguished) when some
input makes it behave unlike the fix, `possibly-equivalent` when none does. Score = killed /
(killed + survived); possibly-equivalent survivors are left out of it and counted in
`score_all_survivors` (a score below the threshold only because of them is
`mutation.possibly-equivalent`, waivable, never the distinguished survivors' code); stillborn,
equivalent, not-code and unobservable mutants are counted nowhere, and each is listed with why.
The unmutated post-fix runs must pass that same rule, or kills mean nothing; when one does not,
the mutant-runs step ran no mutant (mutants_not_run.py: the same judgement, `post_fix_failures`)
and each is listed `not-run`, its counts None, not 0 killed.
"""

from __future__ import annotations

import json
import os
from types import ModuleType

from . import survivors
from .applied import applied_policy, threshold
from .codes import gate_record
from .codes import rules as rule_table
from .landing import landed, load_landing
from .modules import load_json_object, load_module
from .mutant_variants import judged_kill, mutant_dirs
from .mutants_not_run import NOT_RUN, oracle_failed, post_fix_failures, refuse_not_run
from .mutate import Mutant, generate
from .variant_gate import runs_by_index

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any


def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="surrogateescape") as fh:
        return fh.read()


def mutant_meta(m: Mutant) -> dict[str, object]:
    return {**m.summary(), "patch_index": m.patch_index}


def write_mutants(cfg: dict[str, Any], out: str) -> None:
    """Every mutant's patch series, mutant N in `out/N` (as write_mutant writes it); a patch
    without mutants gets the placeholder `out/1` (its one mutant-run step). The mutants are
    generated once for all of them (write_mutant alone generates them for its one)."""
    texts = [_read(p) for p in cfg["patches"]]
    mutants = generate(texts)
    for index in range(1, max(1, len(mutants)) + 1):
        _write_series(texts, mutants, index, os.path.join(out, str(index)))


def write_mutant(cfg: dict[str, Any], out: str) -> None:
    """The patch series of mutant number cfg['index'] (1-based) into directory `out`."""
    texts = [_read(p) for p in cfg["patches"]]
    _write_series(texts, generate(texts), int(cfg["index"]), out)


def _write_series(texts: list[str], mutants: list[Mutant], index: int, out: str) -> None:
    """Mutant `index` of `mutants` (of the series `texts`): its patches and mutant.json; an
    index out of range writes the unmutated series (the placeholder)."""
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


def classify(
    meta: dict[str, Any],
    check: dict[str, Any],
    record: dict[str, Any],
    judge: ModuleType,
    oracles: dict[str, Any],
) -> tuple[str, str]:
    """(status, why) of one mutant: stillborn, equivalent, not-code (none counted), killed,
    survived, unobservable (survived, but only over-allocates: not counted), or not-run (the
    gate's answer was decided without it: mutants_not_run)."""
    if record.get("build") == "failed":
        return "stillborn", str(check.get("why") or "the mutant does not build")
    status = str(check.get("status") or "run")
    if status in ("stillborn", "equivalent", "not-code", NOT_RUN):
        return status, str(check.get("why") or "")
    if not record.get("target_ran"):
        return "stillborn", "the reproducer never ran the mutant's programs (does it import?)"
    failed, why = oracle_failed(judge, record, oracles)
    if failed:
        return "killed", why
    if meta.get("effect") == "over-allocates":
        return "unobservable", "survived, but it only makes an allocation larger: no oracle sees it"
    return "survived", str(judge.describe(record))


STATUSES = (
    "killed",
    "survived",
    "possibly-equivalent",
    "unobservable",
    "equivalent",
    "stillborn",
    "not-code",
)

# rules under which the score stands: the others say why there is none
MEASURED = ("mutation.score-below-threshold", "mutation.possibly-equivalent")

# rules that say why there is no score: the summary gives their catalogue message
UNMEASURED = (
    "mutation.no-mutants",
    "mutation.post-fix-fails",
    "mutation.none-built",
    "mutation.none-judged",
)


def _summary(counts: dict[str, int], rules: list[str], results: list[dict[str, Any]]) -> str:
    not_run = [r for r in results if r["status"] == NOT_RUN]
    parts = [f"{counts[s]} {s}" for s in STATUSES if counts.get(s)]
    parts += [f"{len(not_run)} not run (none killed, none survived)"] if not_run else []
    text = ", ".join(parts) or "no mutants"
    text += "".join(f"; {rule_table()[r].message}" for r in rules if r in UNMEASURED)
    text += f"\nmutants {not_run[0]['why']}" if not_run else ""
    for r in results:
        if r["status"] == "survived":
            text += f"\nsurvivor {r['id']} ({r['description']}):\n{r['diff'].rstrip()}"
            if r.get("evidence"):
                text += f"\n  {r['why']}"
        elif r["status"] == "possibly-equivalent":
            text += f"\npossibly equivalent {r['id']} ({r['description']}): {r['why']}"
            text += f"\n{r['diff'].rstrip()}"
    return text


def _survivor(evidence: dict[str, Any] | None, why: str) -> tuple[str, str]:
    """A survivor's (status, why) from its evidence (survivors.judge; None: a plain survivor)."""
    if evidence is None:
        return "survived", why
    by = evidence["distinguished_by"]
    if by is None:
        tried = survivors.tried(evidence["inputs"])
        return "possibly-equivalent", f"no input tried tells it from the fix: {tried}"
    return "survived", f"distinguished, yet no oracle catches it: {survivors.shown(by)}"


def _count_as_survivors(results: list[dict[str, Any]]) -> None:
    """Nothing killed: the reproducer pins nothing of the fix, so a possibly-equivalent
    survivor is not left out of the score (left out, every mutant would be: no score at all);
    it counts as a survivor, its evidence kept."""
    for r in results:
        if r["status"] == "possibly-equivalent":
            r["status"] = "survived"
            r["why"] = f"nothing is killed, so it counts as a survivor; {r['why']}"


def _judged_mutant(
    run_dir: str,
    judge: ModuleType,
    oracles: dict[str, Any],
    baselines: dict[int, tuple[dict[str, Any], dict[str, Any]]],
    landing: dict[str, Any],
    post: dict[str, Any] | None,
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
    evidence = None
    if status == "survived":
        evidence = survivors.judge(run_dir, record, post, baselines)
        status, why = _survivor(evidence, why)
    line = landed(landing, str(meta["file"]), int(meta["line"]))
    diff = str(meta["diff"])
    if line != meta["line"]:
        diff = diff.replace(f"line {meta['line']})", f"line {line})")
        diff = diff.replace(f"@@ -{meta['line']} +{meta['line']} @@", f"@@ -{line} +{line} @@")
    return {**meta, "line": line, "stated_line": meta["line"], "diff": diff} | {
        "status": status,
        "why": why,
        "killed_by_variant": by_variant,
        "evidence": evidence,
    }


def _rules(
    expected: list[Mutant],
    post: list[dict[str, Any]],
    post_fails: list[dict[str, Any]],
    results: list[dict[str, Any]],
    scores: tuple[float | None, float | None],
    min_score: float | None,
) -> list[str]:
    """The mutation gate's reason codes, first match wins. scores: (killed / (killed +
    survived), the same with the possibly-equivalent survivors counted as survivors)."""
    if not expected:
        return ["mutation.no-mutants"]
    if post_fails or not post:
        return ["mutation.post-fix-fails"]
    if not any(r["status"] != "stillborn" for r in results):
        return ["mutation.none-built"]
    score, score_all = scores
    if score is None:
        return ["mutation.none-judged"]
    if min_score is not None and score < min_score:
        # a survivor an input tells from the fix: the oracles' gap is named with that input
        seen = any(
            r["status"] == "survived" and (r.get("evidence") or {}).get("distinguished_by")
            for r in results
        )
        return ["mutation.score-below-threshold"] + (["mutation.survivor-distinguished"] * seen)
    if min_score is not None and score_all is not None and score_all < min_score:
        return ["mutation.possibly-equivalent"]
    return []


def _why(
    rules: list[str],
    results: list[dict[str, Any]],
    scores: tuple[float | None, float | None],
    min_score: float | None,
) -> dict[str, str]:
    """code -> what the gate saw, for the survivors' codes (issue 26)."""
    out: dict[str, str] = {}
    if "mutation.possibly-equivalent" in rules:
        pe = [r for r in results if r["status"] == "possibly-equivalent"]
        ids = ", ".join(str(r["id"]) for r in pe)
        tried = survivors.tried(pe[0]["evidence"]["inputs"])
        out["mutation-possibly-equivalent"] = (
            f"score {scores[0]:g} without them, {scores[1]:g} counting the {len(pe)} possibly "
            f"equivalent survivor(s) ({ids}) < {min_score:g}; tried: {tried}"
        )
    if "mutation.survivor-distinguished" in rules:
        seen = [r for r in results if r["status"] == "survived" and r.get("evidence")]
        shown = [
            f"{r['id']}: {survivors.shown(r['evidence']['distinguished_by'])}"
            for r in seen
            if r["evidence"]["distinguished_by"]
        ]
        out["mutation-survivor-distinguished"] = "; ".join(shown)
    return out


def _counted(counts: dict[str, int], results: list[dict[str, Any]]) -> dict[str, Any]:
    """The record's counts of each status, and `did_not_build` (the stillborn mutants, under
    its old name for readers of earlier records). Mutants not run (mutants_not_run) were not
    counted: each count is None, never 0 killed, and `not_run` says how many and why."""
    not_run = [r for r in results if r["status"] == NOT_RUN]
    if not not_run:
        return {**counts, "did_not_build": counts["stillborn"]}
    shown: dict[str, Any] = dict.fromkeys([*STATUSES, "did_not_build"])
    return shown | {"not_run": {"mutants": len(not_run), "why": not_run[0]["why"]}}


def _score(killed: int, survived: int) -> float | None:
    return round(killed / (killed + survived), 6) if killed + survived else None


def _in_order(
    judged: Iterable[dict[str, Any] | None], expected: list[Mutant]
) -> list[dict[str, Any]]:
    """The judged mutants (placeholders left out) in id order: exactly the patch's mutants."""
    results = [r for r in judged if r is not None]
    results.sort(key=lambda r: str(r["id"]))
    ids = [r["id"] for r in results]
    want = [m.id for m in expected]
    if ids != want:
        raise ValueError(f"mutant runs {ids} do not match the patch's mutants {want}")
    return results


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
    post = [load_json_object(os.path.join(d, "outcome.json")) for d in cfg["post_runs"]]
    first = post[0] if post else None
    judged_runs = (
        _judged_mutant(d, judge, oracles, baselines, landing, first)
        for d in mutant_dirs(list(cfg["mutant_runs"]))
    )
    results = _in_order(judged_runs, expected)
    post_fails = post_fix_failures(judge, post, oracles)
    refuse_not_run(results, post_fails)

    if not any(r["status"] == "killed" for r in results):
        _count_as_survivors(results)
    counts = {s: sum(1 for r in results if r["status"] == s) for s in STATUSES}
    score = _score(counts["killed"], counts["survived"])
    score_all = _score(counts["killed"], counts["survived"] + counts["possibly-equivalent"])
    rules = _rules(expected, post, post_fails, results, (score, score_all), min_score)
    measurable = not rules or rules[0] in MEASURED
    keys = ("id", "operator", "file", "line", "stated_line", "description", "effect")
    return gate_record(
        "mutation",
        rules,
        measurable=measurable,
        score=score if measurable else None,
        details={
            "summary": _summary(counts, rules, results),
            # what exactly each of the survivors' codes saw (the decision's reason details)
            "why": _why(rules, results, (score, score_all), min_score),
            "mutants": len(expected),
            **_counted(counts, results),
            "threshold": min_score,
            "policy": policy,
            "judge": "target invocations under the declared oracles (post_fix_acceptable)",
            "post_fix_runs": len(post),
            "post_fix_failed": len(post_fails),
            "results": [
                {k: r.get(k) for k in keys}
                | {"status": r["status"], "why": r["why"], "evidence": r["evidence"]}
                for r in results
            ],
            "killed_by_variants": sum(1 for r in results if r["killed_by_variant"]),
            "variants_judged_against": len(baselines),
            "survivors": [
                {"id": r["id"], "description": r["description"], "diff": r["diff"]}
                | ({"distinguished_by": r["evidence"]["distinguished_by"]} if r["evidence"] else {})
                for r in results
                if r["status"] == "survived"
            ],
            # issue 26: survivors no input tried tells from the fix, with the inputs tried; left
            # out of `score` (killed / (killed + survived)), counted in `score_all_survivors`
            "possibly_equivalent": [
                {"id": r["id"], "description": r["description"], "diff": r["diff"]}
                | {"inputs": r["evidence"]["inputs"], "why": r["why"]}
                for r in results
                if r["status"] == "possibly-equivalent"
            ],
            "score_all_survivors": score_all,
            "unobservable": [
                {"id": r["id"], "description": r["description"], "diff": r["diff"]}
                for r in results
                if r["status"] == "unobservable"
            ],
        },
    )
