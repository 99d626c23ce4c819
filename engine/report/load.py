"""A bundle read for reporting: every payload file as a link with its own digest status, plus the
verdict of `trace verify-bundle` (engine.audit.checks.verify_bundle, called, never
re-implemented).

Nothing here trusts the files: each is read as bytes, decoded leniently and parsed as JSON only
to be shown; a file that does not parse is shown as text. A link's status comes from its sha256
against the statement's subject (the same helpers verify_bundle uses), and each section of the
page also shows the verify-bundle checks that vouch for it (SECTION_CHECKS).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from engine.audit.checks import BundleVerdict, _payload_files, _sha256
from engine.audit.signature import Check
from engine.evidence import PAYLOAD_DIR, SIGNATURE_FILE, STATEMENT_FILE
from engine.evidence.bundle import INDEX_PATH

LinkStatus = Literal["verified", "changed", "missing", "unlisted", "unchecked"]
MAX_TEXT = 200_000  # characters of one file shown on the page

# Which verify-bundle checks vouch for which section of the page (by check name; a check not
# named here is shown in the verification panel only).
SECTION_CHECKS: dict[str, tuple[str, ...]] = {
    "runs": ("records agree", "verify verdict", "replay"),
    "gates": ("records agree",),
    "decision": (
        "signing decision",
        "decision evidence",
        "signing decision re-run",
        "policy versions",
        "policy digests",
        "signed waivers",
    ),
    "replay": ("replay", "replay pins"),
    "signature": (
        "signature",
        "DSSE signature",
        "certificate, SCT, transparency log",
        "log time within certificate validity",
        "signer identity",
        "payload type",
        "signed statement",
        "statement.json is the signed statement",
        "statement",
    ),
}


# ...and, whatever a check is called, a failing one by the area of its reason code.
SECTION_REASONS: dict[str, tuple[str, ...]] = {
    "runs": ("records.", "verify.", "replay."),
    "decision": ("decision.", "policy.", "waiver."),
    "replay": ("replay.",),
    "signature": ("signature.", "identity.", "bundle.unsigned", "payload.", "statement."),
}


class Link(BaseModel):
    """One payload file: what the statement says about it and what is on disk."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    path: str
    kind: str = "other"
    expected: str | None = None
    actual: str | None = None
    status: LinkStatus = "unchecked"
    text: str | None = None
    truncated: bool = False
    doc: Any = None

    @property
    def ok(self) -> bool:
        return self.status == "verified"


class LoadedBundle(BaseModel):
    directory: str
    verdict: BundleVerdict
    links: dict[str, Link]
    statement: Any = None
    signature: Any = None

    def get(self, path: str) -> Link | None:
        return self.links.get(path)

    def doc(self, path: str) -> Any:
        link = self.links.get(path)
        return link.doc if link is not None else None

    def under(self, prefix: str) -> list[Link]:
        return [link for p, link in sorted(self.links.items()) if p.startswith(prefix)]

    def checks_for(self, section: str) -> list[Check]:
        names = SECTION_CHECKS.get(section, ())
        areas = SECTION_REASONS.get(section, ())
        return [
            c
            for c in self.verdict.checks
            if c.name in names or (not c.ok and c.reason and c.reason.startswith(areas))
        ]


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None


def _subjects(statement: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    subjects = statement.get("subject") if isinstance(statement, dict) else None
    for s in subjects if isinstance(subjects, list) else []:
        if isinstance(s, dict) and isinstance(s.get("name"), str):
            digest = s.get("digest")
            sha = digest.get("sha256") if isinstance(digest, dict) else None
            out[s["name"]] = sha if isinstance(sha, str) else ""
    return out


def _signed_statement(signature: Any) -> Any:
    """The statement inside the DSSE envelope (what verify_bundle checks digests against)."""
    import base64

    env = signature.get("dsseEnvelope") if isinstance(signature, dict) else None
    payload = env.get("payload") if isinstance(env, dict) else None
    if not isinstance(payload, str):
        return None
    try:
        return json.loads(base64.b64decode(payload, validate=True))
    except (ValueError, RecursionError):
        return None


def _content(path: Path) -> tuple[str, bool, Any]:
    raw = path.read_bytes()
    text = raw.decode("utf-8", errors="replace")
    doc: Any = None
    if path.suffix == ".json":
        try:
            doc = json.loads(raw)
        except (ValueError, RecursionError):  # a forged file: shown as text
            doc = None
    return text[:MAX_TEXT], len(text) > MAX_TEXT, doc


def load_bundle(directory: Path, verdict: BundleVerdict) -> LoadedBundle:
    """Every payload file with its digest status. `verdict` is verify_bundle's for `directory`."""
    signature = _read_json(directory / SIGNATURE_FILE)
    statement = _signed_statement(signature) or _read_json(directory / STATEMENT_FILE)
    subjects = _subjects(statement)
    payload = directory / PAYLOAD_DIR
    files, odd = (
        _payload_files(payload) if payload.is_dir() and not payload.is_symlink() else ({}, [])
    )
    index_doc = _read_json(files[INDEX_PATH]) if INDEX_PATH in files else None
    index = index_doc.get("files") if isinstance(index_doc, dict) else None
    kinds = {
        p: str(v.get("kind", "other"))
        for p, v in (index.items() if isinstance(index, dict) else [])
        if isinstance(v, dict)
    }
    links: dict[str, Link] = {}
    for rel, path in sorted(files.items()):
        actual = _sha256(path)
        expected = subjects.get(rel)
        if expected is None:
            status: LinkStatus = "unlisted"
        else:
            status = "verified" if actual == expected else "changed"
        text, truncated, doc = _content(path)
        links[rel] = Link(
            path=rel,
            kind=kinds.get(rel, "other"),
            expected=expected,
            actual=actual,
            status=status,
            text=text,
            truncated=truncated,
            doc=doc,
        )
    for rel in odd:
        links[rel] = Link(path=rel, status="unlisted", text="(not a regular file)")
    for rel, expected in sorted(subjects.items()):
        if rel not in links:
            links[rel] = Link(
                path=rel, kind=kinds.get(rel, "other"), expected=expected, status="missing"
            )
    return LoadedBundle(
        directory=str(directory),
        verdict=verdict,
        links=links,
        statement=statement,
        signature=signature,
    )
