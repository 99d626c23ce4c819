"""The findings page of many bundles (`trace fork --report DIR`, `trace report --findings DIR`).

Each bundle is checked with verify_bundle and gets its own report page beside the index; a row
of the index reads the bundle's own records (routing state, signing decision and its reason
codes, the verify verdict, an accuracy record when there is one) and the verdict (signed, by
whom, verifies or not). Candidates that produced no bundle (an error) are rows too. Sorting and
filtering run in the page's inline script (templates/report/findings.js): no server, no network.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel

from engine.audit.checks import BundleVerdict
from engine.report.jinja_env import render_page, write_page
from engine.report.load import load_bundle
from engine.report.page import render_report
from engine.report.view import build_view

Verify = Callable[[Path], BundleVerdict]


class Finding(BaseModel):
    candidate: str
    package: str = ""
    routing: str = ""
    decision: str = "none"
    reasons: list[str] = []
    verified: str = ""  # the verify claims: holds / fails
    verify_reasons: list[str] = []
    signed: str = "no"
    signer: str = ""
    bundle_ok: bool = False
    bundle_reasons: list[str] = []
    integrity: str = ""  # verified / amber / red (engine.report.verdict.integrity)
    integrity_label: str = ""
    accuracy: str = ""
    report: str | None = None  # relative link to the candidate's page
    note: str = ""


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _accuracy(view_docs: Iterable[Any]) -> str:
    for doc in view_docs:
        d = _dict(doc)
        if "summary" in d:  # trace.accuracy/v1 (engine.roles.compare)
            from engine.roles.compare import recorded_summary

            return "; ".join(recorded_summary(d))
        for key in ("verdict", "score", "similarity"):
            if key in d:
                return f"{key}: {d[key]}"
        if d:
            return "recorded"
    return ""


def page_name(candidate: str, taken: set[str]) -> str:
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", candidate) or "candidate"
    name, n = f"{base}.html", 1
    while name in taken or name == "index.html":
        n += 1
        name = f"{base}-{n}.html"
    taken.add(name)
    return name


def finding_for(bundle: Path, verdict: BundleVerdict, out: Path, taken: set[str]) -> Finding:
    """Write the bundle's own page into `out` and return its row."""
    loaded = load_bundle(bundle, verdict)
    view = build_view(loaded)
    name = page_name(view.candidate, taken)
    write_page(out / name, render_report(view))
    signing = _dict(loaded.doc("decisions/signing.json"))
    routing = _dict(loaded.doc("decisions/routing.json"))
    verify = _dict(loaded.doc("verify-result.json"))
    reasons = [str(_dict(r).get("code", "")) for r in signing.get("reasons") or []]
    passed = verify.get("passed")
    accuracy = [link.doc for link in loaded.links.values() if link.kind == "accuracy"]
    accuracy += [loaded.doc("accuracy.json")] if "accuracy.json" in loaded.links else []
    return Finding(
        candidate=view.candidate,
        package=view.package,
        routing=str(routing.get("state") or ""),
        decision=str(signing.get("decision") or "none"),
        reasons=[r for r in reasons if r],
        verified="holds" if passed is True else "fails" if passed is False else "",
        verify_reasons=[str(r) for r in verify.get("reasons") or []],
        signed=verdict.mode if verdict.mode in ("key", "keyless") else "no",
        signer=", ".join(
            f"{k} {v if len(v) <= 40 else v[:16] + '…'}"
            for k, v in sorted(verdict.signer.items())
            if v and k != "mode"
        ),
        bundle_ok=verdict.passed,
        bundle_reasons=verdict.reasons,
        integrity=view.verdict.integrity.state,
        integrity_label=view.verdict.integrity.label,
        accuracy=_accuracy(accuracy),
        report=name,
    )


def write_findings(
    out: Path,
    bundles: Iterable[Path],
    verify: Verify,
    *,
    errors: Iterable[tuple[str, str]] = (),
    title: str = "trace findings",
) -> Path:
    """Write OUT/index.html and one page per bundle; `errors`: (candidate, message) rows for
    candidates without a bundle. Returns the index page."""
    out.mkdir(parents=True, exist_ok=True)
    taken: set[str] = set()
    rows = [finding_for(b, verify(b), out, taken) for b in bundles]
    rows += [Finding(candidate=c, decision="error", note=msg) for c, msg in errors]
    rows.sort(key=lambda f: f.candidate)
    index = out / "index.html"
    write_page(index, render_page("findings.html.j2", script="findings.js", rows=rows, title=title))
    return index


class ForkRow(Protocol):
    candidate: str
    bundle: str | None
    note: str


def fork_findings(
    out: Path, rows: Sequence[ForkRow], policy_dir: Path, key: Path | None = None
) -> Path:
    """`trace fork --report DIR`: the findings of one fork run. Bundles are checked against the
    run's merged policy directory (its signing-identity.json and policy files), and, when the
    run signed with a local key, that key's public half (KEY.pub, as `trace keygen` writes)."""
    from engine.audit.checks import verify_bundle
    from engine.audit.identity import load_identity_policy
    from engine.paths import data_dir
    from engine.signing.keys import key_hint, load_public_key

    identity = policy_dir / "signing-identity.json"
    if not identity.is_file():
        identity = data_dir() / "policy" / "signing-identity.json"
    policy = load_identity_policy(identity)
    keys = {}
    pub = Path(f"{key}.pub") if key is not None else None
    if pub is not None and pub.is_file():
        k = load_public_key(pub)
        keys[key_hint(k)] = k

    def verify(bundle: Path) -> BundleVerdict:
        return verify_bundle(bundle, policy, extra_keys=keys)

    return write_findings(
        out,
        [Path(r.bundle) for r in rows if r.bundle],
        verify,
        errors=[(r.candidate, r.note or "no bundle") for r in rows if not r.bundle],
        title="trace fork: findings",
    )
