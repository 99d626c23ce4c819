"""The differential gate: the candidate against the upstream fix, input by input.

When the candidate names the upstream fix (`[advisory] upstream_patches`), the pipeline builds a
third side, the unpatched package with the upstream fix, and runs on it what it runs on the other
two: the reproducer (the PoC) and every variant of the variants gate's plan (the PoC's variants
and the good inputs'). This gate compares, for every target invocation of every one of those
runs, how the three builds behaved:

* a behaviour is the invocation's class (`crash`: a fatal signal or a sanitizer report; `hang`:
  the run timed out; `rejects`: a non-zero exit; `ok`: exit 0) and, for `ok` and `rejects`, the
  digest of its stdout (what a wrong-output bug gets wrong);
* **misses the upstream behaviour** (`differential.misses-upstream-fix`, a finding that cannot be
  waived): on this input the upstream fix changed what the unpatched build does, and the
  candidate still does exactly what the unpatched build did. The bug the upstream fix removes is
  still there for that input, whatever the PoC says;
* **differs** (`differential.differs`, waivable: an alternative fix may reject differently): the
  candidate behaves unlike the upstream fix in another way (it changed what the upstream fix
  kept, or changed it differently). A reviewer reads the input and the three behaviours.

Without a named upstream fix the third side is the unpatched build itself (the same derivation,
so nothing extra is built) and the gate is not measurable: that is no finding and no pass. The
gate never reads a reproducer's own exit or account: only the harness's per-invocation records.
"""

from __future__ import annotations

import json
import os

from .codes import gate_record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

SHOWN = 20  # findings listed in full; the rest are counted


def behaviour(inv: dict[str, Any], timed_out: bool) -> dict[str, Any]:
    """One target invocation's observable behaviour, as the three sides are compared."""
    if inv.get("signal") or inv.get("sanitizer"):
        cls = "crash"
    elif timed_out and inv.get("exit_code") is None:
        cls = "hang"
    elif inv.get("exit_code") == 0:
        cls = "ok"
    else:
        cls = "rejects"
    out: dict[str, Any] = {"class": cls}
    if cls in ("ok", "rejects"):
        out["stdout_sha256"] = inv.get("stdout_sha256")
        out["stdout_tail"] = str(inv.get("stdout_tail") or "")[-200:]
    if cls == "rejects":
        out["exit_code"] = inv.get("exit_code")
    if cls == "crash":
        out["crash"] = inv.get("sanitizer") or inv.get("signal")
    return out


def _key(b: dict[str, Any]) -> tuple[object, ...]:
    """What makes two behaviours the same: the class and the output (not a rejection's code)."""
    return (b["class"], b.get("stdout_sha256"))


def behaviours(record: dict[str, Any]) -> list[dict[str, Any]]:
    timed_out = bool(record.get("timed_out"))
    invs = record.get("invocations") or []
    return [behaviour(inv, timed_out) for inv in invs if isinstance(inv, dict)]


def compare(
    label: str, pre: dict[str, Any], post: dict[str, Any], up: dict[str, Any]
) -> list[dict[str, Any]]:
    """Findings for one input (a run record per side): one per invocation that differs."""
    sides = [behaviours(r) for r in (pre, post, up)]
    found: list[dict[str, Any]] = []
    for i in range(max(len(s) for s in sides)):
        b = [s[i] if i < len(s) else {"class": "not-run"} for s in sides]
        if _key(b[1]) == _key(b[2]):
            continue
        misses = _key(b[1]) == _key(b[0]) and _key(b[2]) != _key(b[0])
        if not misses and b[0]["class"] == b[1]["class"] == b[2]["class"] == "ok":
            misses = bool(_lines_missed(*(_stdout(r, i) for r in (pre, post, up))))
        args = _args(post, up, i)
        found.append(
            {
                "rule": "differential.misses-upstream-fix" if misses else "differential.differs",
                "input": label,
                "invocation": i,
                "args": args,
                "pre_fix": b[0],
                "post_fix": b[1],
                "upstream_fix": b[2],
            }
        )
    return found


def _stdout(record: dict[str, Any], i: int) -> str | None:
    invs = record.get("invocations") or []
    if i < len(invs) and isinstance(invs[i], dict) and isinstance(invs[i].get("stdout"), str):
        return str(invs[i]["stdout"])
    return None


