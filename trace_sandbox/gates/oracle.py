"""Declared oracles: how the TARGET must behave, judged on what the harness recorded.

One oracle (a dict, as `engine/candidate.py` `Oracle.sandbox_json` writes it) may hold:

* `exit_code`: a list of accepted exit codes (a set); `signal`: e.g. "SIGSEGV";
  `sanitizer`: "Tool" or "Tool: kind", the kind of the report's SUMMARY line (double-free,
  heap-use-after-free, SEGV, heap-buffer-overflow, ...; docs/oracles.md lists them);
* `output` (regex over stdout + stderr), `stdout`, `stderr` (regexes over that stream, searched,
  multi-line), each over the text the harness captured from the target itself (normalised);
* `golden`: {file, sha256, text}: the target's stdout must be exactly this file;
  `not_golden`: the same shape, the target's stdout must NOT be this file (a wrong output);
* selectors, for per-invocation oracles only: `target` ("bin/NAME" or "NAME"), `args` (regex
  searched in the arguments joined by spaces), `index` (1-based, in the record's canonical
  order: by program, then arguments).

The candidate's `[expect]` (pre-fix) and `[accept]` (post-fix) each have top-level fields (one
oracle) and `invocation` (a list of per-invocation oracles). The rules:

* pre-fix holds when every oracle is met (top-level: by some invocation; per-invocation: by every
  invocation it selects) and at least one met oracle shows a misbehaviour: its invocation failed
  (non-zero exit, signal, sanitizer report) or the oracle is about output (`stdout`, `stderr`,
  `not_golden`: a wrong-output bug, the target may exit 0).
* post-fix holds when no invocation died of a signal or printed a sanitizer report (never
  acceptable, whatever is declared), every invocation a per-invocation oracle selects meets it,
  and every other invocation meets the top-level `[accept]` (default: exit code 0).
* a per-invocation oracle that selects no invocation of a run is a declaration error (its key is
  reported), never a pass, when everything in that run succeeded; in a run where a target
  failed, or the reproducer script stopped (non-zero, a signal, its timeout: `set -e` after a
  crash), it is that run's failure (`unmatched_in_failed_run`): post-fix-still-fails. (Pre-fix,
  where a failure is the point, it stays a declaration error.)
* a VARIANT of the PoC (a changed input) is judged by the input-independent part of [accept]
  only (exit-code sets, signal, sanitizer, stderr; never `stdout`, `output`, `golden`,
  `not_golden`, which were declared for the PoC's exact input), and only against the same
  variant on another build (`newly_unacceptable`): a variant breaks a post-fix oracle when the
  fix made it unacceptable although the unpatched build handled it acceptably; a mutant is seen
  by a variant when the mutant's run is unacceptable where the post-fix build's was not. The
  variants gate's rules per call (a bad input, a good one) are variant_oracle.py's.

Stdlib only, and self-contained: the expectation gate and the mutation gate (which loads this
file alone, as its judge: mutants are judged by these same oracles, `post_fix_acceptable`) run
it in the sandbox; `trace verify` imports it.
"""

from __future__ import annotations

import base64
import hashlib
import re

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

Record = dict[str, "Any"]  # a string: no `typing` at run time

# how the harness (not the target) ended an invocation, or a pipeline's normal end: not failures
NOT_FAILURES = ("killed-by-harness", "timed-out", "broken-pipe")
SELECTORS = ("target", "args", "index")
OUTPUT_FIELDS = ("stdout", "stderr", "not_golden")  # an oracle about a wrong output


def invocation_failed(i: Record) -> bool:
    """Exit code non-zero, a signal or a sanitizer report (harness-ended: not a failure)."""
    if i.get("ended") in NOT_FAILURES and not i.get("sanitizer"):
        return False
    return i.get("exit_code") not in (0, None) or bool(i.get("signal")) or bool(i.get("sanitizer"))


def fatal(i: Record) -> bool:
    """A signal the target died of, or a sanitizer report: never acceptable post-fix."""
    if i.get("sanitizer"):
        return True
    return bool(i.get("signal")) and i.get("ended") not in NOT_FAILURES


def sanitizer_text(r: Record) -> str | None:
    s = r.get("sanitizer")
    return f"{s['tool']}: {s['kind']}" if s else None


