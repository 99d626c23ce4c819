"""The expectation gate: did the unpatched build fail as [expect] says, and the patched survive?

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


def failed(r: Record) -> bool:
    return r.get("exit_code") not in (0, None) or bool(r.get("signal")) or bool(r.get("sanitizer"))


def sanitizer_text(r: Record) -> str | None:
    s = r.get("sanitizer")
    return f"{s['tool']}: {s['kind']}" if s else None


def describe(r: Record) -> str:
    if not r.get("target_ran"):
        return "target never ran"
    if not failed(r):
        return "survived (exit 0)"
    parts = []
    if r.get("sanitizer"):
        parts.append(str(sanitizer_text(r)))
    if r.get("signal"):
        parts.append(str(r["signal"]))
    if r.get("exit_code") is not None:
        parts.append(f"exit {r['exit_code']}")
    return "failed: " + ", ".join(parts)


def signature(r: Record) -> tuple[Any, ...]:
    """What must agree between runs of one side (not output digests: only how it ended)."""
    return (
        bool(r.get("target_ran")),
        failed(r),
        r.get("exit_code"),
        r.get("signal"),
        sanitizer_text(r),
    )


def mismatches(r: Record, expect: Record) -> list[str]:
    """How a failing record differs from the expected failure (empty: it matches)."""
    out: list[str] = []
    if expect.get("exit_code") is not None and r.get("exit_code") != expect["exit_code"]:
        out.append(f"expected exit code {expect['exit_code']}, got {r.get('exit_code')}")
    if expect.get("signal") and r.get("signal") != expect["signal"]:
        out.append(f"expected signal {expect['signal']}, got {r.get('signal') or 'none'}")
    want = expect.get("sanitizer")
    if want:
        got = sanitizer_text(r)
        ok = got == want if ":" in want else bool(got) and got.split(":")[0] == want
        if not ok:
            out.append(f"expected sanitizer report '{want}', got '{got or 'none'}'")
    pattern = expect.get("output")
    if pattern:
        text = r.get("stdout_tail", "") + "\n" + r.get("stderr_tail", "")
        if not re.search(pattern, text, re.MULTILINE):
            out.append(f"output does not match /{pattern}/")
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
    elif side == "pre" and not failed(records[0]):
        row["reason"] = "pre-fix-did-not-fail"
    elif side == "pre" and (wrong := mismatches(records[0], expect)):
        row["reason"] = "pre-fix-wrong-failure"
        row["detail"] = "; ".join(wrong)
    elif side == "post" and failed(records[0]):
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


def load(paths: str) -> list[Record]:
    records = []
    for p in paths.split():
        with open(os.path.join(p, "outcome.json"), encoding="utf-8") as fh:
            records.append(json.load(fh))
    return sorted(records, key=lambda r: int(r.get("run", 0)))


def main() -> int:
    env = os.environ
    record = gate(load(env.get("pre", "")), load(env.get("post", "")), json.loads(env["expect"]))
    json.dump(record, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
