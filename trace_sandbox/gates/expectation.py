"""The expectation gate: did the unpatched TARGET misbehave as [expect] declares, and does the
patched target behave as [accept] declares, on the same reproducer?

The verdict rests on the target's own behaviour, as the harness saw it (the records'
`invocations`), judged by the declared oracles (`oracle.py`: the rules and every field). The
reproducer script's own exit code and output never count, either way: a failure only the script
reports (an echoed sanitizer line, an `exit 1` of its own) is not the target failing, and a
script that exits non-zero after the fix does not make the fix fail.

How the harness ended things (an invocation's `ended`): a target still running when the
reproducer script ended is killed by the harness (`killed-by-harness`): not a crash. A target
dying of SIGPIPE after its reader went away (`broken-pipe`, `cparse big | head -1`) is how a
pipeline ends: not a failure either. A reproducer that hits its timeout is a failure of the RUN
(`timed_out`): post-fix-still-fails, and pre-fix does not fail as expected unless some other
target invocation did. Runs of one side must agree (flakiness): on how each invocation ended,
and on the verdict each run gets.

Stdlib only. In the sandbox (`python3 -S -B -m trace_sandbox.gates.main expectation OUT`) its
config holds
`pre`, `post` (the run steps' store paths) and `oracles` ({"expect": ..., "accept": ...}, from
`engine/candidate.py`); `trace verify` imports the same functions to judge a side on its own
when the other side's build is broken, so the rules live in one place.
"""

from __future__ import annotations

import json
import os