def declared_sanitizer(want: str) -> str:
    """A declared `sanitizer` as the harness records reports: "Tool" or "Tool: kind", the kind
    as the report's SUMMARY line names it; the ERROR line's wording is accepted too
    ("AddressSanitizer: attempting double-free" is "AddressSanitizer: double-free")."""
    tool, sep, kind = want.partition(":")
    kind = kind.strip()
    if kind.startswith("attempting "):
        kind = kind[len("attempting ") :].strip()
    return f"{tool.strip()}: {kind}" if sep else tool.strip()


def sanitizer_matches(want: str, got: str | None) -> bool:
    """Does the recorded report (`Tool: kind`, or None) meet the declared one?"""
    want = declared_sanitizer(want)
    return got == want if ":" in want else str(got).split(":")[0] == want


def stream(i: Record, name: str) -> str:
    """The target's own stdout or stderr as the harness captured it (older records: the tail)."""
    text = i.get(name)
    return str(text) if isinstance(text, str) else str(i.get(f"{name}_tail", ""))


def stdout_digest(i: Record) -> str:
    digest = i.get("stdout_sha256")
    if isinstance(digest, str):
        return digest
    return hashlib.sha256(stream(i, "stdout").encode()).hexdigest()


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
    args = " ".join(str(a) for a in i.get("args") or [])
    return f"{i.get('target')}{' ' + args if args else ''}: " + ", ".join(parts)


def selects(oracle: Record, i: Record, index: int) -> bool:
    """Does this per-invocation oracle apply to invocation number `index` (1-based)?"""
    want = oracle.get("target")
    if want is not None and str(i.get("target")) not in (want, f"bin/{want}"):
        return False
    pattern = oracle.get("args")
    if pattern is not None and not re.search(
        pattern, " ".join(str(a) for a in i.get("args") or [])
    ):
        return False
    return oracle.get("index") is None or int(oracle["index"]) == index


def _first_difference(want: str, got: str) -> str:
    wl, gl = want.splitlines(), got.splitlines()
    for n, (w, g) in enumerate(zip(wl, gl, strict=False), 1):
        if w != g:
            return f"line {n}: expected {w[:80]!r}, got {g[:80]!r}"
    if len(wl) != len(gl):
        return f"expected {len(wl)} line(s), got {len(gl)}"
    return "they differ in whitespace or a final newline"


def mismatches(i: Record, oracle: Record) -> list[str]:
    """How one invocation differs from the oracle's fields (empty: it meets them all)."""
    out: list[str] = []
    codes = oracle.get("exit_code")
    if isinstance(codes, int):
        codes = [codes]
    if codes is not None and i.get("exit_code") not in codes:
        want = " or ".join(str(c) for c in codes)
        out.append(f"expected exit code {want}, got {i.get('exit_code')}")
    if oracle.get("signal") and i.get("signal") != oracle["signal"]:
        out.append(f"expected signal {oracle['signal']}, got {i.get('signal') or 'none'}")
    want_san = oracle.get("sanitizer")
    if want_san:
        got = sanitizer_text(i)
        if not sanitizer_matches(str(want_san), got):
            out.append(f"expected sanitizer report '{want_san}', got '{got or 'none'}'")
    texts = {
        "output": stream(i, "stdout") + "\n" + stream(i, "stderr"),
        "stdout": stream(i, "stdout"),
        "stderr": stream(i, "stderr"),
    }
    for name in ("output", "stdout", "stderr"):
        pattern = oracle.get(name)
        if pattern and not re.search(pattern, texts[name], re.MULTILINE):
            what = "output" if name == "output" else name
            out.append(f"the target's {what} does not match /{pattern}/")
    golden = oracle.get("golden")
    if golden and stdout_digest(i) != golden["sha256"]:
        diff = _first_difference(str(golden.get("text", "")), texts["stdout"])
        out.append(f"stdout differs from {golden['file']}: {diff}")
    wrong = oracle.get("not_golden")
    if wrong and stdout_digest(i) == wrong["sha256"]:
        out.append(f"stdout is exactly {wrong['file']} (the correct output)")
    return out


def _fields(oracle: Record) -> Record:
    return {
        k: v for k, v in oracle.items() if k not in (*SELECTORS, "invocation", "relation", "key")
    }


def _misbehaves(i: Record, oracle: Record) -> bool:
    return invocation_failed(i) or any(oracle.get(f) for f in OUTPUT_FIELDS)


