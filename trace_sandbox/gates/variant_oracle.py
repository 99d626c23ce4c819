"""Declared oracles on a VARIANT of the PoC (a changed input), call by call: the variants gate's
rules (variant_gate.py) and the PoC's declared rejection the fuzzing gate reads (fuzz_gate.py).

A call the pre-fix side shows the bug on is a BAD input: it must be handled as the PoC's declared
rejection (`rejections`). A call the pre-fix side handled well is a GOOD input: an oracle it met
must still be met, and a new failure is a regression (`variant_judgement`). Judged by the
input-independent part of [accept] only (oracle.py `input_independent`), with oracle.py's rules.

Stdlib only, like oracle.py, which it builds on (oracle.py imports nothing of it: the mutation
gate loads oracle.py alone, from its file, as its judge).
"""

from __future__ import annotations

from .oracle import (
    NOT_FAILURES,
    Judgement,
    Record,
    _by_call,
    _fields,
    _post_problems,
    describe_invocation,
    fatal,
    governing,
    input_independent,
    invocation_failed,
    mismatches,
    shows_the_bug,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def rejections(accept: Record) -> list[Record]:
    """The PoC's declared rejection, input-independent fields only: every [accept] oracle that
    declares one (an exit-code set without 0: `exit 1` + a message). None declared (the fix
    handles the bad input and exits 0, or the default): a bad input is judged by the crash
    rule only (a clean exit, whatever its code, is no crash)."""
    rules = input_independent(accept)
    entries = [_fields(o) for o in rules.get("invocation") or []]
    return [o for o in [_fields(rules), *entries] if _is_rejection(o)]


def _is_rejection(o: Record) -> bool:
    return bool(_codes(o)) and 0 not in _codes(o)


def _codes(o: Record) -> list[Any]:
    codes = o.get("exit_code")
    return [codes] if isinstance(codes, int) else list(codes or [])


class VariantJudgement:
    """A variant's post-fix run against its pre-fix run, per call (variant_judgement)."""

    def __init__(self) -> None:
        self.broken: list[str] = []  # a good input: an oracle the pre-fix side met, broken
        self.mishandled: list[str] = []  # a bad input: not handled as the PoC's rejection
        self.still_shown: list[str] = []  # a bad input: the declared failure, still there
        self.regressed: list[str] = []  # a good input: a new failure


def variant_judgement(run: Record, baseline: Record, oracles: Record) -> VariantJudgement:
    """How a variant's post-fix `run` fails, per call, against its pre-fix `baseline` (THE SAME
    input). A call is a BAD input when the pre-fix side shows the bug on it (`shows_the_bug`):
    the PoC's declared rejection applies (`rejections`, one of them met: mishandled
    otherwise; still_shown when the post-fix call, missing it, fails as [expect] declares the
    bug: a Python exception the fix let through on a neighbouring input is the bug itself).
    A call the pre-fix side handled well (no failure, no bug) is a GOOD input: a declared
    oracle it met pre-fix must still be met (broken), and a new failure is a regression. A
    call the pre-fix side failed otherwise (not the declared bug: a variant that is no valid
    input, on both sides) is judged by neither."""
    expect, accept = oracles.get("expect") or {}, oracles.get("accept") or {}
    invs = list(run.get("invocations") or [])
    base = list(baseline.get("invocations") or [])
    rules = input_independent(accept)
    mine = _post_problems(invs, rules, Judgement())
    theirs = _post_problems(base, rules, Judgement())
    judges = governing(invs, rules, Judgement())
    where = _by_call(base)
    out = VariantJudgement()
    if run.get("timed_out") and not baseline.get("timed_out"):
        out.broken.append("the reproducer timed out")
    for call, n in _by_call(invs).items():
        m = where.get(call)
        if m is None:
            continue
        i, b = invs[n], base[m]
        if shows_the_bug(b, expect):
            problems = _rejection_problems(i, accept)
            if problems and invocation_failed(i) and shows_the_bug(i, expect):
                out.still_shown.append(f"{describe_invocation(i)} (the declared bug, as pre-fix)")
            else:
                out.mishandled += problems
        elif not invocation_failed(b):
            # a failure the call's own oracle declares acceptable besides success (exit 0 or
            # 2) is no regression; the PoC's rejection (exit 1, without 0) never excuses one
            declared = not mine[n] and all(0 in _codes(o) for o in judges[n][1])
            if mine[n] and not theirs[m]:
                out.broken += mine[n]
            elif invocation_failed(i) and not declared:
                out.regressed.append(
                    f"{describe_invocation(i)} (pre-fix: {describe_invocation(b)}, no failure)"
                )
    return out


def _rejection_problems(i: Record, accept: Record) -> list[str]:
    """How a post-fix call on a bad input misses every declared rejection (empty: it meets one)."""
    if fatal(i):
        return [f"{describe_invocation(i)} (never acceptable after a fix)"]
    tried = []
    for o in rejections(accept) or [{}]:
        fields = dict(o)
        if i.get("ended") in NOT_FAILURES:
            fields.pop("exit_code", None)
        wrong = mismatches(i, fields)
        if not wrong:
            return []
        tried.append("; ".join(wrong))
    return [f"{describe_invocation(i)}: a bad input, not handled as the PoC: " + " / ".join(tried)]
