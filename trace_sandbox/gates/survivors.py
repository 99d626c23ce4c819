"""Survivors a reviewer can judge: possibly equivalent, or distinguished (issue 26).

A mutant that neither the reproducer nor a variant kills survives. The oracles did not catch
it; that alone does not say whether any input could. So the mutant-run step keeps evidence for
every survivor (`survivor.json`: the fuzz corpus replayed against the mutant and the post-fix
build, corpus_replay.py) and the mutation gate compares, input by input, how the mutant and the
post-fix build behaved on every input tried:

* the PoC and the good inputs: the reproducer's own target invocations (the mutant's run record
  against the first post-fix run's);
* every variant of the variants gate's plan (the PoC's and the good inputs' variants) that the
  mutant ran, against the post-fix build's run of the same variant (variant-post);
* the fuzzing gate's corpus (C targets; none for Python targets), replayed in the step.

A behaviour (`behaviour`) is how one target invocation ended: a crash (its sanitizer kind or its
fatal signal), a hang, or an exit code with the digests of its stdout and its stderr (a Python
traceback's echoed source lines left out: they show the mutated text itself, not what the
program did). Invocations are matched by call (target, arguments, occurrence).

* **distinguished**: some input tried makes the mutant behave differently from the fix, yet no
  declared oracle calls the difference wrong. The oracles have a real gap there: the record names
  the input and both behaviours (`distinguished_by`).
* **possibly equivalent**: on every input tried the mutant behaves exactly as the fix. No input
  known to trace tells them apart: the mutant may be equivalent (a page count one too high that
  only adds an empty page no call can ask for). The record lists the inputs tried.

Without the step's evidence (`survivor.json`, a record from before it) a survivor stays a plain
survivor: "possibly equivalent" is never assumed.
"""

from __future__ import annotations

import os
import re

from .modules import load_json_object

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

Record = dict[str, "Any"]  # a string: no `typing` at run time
EVIDENCE = "survivor.json"
_FRAME = re.compile(r'^\s*File ".*", line \d+')


def _stderr_text(inv: Record) -> str:
    """The invocation's stderr without a traceback's echoed source lines (and their markers)."""
    text = inv.get("stderr")
    text = text if isinstance(text, str) else str(inv.get("stderr_tail") or "")
    out: list[str] = []
    in_frame = False
    for line in text.splitlines():
        if in_frame and line.startswith("    "):
            continue
        in_frame = bool(_FRAME.match(line))
        out.append(line)
    return "\n".join(out)


def behaviour(inv: Record, timed_out: bool) -> Record:
    """One recorded target invocation's observable behaviour (see the module's docstring)."""
    san = inv.get("sanitizer")
    if isinstance(san, dict) and san:
        return {"class": "crash", "crash": f"{san.get('tool')}: {san.get('kind')}"}
    if inv.get("signal") and inv.get("ended") not in ("killed-by-harness", "timed-out"):
        return {"class": "crash", "crash": str(inv["signal"])}
    if inv.get("exit_code") is None:
        return {"class": "hang" if timed_out else "not-ended"}
    code = inv.get("exit_code")
    return {
        "class": "ok" if code == 0 else "rejects",
        "exit_code": code,
        "stdout_sha256": inv.get("stdout_sha256"),
        "stdout_tail": str(inv.get("stdout_tail") or "")[-200:],
        "stderr": _stderr_text(inv)[-300:],
    }


def _calls(record: Record) -> dict[tuple[str, tuple[str, ...], int], Record]:
    seen: dict[tuple[str, tuple[str, ...]], int] = {}
    out = {}
    for inv in record.get("invocations") or []:
        if not isinstance(inv, dict):
            continue
        call = (str(inv.get("target")), tuple(str(a) for a in inv.get("args") or ()))
        seen[call] = seen.get(call, 0) + 1
        out[(*call, seen[call])] = inv
    return out


def _key(b: Record) -> tuple[object, ...]:
    return (b["class"], b.get("crash"), b.get("exit_code"), b.get("stdout_sha256"), b.get("stderr"))