class Judgement:
    """The verdict on one run's invocations: holds, what was seen, unmatched selectors."""

    def __init__(self) -> None:
        self.holds = False
        self.problems: list[str] = []
        self.unmatched: list[str] = []  # keys of per-invocation oracles that selected nothing
        self.failed_differently = False  # pre-fix: a target failed, not as declared

    @property
    def detail(self) -> str:
        return "; ".join(self.problems)


def _selected(oracles: list[Record], invs: list[Record], j: Judgement) -> list[list[Record]]:
    chosen = []
    for k, o in enumerate(oracles, 1):
        picked = [i for n, i in enumerate(invs, 1) if selects(o, i, n)]
        if not picked:
            j.unmatched.append(str(o.get("key") or f"invocation.{k}"))
        chosen.append(picked)
    return chosen


def judge_pre(invs: list[Record], expect: Record) -> Judgement:
    """Did the unpatched target misbehave as [expect] declares?"""
    j = Judgement()
    top, entries = _fields(expect), list(expect.get("invocation") or [])
    shown = False
    if top:
        met = [i for i in invs if not mismatches(i, top)]
        shown = any(_misbehaves(i, top) for i in met)
        bad = [i for i in invs if invocation_failed(i)]
        if not shown and bad:
            j.failed_differently = True
            wrong = mismatches(bad[0], top) or ["it failed, but [expect] declares no failure"]
            j.problems.append(f"{describe_invocation(bad[0])}: " + "; ".join(wrong))
        elif not shown:
            about_output = any(top.get(f) for f in OUTPUT_FIELDS)
            wrong = mismatches(invs[0], top) if invs and about_output else []
            j.problems.append("; ".join(["no target invocation failed", *wrong]))
    for o, picked in zip(entries, _selected(entries, invs, j), strict=True):
        for i in picked:
            wrong = mismatches(i, _fields(o))
            if wrong:
                j.failed_differently = j.failed_differently or invocation_failed(i)
                j.problems.append(f"{o.get('key')}: {describe_invocation(i)}: " + "; ".join(wrong))
            elif _misbehaves(i, o):
                shown = True
    for r in expect.get("relation") or []:
        broken = _judge_relation(r, invs, j)
        if broken is not None and not broken:
            j.problems.append(f"{r.get('key')}: holds: {describe_relation(r)}")
        shown = shown or bool(broken)
    if not shown and not j.problems:
        j.problems.append("no target invocation failed or printed a declared wrong output")
    j.holds = shown and not j.problems and not j.unmatched
    return j


def _post_fields(oracle: Record) -> Record:
    fields = _fields(oracle)
    if fields.get("exit_code") is None:
        fields["exit_code"] = [0]  # no exit code declared: a patched target exits 0
    return fields


def governing(invs: list[Record], accept: Record, j: Judgement) -> list[tuple[bool, list[Record]]]:
    """Per invocation, the [accept] oracles that judge it: (selected by a per-invocation oracle,
    those oracles), else (False, [the top-level [accept]])."""
    entries = list(accept.get("invocation") or [])
    chosen = _selected(entries, invs, j)
    out = []
    for i in invs:
        mine = [o for o, picked in zip(entries, chosen, strict=True) if any(p is i for p in picked)]
        out.append((bool(mine), mine or [accept]))
    return out


def _post_problems(invs: list[Record], accept: Record, j: Judgement) -> list[list[str]]:
    """Per invocation, how it breaks the post-fix rules under [accept] (empty: acceptable)."""
    out: list[list[str]] = []
    for i, (mine, oracles) in zip(invs, governing(invs, accept, j), strict=True):
        problems: list[str] = []
        out.append(problems)
        if fatal(i):
            problems.append(f"{describe_invocation(i)} (never acceptable after a fix)")
            continue
        for o in oracles:
            fields = _post_fields(o)
            if i.get("ended") in NOT_FAILURES:
                del fields["exit_code"]  # ended by the harness or a closed pipe: no exit code
            wrong = mismatches(i, fields)
            if wrong:
                where = f"{o.get('key')}: " if mine else ""
                problems.append(f"{where}{describe_invocation(i)}: " + "; ".join(wrong))
    return out


def judge_post(invs: list[Record], accept: Record) -> Judgement:
    """Is every patched target invocation acceptable under [accept]? (default: all exit 0)"""
    j = Judgement()
    for problems in _post_problems(invs, accept, j):
        j.problems += problems
    for r in accept.get("relation") or []:
        broken = _judge_relation(r, invs, j)
        if broken:
            j.problems.append(f"{r.get('key')}: broken: {broken}")
    j.holds = bool(invs) and not j.problems and not j.unmatched
    return j


