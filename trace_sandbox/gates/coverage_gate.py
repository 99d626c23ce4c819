"""The coverage gate: the patch's changed lines against what the coverage-run step measured
(coverage.json, written by coverage.py's `run`). See coverage.py's docstring for the rules:
changed lines counted by their statement, branch arcs reported beside, and when a file that may
hold executable changed lines was not measured or mapped, not measurable rather than a guess.

Stdlib only: runs in the sandbox (`python3 -S -B -m trace_sandbox.gates.main coverage OUT`).
"""

from __future__ import annotations

import json
import os

from .applied import applied_policy, threshold
from .codes import gate_record, rules
from .coverage import _read, changed_text, match_path, may_execute
from .landing import landed, load_landing
from .lang import language
from .statements import spans, statement_of

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def _patched_source(cfg: dict[str, Any], path: str) -> str | None:
    """The patched file (the patched-source step's copy, beside its landing.json)."""
    landing = cfg.get("landing")
    if not landing:
        return None
    full = os.path.join(os.path.dirname(str(landing)), "files", path)
    return _read(full) if os.path.isfile(full) else None


def by_statement(
    lines: list[int], data: dict[str, Any], source: str | None, path: str
) -> tuple[list[int], list[int], list[int], dict[int, list[int]]]:
    """(executable, covered, decided, within) of the changed `lines` (`decided`: the lines whose
    statement, not their own count, made them executable or executed; `within`: each changed
    line's multi-line statement, [first, last]): a line that lies in a
    multi-line statement (a condition spanning lines: statements.py) is executable when any line
    of it is, and executed when any line of it ran (its condition was evaluated: gcc counts a
    clause's test where it pleases, often on the line before). Other lines: gcov's own counts."""
    exe, ran = set(data["executable"]), set(data["executed"])
    found = spans(source) if source is not None and language(path) != "python" else []
    executable: list[int] = []
    covered: list[int] = []
    decided: list[int] = []
    within: dict[int, list[int]] = {}
    for n in lines:
        span = statement_of(n, found)
        rng = range(span[0], span[1] + 1) if span else range(n, n + 1)
        if span is not None:
            within[n] = [span[0], span[1]]
        by_line = (n in exe, n in ran)
        by_statement = (any(k in exe for k in rng), any(k in ran for k in rng))
        if span is not None and by_statement != by_line:
            decided.append(n)  # the statement, not the line, decided
        if by_statement[0]:
            executable.append(n)
            if by_statement[1]:
                covered.append(n)
    return executable, covered, decided, within


def branch_share(
    lines: list[int], statements: dict[int, list[int]], data: dict[str, Any]
) -> list[int]:
    """[taken, total] branch arcs of the changed lines and of the statements they lie in."""
    branches: dict[str, list[int]] = data.get("branches") or {}
    wanted = set(lines)
    for first, last in statements.values():
        wanted.update(range(first, last + 1))
    taken = sum(branches[str(n)][0] for n in wanted if str(n) in branches)
    total = sum(branches[str(n)][1] for n in wanted if str(n) in branches)
    return [taken, total]


def _file_entry(
    cfg: dict[str, Any], cov: dict[str, Any], path: str, text: dict[int, str], stated: list[int]
) -> tuple[dict[str, Any], str | None, list[int], list[int], list[int]]:
    """One changed file: its entry in the record, why it could not be measured ("unmapped",
    "unmeasured", or None), its executable and covered changed lines, its [taken, total] branch
    arcs."""
    sources: dict[str, str] = cov.get("sources") or {}
    lines = list(text)
    moved = {n: m for n, m in zip(stated, lines, strict=True) if n != m}
    extra = {"moved": moved} if moved else {}
    src = sources.get(path) or match_path(path, sorted(cov["files"]))
    if src is None or src not in cov["files"]:
        code = [n for n, t in text.items() if may_execute(t, language(path))]
        traced = language(path) == "python" and "python-settrace" in cov.get("tools", [])
        missing = None if not code else "unmapped" if traced else "unmeasured"
        entry = {"file": path, "changed": lines, "measurable": False, "may_execute": code}
        return entry | extra, missing, [], [], [0, 0]
    data = cov["files"][src]
    executable, hit, decided, within = by_statement(lines, data, _patched_source(cfg, path), path)
    branch = branch_share(lines, within, data)
    statements = {str(n): within[n] for n in decided}
    entry = {
        "file": path,
        "coverage_file": src,
        "mapped_by": "content" if sources.get(path) == src else "path",
        "changed": lines,
        "executable": executable,
        "covered": hit,
        "missed": [n for n in executable if n not in hit],
        "measurable": True,
        "branches": branch,
    }
    entry |= extra | ({"statements": statements} if statements else {})
    return entry, None, executable, hit, branch