from .oracle import (
    Judgement,
    describe_invocation,
    invocation_failed,
    judge_post,
    judge_pre,
    sanitizer_text,
    unmatched_in_failed_run,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

Record = dict[str, "Any"]  # a string: no `typing` at run time


def failing(r: Record) -> list[Record]:
    """The record's target invocations that failed (exit code, signal or own sanitizer report)."""
    return [i for i in r.get("invocations") or [] if invocation_failed(i)]


def describe(r: Record) -> str:
    """One run in a few words (the evidence column); what differed goes to the detail."""
    if not r.get("target_ran"):
        return "target never ran"
    n = len(r.get("invocations") or [])
    bad = failing(r)
    text = f"{n} target invocation(s)" + (f", {len(bad)} non-zero/fatal" if bad else ", all exit 0")
    if r.get("timed_out"):
        text += ", reproducer timed out"
    return text


def signature(r: Record) -> tuple[Any, ...]:
    """What must agree between runs of one side (not output digests: only how things ended)."""
    ends = []
    for i in r.get("invocations") or []:
        if invocation_failed(i):
            ends.append(
                (
                    str(i.get("target")),
                    repr(i.get("exit_code")),
                    repr(i.get("signal")),
                    repr(sanitizer_text(i)),
                )
            )
        else:  # exit 0, or ended by the harness / a closed pipe: all alike
            ends.append((str(i.get("target")), "0", "None", "None"))
    return (bool(r.get("target_ran")), tuple(sorted(ends)), bool(r.get("timed_out")))


def judge_run(side: str, r: Record, oracles: Record) -> Judgement:
    invs = list(r.get("invocations") or [])
    if side == "pre":
        # pre-fix, a failure is the point: an [expect] oracle that selects nothing stays a
        # declaration error (the call it names never happens on the build it describes)
        return judge_pre(invs, oracles.get("expect") or {})
    j = unmatched_in_failed_run(judge_post(invs, oracles.get("accept") or {}), r)
    if r.get("timed_out"):
        j.holds = False
        j.problems.insert(0, "the reproducer timed out")
    return j


def side_flaky(records: list[Record], oracles: Record | None = None) -> bool:
    """Runs of one build disagree: on how invocations ended, or on their verdict."""
    if len({signature(r) for r in records}) > 1:
        return True
    if oracles is None or not records:
        return False
    side = str(records[0].get("side") or "pre")
    return len({judge_run(side, r, oracles).holds for r in records}) > 1


def _runs(records: list[Record], side: str) -> str:
    alike = len({describe(r) for r in records}) == 1
    if alike and records:
        return f"{len(records)} {side}-fix run(s), each: {describe(records[0])}"
    return f"{len(records)} {side}-fix run(s): " + "; ".join(
        f"run {r.get('run')}: {describe(r)}" for r in records
    )


def judge_side(side: str, records: list[Record], oracles: Record) -> dict[str, Any]:
    """One claim row: pre-fix-fails-as-expected (side 'pre') or post-fix-survives ('post').
    `unmatched` lists the keys of per-invocation oracles that selected no invocation (a bad
    declaration: `trace verify` reports it as an input error)."""
    claim = "pre-fix-fails-as-expected" if side == "pre" else "post-fix-survives"
    row: dict[str, Any] = {
        "claim": claim,
        "evidence": _runs(records, side),
        "holds": False,
        "reason": "ok",
        "detail": "",
    }
    if not records:
        row["reason"] = "run-step-failed"
        row["detail"] = "no reproducer records"
        return row
    if not any(r.get("target_ran") for r in records):
        row["reason"] = "target-never-ran"
        row["detail"] = "no run invoked the package's programs or imported its modules"
        return row
    verdicts = [judge_run(side, r, oracles) for r in records]
    unmatched = sorted({k for v in verdicts for k in v.unmatched})
    if unmatched:
        row["unmatched"] = unmatched
    first = verdicts[0]
    if side_flaky(records, oracles):
        row["reason"] = "flaky"
        row["detail"] = "runs of the same build disagree"
    elif unmatched:
        row["reason"] = "pre-fix-wrong-failure" if side == "pre" else "post-fix-still-fails"
        row["detail"] = "oracle(s) selected no target invocation: " + ", ".join(unmatched)
    elif side == "pre" and not first.holds:
        row["reason"] = (
            "pre-fix-wrong-failure" if first.failed_differently else "pre-fix-did-not-fail"
        )
        row["detail"] = first.detail
    elif side == "post" and not first.holds:
        row["reason"] = "post-fix-still-fails"
        row["detail"] = first.detail
    else:
        row["holds"] = True
        row["detail"] = _held(side, records[0], oracles)
    return row


def _held(side: str, r: Record, oracles: Record) -> str:
    """What the holding claim rests on, in a few words (never a repeat of the evidence)."""
    invs = list(r.get("invocations") or [])
    if side == "pre":
        bad = failing(r)
        if bad:
            return describe_invocation(bad[0])
        relations = [str(x.get("key")) for x in (oracles.get("expect") or {}).get("relation") or []]
        if relations:
            return f"{len(invs)} invocation(s) break " + ", ".join(relations)
        shown = [describe_invocation(i) for i in invs]
        return (shown[0] if shown else "no invocation") + ": a wrong output as [expect] declares"
    accept = oracles.get("accept") or {}
    declared = bool(accept.get("invocation")) or any(k != "invocation" for k in accept)
    how = "as [accept] declares" if declared else "all exit 0"
    return f"{len(invs)} invocation(s) {how}, no signal, no sanitizer report"


def gate(pre: list[Record], post: list[Record], oracles: Record) -> Record:
    rows = [judge_side("pre", pre, oracles), judge_side("post", post, oracles)]
    flaky = {"pre": side_flaky(pre, oracles), "post": side_flaky(post, oracles)}
    agree = {
        "claim": "runs-agree",
        "evidence": f"{len(pre)} pre-fix and {len(post)} post-fix runs compared",
        "holds": not any(flaky.values()),
        "reason": "flaky" if any(flaky.values()) else "ok",
        "detail": ", ".join(f"{s}-fix runs disagree" for s, f in flaky.items() if f),
    }
    rows.append(agree)
    reasons: list[str] = []
    for row in rows:
        if not row["holds"] and row["reason"] not in reasons:
            reasons.append(row["reason"])
    return {
        "schema": "trace.gate/v1",
        "gate": "expectation",
        "passed": not reasons,
        "measurable": True,
        "score": None,
        "reasons": reasons,
        "details": {"claims": rows, "flaky": flaky},
    }


def load(paths: list[str], side: str) -> list[Record]:
    """The run records of one side (the runs are not told their side: it is added here)."""
    records = []
    for p in paths:
        with open(os.path.join(p, "outcome.json"), encoding="utf-8") as fh:
            records.append({**json.load(fh), "side": side})
    return sorted(records, key=lambda r: int(r.get("run", 0)))


def evaluate(cfg: dict[str, Any]) -> Record:
    pre, post = load(list(cfg.get("pre") or []), "pre"), load(list(cfg.get("post") or []), "post")
    oracles = cfg["oracles"]
    return gate(pre, post, json.loads(oracles) if isinstance(oracles, str) else oracles)
