"""The claim stack of one bundle, in the order a reviewer audits it, as data for the template.

advisory → upstream reference → diff and rationale → review → reproducer runs (pre and post side
by side) → gates → routing and signing decision → replay record → signature; then the step graph,
the timings, an accuracy comparison when the bundle has one, and every other file.

Records are read as plain JSON (dicts), not through the engine's pydantic models: a report must
show a bundle written by another trace version, or a forged one, rather than refuse it, and
gate records grow new fields while the page stays generic (the template renders any value).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from engine.bundle_verify.signature import Check
from engine.report.diff import coverage_map, diff_rows
from engine.report.layout import Layout, layered
from engine.report.load import Link, LoadedBundle

FRAME = re.compile(r"^\s*#(\d+)\s+(0x\S+)\s+in\s+(\S+)\s*(.*)$")
SUMMARY = re.compile(r"^SUMMARY: (.*)$", re.MULTILINE)


class Section(BaseModel):
    """One link of the claim stack: its files, the checks that vouch for it, and its data."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    id: str
    title: str
    links: list[Link]
    checks: list[Check] = []
    data: dict[str, Any] = {}
    present: bool = True

    @property
    def ok(self) -> bool:
        return all(link.ok for link in self.links) and all(c.ok for c in self.checks)


class ReportView(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    bundle: LoadedBundle
    candidate: str
    package: str
    sections: list[Section]
    graph: Layout | None
    timings: dict[str, str]
    others: list[Link]


def frames(text: str) -> list[list[dict[str, str]]]:
    """Sanitizer stack frames (`#N 0xADDR in func file:line`) of an output tail, one list per
    stack (a stack starts again at #0; a tail cut inside a stack starts with a later frame)."""
    stacks: list[list[dict[str, str]]] = []
    for line in text.splitlines():
        m = FRAME.match(line)
        if m:
            if not stacks or m.group(1) == "0":
                stacks.append([])
            stacks[-1].append({"n": m.group(1), "function": m.group(3), "where": m.group(4)})
    return stacks


def _dict(v: Any) -> dict[str, Any]:
    return dict(v) if isinstance(v, Mapping) else {}


def _list(v: Any) -> list[Any]:
    return list(v) if isinstance(v, list) else []


def _run_view(record: Any) -> dict[str, Any]:
    r = _dict(record)
    invocations = []
    for inv in _list(r.get("invocations")):
        i = _dict(inv)
        err = str(i.get("stderr_tail") or "")
        invocations.append({**i, "frames": frames(err), "summary": SUMMARY.findall(err)})
    err = str(r.get("stderr_tail") or "")
    return {**r, "invocations": invocations, "frames": frames(err)}


def _runs(b: LoadedBundle) -> dict[str, Any]:
    verify = _dict(b.doc("verify-result.json"))
    pairs = []
    pre = [_run_view(x) for x in _list(_dict(verify.get("pre")).get("runs"))]
    post = [_run_view(x) for x in _list(_dict(verify.get("post")).get("runs"))]
    for i in range(max(len(pre), len(post))):
        pairs.append((pre[i] if i < len(pre) else None, post[i] if i < len(post) else None))
    return {
        "verify": verify,
        "claims": [_dict(c) for c in _list(verify.get("claims"))],
        "pairs": pairs,
        "sides": {s: _dict(verify.get(s)) for s in ("pre", "post")},
    }


def _gates(b: LoadedBundle) -> list[dict[str, Any]]:
    out = []
    for link in b.under("gates/"):
        rec = _dict(link.doc)
        details = _dict(rec.get("details"))
        survivors = [_dict(s) for s in _list(details.get("survivors"))]
        view: dict[str, Any] = {
            "link": link,
            "record": rec,
            # what is drawn richly above is not repeated in the generic table
            "details": {k: v for k, v in details.items() if not (k == "survivors" and survivors)},
            "survivors": [{**s, "rows": diff_rows(str(s.get("diff") or ""))} for s in survivors],
        }
        if coverage_map(rec):
            view["coverage"] = True
        out.append(view)
    return out


def _patches(b: LoadedBundle) -> list[dict[str, Any]]:
    cov: dict[str, Any] = {}
    for link in b.under("gates/"):
        if _dict(link.doc).get("gate") == "coverage":
            cov = coverage_map(link.doc)
    return [
        {"link": link, "rows": diff_rows(link.text or "", cov), "coverage": bool(cov)}
        for link in b.under("patches/")
    ]


def _graph(b: LoadedBundle, verify: Mapping[str, Any]) -> Layout | None:
    steps = _dict(verify.get("steps"))
    pins = _dict(_dict(b.doc("replay.json")).get("steps"))
    ids = sorted(set(steps) | set(pins))
    if not ids:
        return None
    nodes = {}
    edges = []
    for sid in ids:
        status = str(_dict(steps.get(sid)).get("status") or "recorded")
        if _dict(steps.get(sid)).get("deterministic") is False:
            status = "nondeterministic"
        key = str(_dict(pins.get(sid)).get("key") or _dict(steps.get(sid)).get("key") or "")
        nodes[sid] = (f"{status} {key[:12]}".strip(), status)
        edges += [(str(n), sid) for n in _list(_dict(pins.get(sid)).get("needs"))]
    return layered(nodes, edges)


def _fix_refs(b: LoadedBundle) -> list[str]:
    """The advisory's own FIX references (what grounds the upstream reference)."""
    refs = _list(_dict(b.doc("advisory.json")).get("references"))
    return [str(_dict(r).get("url")) for r in refs if _dict(r).get("type") == "FIX"]


def _timings(statement: Any) -> dict[str, str]:
    meta = _dict(_dict(_dict(_dict(statement).get("predicate")).get("runDetails")).get("metadata"))
    out: dict[str, str] = {k: str(meta[k]) for k in ("startedOn", "finishedOn") if k in meta}
    if len(out) == 2:
        import datetime as dt

        try:
            start = dt.datetime.fromisoformat(out["startedOn"].replace("Z", "+00:00"))
            end = dt.datetime.fromisoformat(out["finishedOn"].replace("Z", "+00:00"))
            out["duration"] = f"{(end - start).total_seconds():.1f} s"
        except ValueError:
            pass
    return out


def _signature(b: LoadedBundle) -> dict[str, Any]:
    sig = _dict(b.signature)
    material = _dict(sig.get("verificationMaterial"))
    tlog = [_dict(e) for e in _list(material.get("tlogEntries"))]
    return {
        "mode": b.verdict.mode,
        "signer": b.verdict.signer,
        "media_type": sig.get("mediaType"),
        "key_hint": _dict(material.get("publicKey")).get("hint"),
        "has_certificate": bool(
            material.get("certificate") or material.get("x509CertificateChain")
        ),
        "tlog": [
            {
                "log_index": e.get("logIndex"),
                "log_id": _dict(e.get("logId")).get("keyId"),
                "integrated_time": e.get("integratedTime"),
                "kind": _dict(e.get("kindVersion")).get("kind"),
            }
            for e in tlog
        ],
        "present": b.signature is not None,
    }


def build_view(b: LoadedBundle) -> ReportView:
    runs = _runs(b)
    verify = runs["verify"]
    shown: set[str] = set()

    def links(*paths: str, prefix: tuple[str, ...] = ()) -> list[Link]:
        found = [b.links[p] for p in paths if p in b.links]
        for pre in prefix:
            found += b.under(pre)
        shown.update(link.path for link in found)
        return found

    signing = _dict(b.doc("decisions/signing.json"))
    # the template iterates these (waivers and ignored waivers: the audit table)
    for key in ("reasons", "warnings", "waived", "waivers", "ignored_waivers"):
        signing[key] = [_dict(r) for r in _list(signing.get(key))]
    routing = _dict(b.doc("decisions/routing.json"))
    sections = [
        Section(
            id="advisory",
            title="Advisory",
            links=links("advisory.json"),
            data={"doc": _dict(b.doc("advisory.json"))},
        ),
        Section(
            id="upstream",
            title="Upstream reference",
            links=links("upstream.json"),
            data={"doc": _dict(b.doc("upstream.json")), "fix_refs": _fix_refs(b)},
        ),
        Section(
            id="patch",
            title="Diff and rationale",
            links=links("rationale.md", prefix=("patches/",)),
            data={"patches": _patches(b), "rationale": b.get("rationale.md")},
        ),
        Section(
            id="review",
            title="Review",
            links=links("review.md"),
            data={"review": b.get("review.md")},
            present="review.md" in b.links,
        ),
        Section(
            id="runs",
            title="Reproducer runs: pre-fix and post-fix",
            links=links("verify-result.json", prefix=("reproducer/", "outcomes/")),
            checks=b.checks_for("runs"),
            data=runs,
        ),
        Section(
            id="gates",
            title="Gates",
            links=links(prefix=("gates/",)),
            checks=b.checks_for("gates"),
            data={"gates": _gates(b)},
        ),
        Section(
            id="decision",
            title="Routing and signing decision",
            links=links(
                "decisions/routing.json",
                "decisions/signing.json",
                "policy/maintainers.toml",
                prefix=("waivers/",),
            ),
            checks=b.checks_for("decision"),
            data={"signing": signing, "routing": routing},
        ),
        Section(
            id="replay",
            title="Replay record",
            links=links("replay.json"),
            checks=b.checks_for("replay"),
            data={"doc": _dict(b.doc("replay.json"))},
        ),
        Section(
            id="signature",
            title="Signature",
            links=[],
            checks=b.checks_for("signature"),
            data=_signature(b),
        ),
    ]
    accuracy = [link for link in b.links.values() if link.kind == "accuracy"]
    accuracy += [
        b.links[p] for p in ("accuracy.json",) if p in b.links and b.links[p] not in accuracy
    ]
    if accuracy:
        sections.append(
            Section(
                id="accuracy",
                title="Accuracy against the human fix",
                links=links(*(a.path for a in accuracy)),
                data={
                    "docs": [
                        (a, a.doc, diff_rows(str(_dict(a.doc).get("diff") or ""))) for a in accuracy
                    ]
                },
            )
        )
    candidate = str(signing.get("candidate") or verify.get("candidate") or "unknown candidate")
    return ReportView(
        bundle=b,
        candidate=candidate,
        package=str(verify.get("package") or _dict(routing.get("facts")).get("package") or ""),
        sections=sections,
        graph=_graph(b, verify),
        timings=_timings(b.statement),
        others=[link for p, link in sorted(b.links.items()) if p not in shown],
    )
