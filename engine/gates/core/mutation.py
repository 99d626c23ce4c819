"""The mutation gate: make mutant N's patch series, and judge the mutants' reproducer runs.

`write_mutant` runs once per mutant, in its own derivation: it writes the mutated patch series
(`p0.patch`, `p1.patch`, ...) and `mutant.json` (id, operator, location, reviewer diff) into a
directory the mutant build applies. `evaluate` reads every mutant's run record: killed when the
reproducer fails on the mutant (exit code, signal or sanitizer report; a timeout is a kill),
survived when it passes, did-not-build when the mutant does not compile or apply. Score =
killed / (killed + survived). The unmutated post-fix runs must pass, or kills mean nothing.
"""

from __future__ import annotations

import json
import os
from typing import Any

from .applied import applied_policy, threshold
from .codes import CODES, code_of
from .mutate import Mutant, generate


def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="surrogateescape") as fh:
        return fh.read()


def mutant_meta(m: Mutant) -> dict[str, object]:
    return {**m.summary(), "patch_index": m.patch_index}


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


def run_failed(record: dict[str, Any]) -> bool:
    """The reproducer failed on this build (the same rule as trace.run/v1's `failed`)."""
    return (
        record.get("exit_code") not in (0, None)
        or record.get("signal") is not None
        or record.get("sanitizer") is not None
    )


def _load(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a JSON object")
    return data


def classify(meta: dict[str, Any], record: dict[str, Any]) -> str:
    if record.get("build") == "failed":
        return "did-not-build"
    return "killed" if run_failed(record) else "survived"


def evaluate(cfg: dict[str, Any]) -> dict[str, Any]:
    """cfg: patches, policy (the signing policy's name, version and min_score; no min_score: no
    threshold), mutant_runs (dirs with mutant.json + outcome.json), post_runs."""
    policy = applied_policy(cfg)
    min_score = threshold(policy, "min_score")
    expected = generate([_read(p) for p in cfg["patches"]])
    results: list[dict[str, Any]] = []
    for run_dir in cfg["mutant_runs"]:
        meta = _load(os.path.join(run_dir, "mutant.json"))
        if meta.get("id") is None:
            continue  # the placeholder step of a patch without mutants
        record = _load(os.path.join(run_dir, "outcome.json"))
        results.append({**meta, "status": classify(meta, record)})
    results.sort(key=lambda r: str(r["id"]))
    ids = [r["id"] for r in results]
    want = [m.id for m in expected]
    if ids != want:
        raise ValueError(f"mutant runs {ids} do not match the patch's mutants {want}")
    post = [_load(os.path.join(d, "outcome.json")) for d in cfg["post_runs"]]
    post_fails = [r for r in post if run_failed(r) or r.get("build") == "failed"]

    counts = {s: sum(1 for r in results if r["status"] == s) for s in ("killed", "survived")}
    counts["did_not_build"] = sum(1 for r in results if r["status"] == "did-not-build")
    judged = counts["killed"] + counts["survived"]
    score = round(counts["killed"] / judged, 6) if judged else None
    rules: list[str] = []
    if not expected:
        rules.append("mutation.no-mutants")
    elif post_fails or not post:
        rules.append("mutation.post-fix-fails")
    elif not judged:
        rules.append("mutation.none-built")
    elif score is not None and min_score is not None and score < min_score:
        rules.append("mutation.score-below-threshold")
    measurable = not rules or rules == ["mutation.score-below-threshold"]
    reasons = sorted({code_of(r) for r in rules}, key=CODES.index)
    return {
        "schema": "trace.gate/v1",
        "gate": "mutation",
        "passed": not rules,
        "measurable": measurable,
        "score": score if measurable else None,
        "reasons": reasons,
        "details": {
            "rules": rules,
            "mutants": len(expected),
            **counts,
            "threshold": min_score,
            "policy": policy,
            "post_fix_runs": len(post),
            "post_fix_failed": len(post_fails),
            "results": [
                {k: r[k] for k in ("id", "operator", "file", "line", "description", "status")}
                for r in results
            ],
            "survivors": [
                {"id": r["id"], "description": r["description"], "diff": r["diff"]}
                for r in results
                if r["status"] == "survived"
            ],
        },
    }