def _lines_missed(pre: str | None, post: str | None, up: str | None) -> list[int]:
    """Output lines the upstream fix changed and the candidate left as the unpatched build
    printed them (outputs of the same number of lines only: a wrong-output bug in one record
    of many still shows, though the other records make the whole outputs differ)."""
    if pre is None or post is None or up is None:
        return []
    a, b, c = (t.splitlines() for t in (pre, post, up))
    if not len(a) == len(b) == len(c):
        return []
    return [n for n, (x, y, z) in enumerate(zip(a, b, c, strict=True)) if z != x and y == x]


def _args(post: dict[str, Any], up: dict[str, Any], i: int) -> list[str]:
    for rec in (post, up):
        invs = rec.get("invocations") or []
        if i < len(invs) and isinstance(invs[i], dict):
            return [str(a) for a in invs[i].get("args") or []]
    return []


def _load(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        doc: dict[str, Any] = json.load(fh)
    return doc


def _variant_runs(batch: str) -> dict[str, dict[str, Any]]:
    """variant id -> its run record, from one side's variant-runs step output."""
    doc = _load(os.path.join(batch, "outcome.json"))
    runs = [r for r in doc.get("runs") or [] if isinstance(r.get("outcome"), dict)]
    return {str(r["id"]): r["outcome"] for r in runs}


def findings(cfg: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
    """Every finding over the PoC's runs and the variants, and how many inputs were compared."""
    out: list[dict[str, Any]] = []
    # the upstream side runs the reproducer once: each side's first run is compared
    sides = [cfg.get(k) or [] for k in ("pre_runs", "post_runs", "up_runs")]
    runs = zip(*sides, strict=False)
    compared = 0
    for n, (pre, post, up) in enumerate(runs, start=1):
        recs = [_load(os.path.join(p, "outcome.json")) for p in (pre, post, up)]
        out += compare(f"the reproducer (run {n})", *recs)
        compared += 1
    batches = [_variant_runs(cfg[k]) for k in ("pre_variants", "post_variants", "up_variants")]
    for vid in sorted(set(batches[1]) & set(batches[2])):
        pre = batches[0].get(vid, {})
        out += compare(f"variant {vid}", pre, batches[1][vid], batches[2][vid])
        compared += 1
    return out, compared


def evaluate(cfg: dict[str, Any]) -> dict[str, object]:
    """cfg: named (is an upstream fix named), pre_runs/post_runs/up_runs (reproducer run step
    outputs, one each per run), pre_variants/post_variants/up_variants (variant-runs outputs)."""
    if not cfg.get("named"):
        details: dict[str, object] = {
            "summary": "not measurable: the candidate names no upstream fix "
            "([advisory] upstream_patches), so there is no second implementation to compare with"
        }
        return gate_record("differential", [], measurable=False, score=None, details=details)
    found, compared = findings(cfg)
    rules = sorted({f["rule"] for f in found})
    misses = [f for f in found if f["rule"] == "differential.misses-upstream-fix"]
    summary = (
        f"the candidate behaves as the upstream fix on all {compared} inputs compared"
        if not found
        else f"{len(found)} invocation(s) behave unlike the upstream fix "
        f"({len(misses)} still as the unpatched build did); first: {_say(found[0])}"
    )
    details = {
        "summary": summary,
        "compared": compared,
        "differences": len(found),
        "misses_upstream_fix": len(misses),
        "findings": (misses + [f for f in found if f not in misses])[:SHOWN],
    }
    return gate_record("differential", rules, measurable=True, score=None, details=details)


def _say(f: dict[str, Any]) -> str:
    def one(b: dict[str, Any]) -> str:
        extra = b.get("crash") or b.get("exit_code")
        text = str(b["class"]) + (f" ({extra})" if extra not in (None, "") else "")
        tail = str(b.get("stdout_tail") or "").strip().splitlines()
        return text + (f", stdout ends {tail[-1][:60]!r}" if tail else "")

    args = " ".join(f["args"])
    return (
        f"{f['input']}, invocation {f['invocation']} ({args}): candidate {one(f['post_fix'])}; "
        f"upstream fix {one(f['upstream_fix'])}; unpatched {one(f['pre_fix'])}"
    )
