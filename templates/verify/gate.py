"""The expectation gate: did the unpatched TARGET fail as [expect] says, and the patched survive?

The verdict rests on the target's own behaviour, as the harness saw it (the records'
`invocations`): pre-fix holds when one target invocation failed (exit code, signal or a sanitizer
report on its own stderr) in the way [expect] says, every expectation field met by that same
invocation (output patterns are matched against that invocation's own output). A failure only
the reproducer script reports (an echoed sanitizer line, a non-zero exit of its own) is not the
target failing: pre-fix-did-not-fail. Post-fix survives only when no target invocation failed
and the script itself exited 0 (a script that still reports a failure can only deny).

How the harness ended things (an invocation's `ended`): a target still running when the
reproducer script ended is killed by the harness (`killed-by-harness`): that is not a crash, the
invocation did not fail. A target dying of SIGPIPE after its reader went away (`broken-pipe`,
`cparse big | head -1`) is how a pipeline ends: not a failure either. A reproducer that hits its
timeout is a failure of the RUN (`timed_out`, the script's own SIGKILL): the targets it left
running are `timed-out` (not target failures), post-fix-still-fails, and pre-fix does not fail
as expected unless some other target invocation did. Runs are compared (flakiness) on how each
invocation ended, in canonical order, with every non-failing invocation counted alike.

Stdlib only. In the sandbox it reads the reproducer records (`$out/outcome.json` of every run
step; environment `pre`, `post`: space-separated store paths; `expect`: the candidate's
[expect] as JSON) and prints a gate record (trace.gate/v1) on stdout. `trace verify` imports the
same functions to judge a side on its own when the other side's build is broken, so the rules
live in one place.
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any

Record = dict[str, Any]


NOT_FAILURES = ("killed-by-harness", "timed-out", "broken-pipe")


def invocation_failed(i: Record) -> bool:
    if i.get("ended") in NOT_FAILURES and not i.get("sanitizer"):
        return False
    return i.get("exit_code") not in (0, None) or bool(i.get("signal")) or bool(i.get("sanitizer"))


def failing(r: Record) -> list[Record]:
    """The record's target invocations that failed (exit code, signal or own sanitizer report)."""
    return [i for i in r.get("invocations") or [] if invocation_failed(i)]


def failed(r: Record) -> bool:
    """The TARGET failed in this run. The reproducer script's own exit does not count."""
    return bool(failing(r))


def script_failed(r: Record) -> bool:
    return r.get("exit_code") not in (0, None) or bool(r.get("signal")) or bool(r.get("timed_out"))


def sanitizer_text(r: Record) -> str | None:
    s = r.get("sanitizer")
    return f"{s['tool']}: {s['kind']}" if s else None


def describe_invocation(i: Record) -> str:
    parts = []
    if i.get("sanitizer"):
        parts.append(str(sanitizer_text(i)))
    if i.get("signal"):
        parts.append(str(i["signal"]))
    if i.get("exit_code") is not None:
        parts.append(f"exit {i['exit_code']}")
    if i.get("ended"):
        parts.append(str(i["ended"]))
    return f"{i.get('target')}: " + ", ".join(parts)


def describe(r: Record) -> str:
    if not r.get("target_ran"):
        return "target never ran"
    bad = failing(r)
    if bad:
        return "failed: " + describe_invocation(bad[0])
    n = len(r.get("invocations") or [])
    text = f"target survived ({n} invocation(s), all exit 0)"
    if r.get("timed_out"):
        text += "; the reproducer timed out"
    elif script_failed(r):
        text += f"; the reproducer script itself exited {r.get('exit_code', r.get('signal'))}"
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
    return (
        bool(r.get("target_ran")),
        tuple(sorted(ends)),  # canonical order: parallel targets start in timing order
        r.get("exit_code"),
        r.get("signal"),
        bool(r.get("timed_out")),
    )


def mismatches(i: Record, expect: Record) -> list[str]:
    """How one failing target invocation differs from the expected failure (empty: matches)."""
    out: list[str] = []
    if expect.get("exit_code") is not None and i.get("exit_code") != expect["exit_code"]:
        out.append(f"expected exit code {expect['exit_code']}, got {i.get('exit_code')}")
    if expect.get("signal") and i.get("signal") != expect["signal"]:
        out.append(f"expected signal {expect['signal']}, got {i.get('signal') or 'none'}")
    want = expect.get("sanitizer")
    if want:
        got = sanitizer_text(i)
        ok = got == want if ":" in want else str(got).split(":")[0] == want
        if not ok:
            out.append(f"expected sanitizer report '{want}', got '{got or 'none'}'")
    pattern = expect.get("output")
    if pattern:
        text = i.get("stdout_tail", "") + "\n" + i.get("stderr_tail", "")
        if not re.search(pattern, text, re.MULTILINE):
            out.append(f"the target's output does not match /{pattern}/")
    return out


def judge_side(side: str, records: list[Record], expect: Record) -> dict[str, Any]:
    """One claim row: pre-fix-fails-as-expected (side 'pre') or post-fix-survives ('post')."""
    claim = "pre-fix-fails-as-expected" if side == "pre" else "post-fix-survives"
    runs = ", ".join(f"run {r.get('run')}: {describe(r)}" for r in records)
    evidence = f"{len(records)} {side}-fix reproducer run(s): {runs}"
    row = {"claim": claim, "evidence": evidence, "holds": False, "reason": "ok", "detail": ""}
    flaky = len({signature(r) for r in records}) > 1
    if not records:
        row["reason"] = "run-step-failed"
        row["detail"] = "no reproducer records"
    elif not any(r.get("target_ran") for r in records):
        row["reason"] = "target-never-ran"
        row["detail"] = "no run invoked the package's programs or imported its modules"
    elif flaky:
        row["reason"] = "flaky"
        row["detail"] = "runs of the same build disagree"
    elif side == "pre" and not (bad := failing(records[0])):
        row["reason"] = "pre-fix-did-not-fail"
        row["detail"] = describe(records[0])
    elif side == "pre" and all(wrong := [mismatches(i, expect) for i in bad]):
        row["reason"] = "pre-fix-wrong-failure"
        row["detail"] = f"{bad[0].get('target')}: " + "; ".join(wrong[0])
    elif side == "post" and (failed(records[0]) or script_failed(records[0])):
        row["reason"] = "post-fix-still-fails"
        row["detail"] = describe(records[0])
    else:
        row["holds"] = True
    return row


def side_flaky(records: list[Record]) -> bool:
    return len({signature(r) for r in records}) > 1


def gate(pre: list[Record], post: list[Record], expect: Record) -> Record:
    rows = [judge_side("pre", pre, expect), judge_side("post", post, expect)]
    flaky = {"pre": side_flaky(pre), "post": side_flaky(post)}
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


def load(paths: str, side: str) -> list[Record]:
    """The run records of one side (the runs are not told their side: it is added here)."""
    records = []
    for p in paths.split():
        with open(os.path.join(p, "outcome.json"), encoding="utf-8") as fh:
            records.append({**json.load(fh), "side": side})
    return sorted(records, key=lambda r: int(r.get("run", 0)))


def main() -> int:
    env = os.environ
    pre, post = load(env.get("pre", ""), "pre"), load(env.get("post", ""), "post")
    record = gate(pre, post, json.loads(env["expect"]))
    json.dump(record, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
