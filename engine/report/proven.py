"""What a bundle proves, one sentence each, read from its own records: how the unpatched target
failed (how, where, in K of K runs), how each invocation of the patched target behaved, and each
gate's number against its policy threshold. A gate that did not measure is `notrun` (grey), never
a pass."""

from __future__ import annotations

from collections import Counter
from typing import Any, Literal

from pydantic import BaseModel

from engine.report.lenient_json import as_dict, as_list, as_str
from engine.report.load import LoadedBundle

ProofState = Literal["ok", "bad", "notrun"]

# a `max_<x>` threshold is compared with this detail of the gate record (default: `<x>`)
MEASURED = {"max_lines": "lines_changed"}
SENTENCE = 120  # characters of a gate's summary on the first screen


class Proof(BaseModel):
    kind: Literal["pre", "post", "gate"]
    name: str
    state: ProofState
    text: str


def outcome(inv: dict[str, Any]) -> str:
    """How one target invocation ended, in words."""
    san = as_dict(inv.get("sanitizer"))
    if san:
        return f"{as_str(san.get('tool'))} {as_str(san.get('kind'))}".strip()
    if inv.get("signal"):
        return f"killed by {inv.get('signal')}"
    if inv.get("ended"):
        return as_str(inv.get("ended"))
    return f"exit {inv.get('exit_code')}"


def where(frame: Any) -> str:
    f = as_dict(frame)
    fn, file, line = as_str(f.get("function")), as_str(f.get("file")), f.get("line")
    at = f"{file}:{line}" if file and line is not None else file
    return f"{fn} ({at})" if fn and at else fn or at


def own_frame(frames: list[Any]) -> Any:
    """The first frame of the package's own code (not the sanitizer runtime, not the store)."""
    for f in map(as_dict, frames):
        fn, file = as_str(f.get("function")), as_str(f.get("file"))
        if not fn.startswith("__") and not file.startswith(("/nix/store/", "compiler-rt/")):
            return f
    return frames[0] if frames else None


def _failed(inv: dict[str, Any]) -> bool:
    if inv.get("ended") and not inv.get("sanitizer"):
        return False
    return inv.get("exit_code") not in (0, None) or bool(inv.get("signal") or inv.get("sanitizer"))


def _claim(verify: dict[str, Any], name: str) -> dict[str, Any]:
    for c in as_list(verify.get("claims")):
        if as_dict(c).get("claim") == name:
            return as_dict(c)
    return {}


def _state(claim: dict[str, Any]) -> ProofState:
    if not claim:
        return "notrun"
    return "ok" if claim.get("holds") is True else "bad"


def pre_proof(verify: dict[str, Any]) -> Proof:
    side = as_dict(verify.get("pre"))
    runs = [as_dict(r) for r in as_list(side.get("runs"))]
    claim = _claim(verify, "pre-fix-fails-as-expected")
    if not runs:
        text = "no pre-fix run recorded"
    elif side.get("build_ok") is False:
        text = "the unpatched package did not build: nothing shows the bug"
    else:
        failing = [
            i for r in runs for i in map(as_dict, as_list(r.get("invocations"))) if _failed(i)
        ]
        k = sum(1 for r in runs if any(_failed(as_dict(i)) for i in as_list(r.get("invocations"))))
        if failing:
            first = failing[0]
            at = where(own_frame(as_list(first.get("frames"))))
            text = (
                f"{as_str(first.get('target'))} failed with {outcome(first)}"
                + (f" in {at}" if at else "")
                + f", in {k} of {len(runs)} runs"
            )
        else:
            text = f"the unpatched target did not fail (0 of {len(runs)} runs)"
    if claim and claim.get("holds") is not True:
        text += f" [{as_str(claim.get('reason'))}]"
    return Proof(kind="pre", name="pre-fix", state=_state(claim), text=text)


def post_proofs(verify: dict[str, Any]) -> list[Proof]:
    side = as_dict(verify.get("post"))
    runs = [as_dict(r) for r in as_list(side.get("runs"))]
    state = _state(_claim(verify, "post-fix-survives"))
    if side.get("build_ok") is False:
        return [
            Proof(
                kind="post", name="post-fix", state="bad", text="the patched package did not build"
            )
        ]
    seen: dict[str, Counter[str]] = {}
    for r in runs:
        for inv in map(as_dict, as_list(r.get("invocations"))):
            args = " ".join(as_str(a) for a in as_list(inv.get("args")))
            call = f"{as_str(inv.get('target'))} {args}".strip()
            seen.setdefault(call, Counter())[outcome(inv)] += 1
    if not seen:
        return [
            Proof(
                kind="post",
                name="post-fix",
                state=state,
                text="no invocation of the patched target recorded",
            )
        ]
    out = []
    for call, outcomes in seen.items():
        how = ", ".join(f"{o} in {n}" for o, n in outcomes.most_common())
        out.append(
            Proof(
                kind="post", name="post-fix", state=state, text=f"{call}: {how} of {len(runs)} runs"
            )
        )
    return out


def short(text: str, limit: int = SENTENCE) -> str:
    """One line of at most `limit` characters (the gate record has the whole summary)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _number(value: Any) -> str:
    return (
        f"{value:g}"
        if isinstance(value, int | float) and not isinstance(value, bool)
        else as_str(value)
    )


def gate_proof(rec: dict[str, Any]) -> Proof:
    name = as_str(rec.get("gate")) or "gate"
    details = as_dict(rec.get("details"))
    limits = as_dict(as_dict(details.get("policy")).get("thresholds"))
    parts = []
    for key, bound in limits.items():
        if key.startswith("min_") and rec.get("score") is not None:
            parts.append(f"score {_number(rec.get('score'))} against {key} {_number(bound)}")
        elif key.startswith("max_"):
            got = details.get(MEASURED.get(key, key[4:]))
            parts.append(
                f"{_number(got)} of {key} {_number(bound)}"
                if got is not None
                else f"{key} {_number(bound)}"
            )
    if not parts and rec.get("score") is not None:
        parts.append(f"score {_number(rec.get('score'))}")
    summary = short(as_str(details.get("summary")))
    text = "; ".join(parts + ([summary] if summary else []))
    codes = [as_str(c) for c in as_list(rec.get("reasons"))]
    if rec.get("measurable") is False:
        state: ProofState = "notrun"
        text = text or "not measurable"
    else:
        state = "ok" if rec.get("passed") is True else "bad"
    if codes:
        text += f" [{', '.join(codes)}]"
    return Proof(
        kind="gate", name=name, state=state, text=text or ("passed" if state == "ok" else "failed")
    )


def proofs(b: LoadedBundle) -> list[Proof]:
    verify = as_dict(b.doc("verify-result.json"))
    gates = [as_dict(link.doc) for link in b.under("gates/")]
    skip = {"expectation"}  # its claims are the pre-fix and post-fix sentences
    return [
        pre_proof(verify),
        *post_proofs(verify),
        *(gate_proof(g) for g in gates if g and as_str(g.get("gate")) not in skip),
    ]