def difference(mutant: Record, post: Record) -> Record | None:
    """The first call whose behaviour differs between two runs of the same input (mutant,
    post-fix), with both behaviours; None: they behave alike."""
    mine, theirs = _calls(mutant), _calls(post)
    for call in list(theirs) + [c for c in mine if c not in theirs]:
        args = " ".join(call[1])
        here = f"{call[0]}{' ' + args if args else ''}"
        if call not in mine or call not in theirs:
            side = "the mutant" if call in mine else "the post-fix build"
            return {"call": here, "why": f"only {side} made this call"}
        a = behaviour(theirs[call], bool(post.get("timed_out")))
        b = behaviour(mine[call], bool(mutant.get("timed_out")))
        if _key(a) != _key(b):
            return {"call": here, "post_fix": a, "mutant": b}
    if bool(mutant.get("timed_out")) != bool(post.get("timed_out")):
        return {"call": "the reproducer", "why": "only one of the two runs timed out"}
    return None


def _variant_runs(run_dir: str) -> list[tuple[int, Record]]:
    root = os.path.join(run_dir, "variants")
    if not os.path.isdir(root):
        return []
    found = sorted(int(n) for n in os.listdir(root) if n.isdigit())
    return [(n, load_json_object(os.path.join(root, str(n), "outcome.json"))) for n in found]


def judge(
    run_dir: str,
    record: Record,
    post: Record | None,
    baselines: dict[int, tuple[Record, Record]],
) -> Record | None:
    """A survivor's evidence: {inputs (how many of each kind were tried), distinguished_by (the
    first input that tells it from the fix, or None: possibly equivalent)}. None: the step kept
    no evidence, or there is no post-fix run to compare with."""
    path = os.path.join(run_dir, EVIDENCE)
    if post is None or not os.path.isfile(path):
        return None
    kept = load_json_object(path).get("corpus")
    corpus: Record = kept if isinstance(kept, dict) else {}
    variants = _variant_runs(run_dir)
    inputs = {
        "reproducer_calls": len(_calls(post)),
        "variants": len(variants),
        "fuzz_corpus": int(corpus.get("tried") or 0),
    }
    found = difference(record, post)
    if found is not None:
        return {"inputs": inputs, "distinguished_by": {"input": "the reproducer", **found}}
    for index, run in variants:
        if index not in baselines:
            raise ValueError(f"{run_dir}: variant {index} has no post-fix run")
        meta, base = baselines[index]
        found = difference(run, base)
        if found is not None:
            label = f"variant {meta['id']} ({meta.get('description', '')})"
            return {"inputs": inputs, "distinguished_by": {"input": label, **found}}
    by_corpus = corpus.get("distinguished_by")
    return {"inputs": inputs, "distinguished_by": by_corpus if by_corpus else None}


def tried(inputs: Record) -> str:
    """The inputs tried, as a reviewer reads them."""
    return (
        f"the reproducer's {inputs['reproducer_calls']} call(s) (the PoC and the good inputs), "
        f"{inputs['variants']} variant(s), {inputs['fuzz_corpus']} fuzz corpus input(s)"
    )


def shown(by: Record) -> str:
    """A distinguishing input and both behaviours, in one line."""
    if "why" in by:
        return f"{by['input']}: {by.get('call', '')}: {by['why']}"
    call = by.get("call") or by.get("unit") or ""
    both = f"post-fix {_brief(by['post_fix'])}, mutant {_brief(by['mutant'])}"
    return f"{by['input']}: {call}: {both}"


def _brief(b: Record | list[Record]) -> str:
    if isinstance(b, list):
        return "; ".join(_brief(x) for x in b)
    if b["class"] == "crash":
        return f"crash ({b.get('crash')})"
    if b["class"] in ("ok", "rejects"):
        out = f"exit {b.get('exit_code')}"
        tail = str(b.get("stdout_tail") or "").strip().splitlines()[-1:]
        return out + (f", stdout …{tail[0][-60:]!r}" if tail else "")
    return str(b["class"])