# Fields whose meaning depends on the exact input: a golden stdout, a stdout regex, `output`
# (stdout + stderr) and `not_golden` were declared for the PoC's input and say nothing about a
# changed one. A variant is judged by the rest: exit-code sets, signal, sanitizer, stderr.
INPUT_DEPENDENT = ("stdout", "output", "golden", "not_golden", "relation")


def input_independent(accept: Record) -> Record:
    """[accept] without its input-dependent fields (top level and every per-invocation oracle);
    the selectors stay, so a variant's invocation i is judged by invocation i's oracle."""
    top = {k: v for k, v in accept.items() if k not in (*INPUT_DEPENDENT, "invocation")}
    entries = [
        {k: v for k, v in o.items() if k not in INPUT_DEPENDENT}
        for o in accept.get("invocation") or []
    ]
    return {**top, "invocation": entries} if entries else top


def _by_call(invs: list[Record]) -> dict[tuple[str, tuple[str, ...], int], int]:
    """Position of each invocation by (target, arguments, occurrence): the same input run
    against two builds gives the same calls, whatever order the harness recorded them in."""
    seen: dict[tuple[str, tuple[str, ...]], int] = {}
    out = {}
    for n, i in enumerate(invs):
        call = (str(i.get("target")), tuple(str(a) for a in i.get("args") or ()))
        seen[call] = seen.get(call, 0) + 1
        out[(*call, seen[call])] = n
    return out


def newly_unacceptable(run: Record, baseline: Record, accept: Record) -> list[str]:
    """How `run` breaks the post-fix rules where `baseline` (THE SAME input against another
    build) does not: per invocation, under the input-independent part of [accept] (a fatal
    signal or sanitizer report is never acceptable). The variants gate asks it of a variant's
    post-fix run against its pre-fix run (the fix made an acceptable input unacceptable); the
    mutation gate of a mutant's variant run against the post-fix build's (the mutant is seen).
    A selector that picks nothing on a changed input is no finding: both sides share it."""
    rules = input_independent(accept)
    invs = list(run.get("invocations") or [])
    base = list(baseline.get("invocations") or [])
    mine = _post_problems(invs, rules, Judgement())
    theirs = _post_problems(base, rules, Judgement())
    where = _by_call(base)
    out: list[str] = []
    if run.get("timed_out") and not baseline.get("timed_out"):
        out.append("the reproducer timed out")
    for call, n in _by_call(invs).items():
        m = where.get(call)
        if mine[n] and m is not None and not theirs[m]:
            out += mine[n]
    return out


def stopped_after_failure(record: Record) -> str | None:
    """How the run went wrong, if it did: a target invocation failed, or the reproducer script
    itself ended non-zero, by a signal or by its timeout (a `set -e` script stops after the first
    failing call: the calls after it never happen). None: everything succeeded."""
    bad = [i for i in record.get("invocations") or [] if invocation_failed(i)]
    if bad:
        return f"{describe_invocation(bad[0])} failed"
    if record.get("timed_out"):
        return "the reproducer timed out"
    if record.get("signal"):
        return f"the reproducer died of {record['signal']}"
    if record.get("exit_code") not in (0, None):
        return f"the reproducer exited {record['exit_code']}"
    return None


def unmatched_in_failed_run(j: Judgement, record: Record) -> Judgement:
    """A per-invocation oracle that selected nothing in a run that failed is that run's failure
    (the reproducer stopped before the call, or the call never came): a problem of the verdict,
    no longer a declaration error. In a run where everything succeeded it stays `unmatched`."""
    why = stopped_after_failure(record) if j.unmatched else None
    if why is None:
        return j
    j.problems += [
        f"{k}: selected no target invocation, the run stopped: {why}" for k in j.unmatched
    ]
    j.unmatched = []
    j.holds = False
    return j


def shows_the_bug(i: Record, expect: Record) -> bool:
    """The invocation misbehaves as [expect] declares the bug (top-level or any per-invocation
    oracle, its selectors dropped: a variant changes the input, not the program): it meets every
    field of one of them, and that oracle shows a misbehaviour (a failure, or a wrong output)."""
    for o in [_fields(expect), *(_fields(e) for e in expect.get("invocation") or [])]:
        if o and not mismatches(i, o) and _misbehaves(i, o):
            return True
    return False