def _rules(
    cov: dict[str, Any],
    missing: dict[str, list[str]],
    measured: int,
    share: float | None,
    min_score: float | None,
) -> list[str]:
    """The coverage gate's reason code (at most one), first match wins."""
    if cov.get("build") == "failed" or not cov.get("tools"):
        return ["coverage.not-measurable"]
    if missing["unmapped"]:
        return ["coverage.path-not-mapped"]
    if missing["unmeasured"]:
        return ["coverage.file-not-measured"]
    if not measured:
        return ["coverage.no-executable-lines"]
    if share is not None and min_score is not None and share < min_score:
        # lines missed after the tracer was lost are unknown, not unrun (coverage.tracer_lost)
        return ["coverage.tracer-lost" if cov.get("tracer_lost") else "coverage.below-threshold"]
    return []


def _summary(
    counts: tuple[int, int, list[int]],
    per_file: list[dict[str, Any]],
    fired: list[str],
    missing: dict[str, list[str]],
    reported: list[str],
) -> str:
    covered, measured, branches = counts
    summary = f"{covered} of {measured} executable changed line(s) run"
    if any("moved" in f for f in per_file):
        summary += " (lines where the patch landed, not its hunk headers)"
    if any("statements" in f for f in per_file):
        summary += " (a clause of a multi-line condition counted by its statement)"
    if branches[1]:
        summary += f"; {branches[0]} of {branches[1]} branch(es) of the changed statements taken"
    if fired and fired[0] != "coverage.below-threshold":
        summary += f"; {rules()[fired[0]].message}"
    unnamed = missing["unmapped"] + missing["unmeasured"]
    if unnamed:
        summary += f": {', '.join(unnamed)}; reported: {', '.join(reported[:10])}"
    return summary


def evaluate(cfg: dict[str, Any]) -> dict[str, Any]:
    """cfg: patches, policy (the signing policy's name, version and min_score; no min_score: no
    threshold), coverage (path to a coverage.json), landing (the patched-source step's
    landing.json: where each added line landed; absent: the hunk headers' numbers)."""
    policy = applied_policy(cfg)
    min_score = threshold(policy, "min_score")
    with open(cfg["coverage"], encoding="utf-8") as fh:
        cov: dict[str, Any] = json.load(fh)
    landing = load_landing(cfg.get("landing"))
    stated = changed_text([_read(p) for p in cfg["patches"]])
    changed = {
        path: {landed(landing, path, n): t for n, t in text.items()}
        for path, text in stated.items()
    }
    reported = sorted(cov["files"])
    per_file: list[dict[str, Any]] = []
    measured = covered = 0
    branches = [0, 0]  # taken, total arcs of the changed lines' statements (gcov)
    missing: dict[str, list[str]] = {"unmapped": [], "unmeasured": []}
    for path, text in changed.items():
        entry, why, executable, hit, branch = _file_entry(cfg, cov, path, text, list(stated[path]))
        per_file.append(entry)
        if why is not None:
            missing[why].append(path)
        measured += len(executable)
        covered += len(hit)
        branches = [branches[0] + branch[0], branches[1] + branch[1]]
    share = round(covered / measured, 6) if measured else None
    rules = _rules(cov, missing, measured, share, min_score)
    measurable = not rules or rules == ["coverage.below-threshold"]
    summary = _summary((covered, measured, branches), per_file, rules, missing, reported)
    return gate_record(
        "coverage",
        rules,
        measurable=measurable,
        score=share if measurable else None,
        details={
            "summary": summary,
            "tools": cov.get("tools", []),
            "threshold": min_score,
            "policy": policy,
            "changed_lines": sum(len(v) for v in changed.values()),
            "executable_changed_lines": measured,
            "covered_lines": covered,
            "branches": {"taken": branches[0], "total": branches[1]},
            "branch_share": round(branches[0] / branches[1], 6) if branches[1] else None,
            "files": per_file,
            "unmeasured_files": missing["unmeasured"],
            "unmapped_files": missing["unmapped"],
            "reported_files": reported[:50],
        },
    )
