"""The data of each link of the claim stack, read from the bundle's records for the template:
runs side by side (with their full stacks), gate records, patches with coverage marks, the step
graph's layout, the signature and the run's timings."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from engine.report.diff import coverage_map, diff_rows
from engine.report.layout import Layout, layered
from engine.report.lenient_json import as_dict, as_list, as_str
from engine.report.load import LoadedBundle
from engine.report.spans import span_rows
from engine.report.stacks import SUMMARY, Patched, invocation_stacks, tail_stacks


def _run_view(record: Any, marks: Patched) -> dict[str, Any]:
    r = as_dict(record)
    invocations = []
    for inv in map(as_dict, as_list(r.get("invocations"))):
        err = as_str(inv.get("stderr_tail"))
        invocations.append(
            {
                **inv,
                "stacks": invocation_stacks(inv, marks),
                "summary": SUMMARY.findall(err),
                "span_rows": span_rows(inv),
            }
        )
    return {
        **r,
        "invocations": invocations,
        "stacks": tail_stacks(as_str(r.get("stderr_tail")), marks),
    }


def runs(b: LoadedBundle, marks: Patched) -> dict[str, Any]:
    verify = as_dict(b.doc("verify-result.json"))
    pre = [_run_view(x, marks) for x in as_list(as_dict(verify.get("pre")).get("runs"))]
    post = [_run_view(x, marks) for x in as_list(as_dict(verify.get("post")).get("runs"))]
    pairs = [
        (pre[i] if i < len(pre) else None, post[i] if i < len(post) else None)
        for i in range(max(len(pre), len(post)))
    ]
    return {
        "verify": verify,
        "claims": [as_dict(c) for c in as_list(verify.get("claims"))],
        "pairs": pairs,
        "sides": {s: as_dict(verify.get(s)) for s in ("pre", "post")},
    }


def gates(b: LoadedBundle) -> list[dict[str, Any]]:
    out = []
    for link in b.under("gates/"):
        rec = as_dict(link.doc)
        details = as_dict(rec.get("details"))
        survivors = [as_dict(s) for s in as_list(details.get("survivors"))]
        view: dict[str, Any] = {
            "link": link,
            "record": rec,
            # what is drawn richly above is not repeated in the generic table
            "details": {k: v for k, v in details.items() if not (k == "survivors" and survivors)},
            "survivors": [{**s, "rows": diff_rows(as_str(s.get("diff")))} for s in survivors],
        }
        if coverage_map(rec):
            view["coverage"] = True
        out.append(view)
    return out


def patches(b: LoadedBundle) -> list[dict[str, Any]]:
    cov: dict[str, Any] = {}
    for link in b.under("gates/"):
        if as_dict(link.doc).get("gate") == "coverage":
            cov = coverage_map(link.doc)
    return [
        {"link": link, "rows": diff_rows(link.text or "", cov), "coverage": bool(cov)}
        for link in b.under("patches/")
    ]


def graph(b: LoadedBundle, verify: Mapping[str, Any]) -> Layout | None:
    steps = as_dict(verify.get("steps"))
    pins = as_dict(as_dict(b.doc("replay.json")).get("steps"))
    ids = sorted(set(steps) | set(pins))
    if not ids:
        return None
    nodes = {}
    edges = []
    for sid in ids:
        step = as_dict(steps.get(sid))
        status = as_str(step.get("status") or "recorded")
        if step.get("deterministic") is False:
            status = "nondeterministic"
        key = as_str(as_dict(pins.get(sid)).get("key") or step.get("key"))
        nodes[sid] = (f"{status} {key[:12]}".strip(), status)
        edges += [(as_str(n), sid) for n in as_list(as_dict(pins.get(sid)).get("needs"))]
    return layered(nodes, edges)


def fix_refs(b: LoadedBundle) -> list[str]:
    """The advisory's own FIX references (what grounds the upstream reference)."""
    refs = as_list(as_dict(b.doc("advisory.json")).get("references"))
    return [as_str(as_dict(r).get("url")) for r in refs if as_dict(r).get("type") == "FIX"]


def timings(statement: Any) -> dict[str, str]:
    meta = as_dict(
        as_dict(as_dict(as_dict(statement).get("predicate")).get("runDetails")).get("metadata")
    )
    out: dict[str, str] = {k: str(meta[k]) for k in ("startedOn", "finishedOn") if k in meta}
    if len(out) == 2:
        try:
            start = dt.datetime.fromisoformat(out["startedOn"].replace("Z", "+00:00"))
            end = dt.datetime.fromisoformat(out["finishedOn"].replace("Z", "+00:00"))
            out["duration"] = f"{(end - start).total_seconds():.1f} s"
        except ValueError:
            pass
    return out


def signature(b: LoadedBundle) -> dict[str, Any]:
    sig = as_dict(b.signature)
    material = as_dict(sig.get("verificationMaterial"))
    tlog = [as_dict(e) for e in as_list(material.get("tlogEntries"))]
    return {
        "mode": b.verdict.mode,
        "signer": b.verdict.signer,
        "media_type": sig.get("mediaType"),
        "key_hint": as_dict(material.get("publicKey")).get("hint"),
        "has_certificate": bool(
            material.get("certificate") or material.get("x509CertificateChain")
        ),
        "tlog": [
            {
                "log_index": e.get("logIndex"),
                "log_id": as_dict(e.get("logId")).get("keyId"),
                "integrated_time": e.get("integratedTime"),
                "kind": as_dict(e.get("kindVersion")).get("kind"),
            }
            for e in tlog
        ],
        "present": b.signature is not None,
    }


def signing(b: LoadedBundle) -> dict[str, Any]:
    doc = as_dict(b.doc("decisions/signing.json"))
    # the template iterates these (waivers and ignored waivers: the audit table)
    for key in ("reasons", "warnings", "waived", "waivers", "ignored_waivers"):
        doc[key] = [as_dict(r) for r in as_list(doc.get(key))]
    return doc