def post_fix_acceptable(record: Record, oracles: Record) -> tuple[bool, str]:
    """THE rule for a patched build's run (the expectation gate's post-fix side; the mutation
    gate judges each mutant's run with it: a mutant is killed when this says False). `record` is
    a trace.run/v1 record, `oracles` the candidate's {"expect": ..., "accept": ...}. A run that
    timed out, or whose target never ran, is not acceptable."""
    if not record.get("target_ran"):
        return False, "the target never ran"
    if record.get("timed_out"):
        return False, "the reproducer timed out"
    j = judge_post(list(record.get("invocations") or []), oracles.get("accept") or {})
    j = unmatched_in_failed_run(j, record)
    if j.unmatched:
        return False, "no invocation for " + ", ".join(j.unmatched)
    return j.holds, j.detail or "every target invocation is acceptable"


def failed(record: Record) -> bool:
    """Some target invocation of the run failed (exit code, signal, its own sanitizer report):
    the mutation gate's current rule (it loads this file as its `judge`)."""
    return any(invocation_failed(i) for i in record.get("invocations") or [])


def describe(record: Record) -> str:
    """One run in a few words, for the mutation gate's results."""
    if not record.get("target_ran"):
        return "target never ran"
    bad = [i for i in record.get("invocations") or [] if invocation_failed(i)]
    if bad:
        return "failed: " + describe_invocation(bad[0])
    return f"target survived ({len(record.get('invocations') or [])} invocation(s), all exit 0)"


# ---- relations between invocations (engine/oracles.py `Relation` declares them) ---------------


def _natural(i: Record) -> list[tuple[int, int | str]]:
    """Sort key of an invocation's arguments: numbers by value (page 2 before page 10)."""
    text = " ".join(str(a) for a in i.get("args") or [])
    return [(0, int(t)) if t.isdigit() else (1, t) for t in re.findall(r"\d+|\D+", text)]


def _side_text(side: Record, invs: list[Record]) -> tuple[str | None, str]:
    """A side's text (its invocations' stream in natural argument order, concatenated), or
    None with why it cannot be read (nothing selected; a stream cut or not recorded whole)."""
    picked = [i for n, i in enumerate(invs, 1) if selects(side, i, n)]
    if not picked:
        return None, "selected no target invocation"
    parts = []
    for i in sorted(picked, key=_natural):
        text = _whole_stream(i, str(side.get("stream") or "stdout"))
        if text is None:
            return None, f"{describe_invocation(i)}: its {side.get('stream')} was not kept whole"
        parts.append(text)
    return "".join(parts), f"{len(picked)} invocation(s)"


def _whole_stream(i: Record, name: str) -> str | None:
    if name == "stdin":
        rec = i.get("stdin")
        if not isinstance(rec, dict) or not rec.get("complete") or rec.get("b64") is None:
            return None
        return base64.b64decode(str(rec["b64"])).decode("utf-8", "replace")
    text = stream(i, "stdout")
    whole = hashlib.sha256(text.encode()).hexdigest() == i.get("stdout_sha256", "")
    return text if whole or "stdout_sha256" not in i else None


def _related(kind: str, a: str, b: str) -> bool:
    if kind == "permutation":
        return sorted(a.splitlines()) == sorted(b.splitlines())
    if kind == "prefix":
        return b.startswith(a)
    return a == b


def describe_relation(r: Record) -> str:
    def side(s: Record) -> str:
        sel = ", ".join(f"{k} {s[k]!r}" for k in SELECTORS if s.get(k) is not None)
        return f"{s.get('stream') or 'stdout'} of [{sel}]"

    return f"{side(r['a'])} {r['relation']} {side(r['b'])}"


def _judge_relation(r: Record, invs: list[Record], j: Judgement) -> str | bool | None:
    """How the relation is broken (a message), False when it holds, None when a side cannot be
    read (a side that selected nothing is `unmatched`, like a per-invocation oracle; a stream
    not kept whole is a problem: the relation cannot be checked on it)."""
    (a, why_a), (b, why_b) = _side_text(r["a"], invs), _side_text(r["b"], invs)
    if a is None or b is None:
        why = why_a if a is None else why_b
        if why == "selected no target invocation":
            j.unmatched.append(str(r.get("key")))
        else:
            j.problems.append(f"{r.get('key')}: cannot be checked: {why}")
        return None
    if _related(str(r["relation"]), a, b):
        return False
    diff = _first_difference(b, a) if r["relation"] == "equal" else "they are not related"
    return f"{describe_relation(r)}: {diff} ({why_a} against {why_b})"
