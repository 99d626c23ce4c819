"""Re-verifying a bundle's waivers from the bundle alone (`waiver.invalid`).

A signed decision that lists a waiver proves only that the bundle's signer says a maintainer
waived a code. So every waiver the bundled decision lists must be bundled as the maintainer
signed it (`waivers/<reason>.json`), and check again here, as `trace decide` checked it: signed
by a key of the bundled maintainers policy (`policy/maintainers.toml`, whose sha256 is the
decision's `maintainers` digest; the statement pins that digest, and the policy pin check holds
it to the maintainers files this checkout and the fork know), never by trace's own signing keys
(the signer lock) nor by the key that signed the bundle, for the bundled patch
(`patches/*`, canonical form), waivable in the decision's catalogue, and saying exactly what the
decision says it says. A waiver file the decision does not list is an error too.
"""

from __future__ import annotations

import hashlib
from pathlib import Path, PurePosixPath
from typing import Any

from engine.audit.identity import IdentityPolicy
from engine.audit.safefs import unsafe_name
from engine.audit.signature import Check
from engine.evidence.bundle import POLICY_DIR
from engine.policy.maintainers import FILE, NOBODY, load_maintainers
from engine.policy.signed_waiver import BUNDLE_DIR, WaiverTrust, check_signed, patch_digest
from engine.policy.waivers import Waiver

NAME = "signed waivers"
REASON = "waiver.invalid"
SIGNING_PATH = "decisions/signing.json"


def _bundled_patch(payload: Path) -> str:
    patches = payload / "patches"
    files = sorted(patches.iterdir()) if patches.is_dir() else []
    return patch_digest([f.read_bytes() for f in files if f.is_file()])


def _trust(payload: Path, d: Any, lock: IdentityPolicy, signer: dict[str, str]) -> WaiverTrust:
    from engine.errors import TraceError

    forbidden = dict.fromkeys(lock.keys, "trace's own signing key (the signer lock)")
    if signer.get("mode") == "key" and signer.get("hint"):
        forbidden[signer["hint"]] = "the key that signed this bundle"
    maintainers = NOBODY
    path = payload / POLICY_DIR / FILE
    pinned = d.maintainers.digest if d.maintainers is not None else None
    if path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == pinned:
        try:
            maintainers = load_maintainers(path)
        except TraceError:
            maintainers = NOBODY
    return WaiverTrust(
        maintainers=maintainers, forbidden=forbidden, patches={d.candidate: _bundled_patch(payload)}
    )


def _catalogue(payload: Path, d: Any) -> Any:
    from engine.errors import TraceError
    from engine.policy.signing_decision import load_signing

    try:
        return load_signing(payload / POLICY_DIR / PurePosixPath(d.policy.path).name)[1]
    except TraceError:
        return None


def waiver_check(payload: Path, lock: IdentityPolicy, signer: dict[str, str]) -> Check:
    from pydantic import ValidationError

    from engine.policy.signing_decision import Decision

    try:
        d = Decision.model_validate_json((payload / SIGNING_PATH).read_bytes())
    except (OSError, ValidationError):
        return Check(name=NAME, ok=True, detail="no decision to read (checked as decision.*)")
    folder = payload / BUNDLE_DIR
    bundled = {f"{BUNDLE_DIR}/{f.name}" for f in folder.iterdir()} if folder.is_dir() else set()
    if not d.waivers and not bundled:
        return Check(name=NAME, ok=True, detail="none listed")
    problems = _problems(payload, d, lock, signer, bundled)
    if problems:
        return Check(name=NAME, ok=False, reason=REASON, detail="; ".join(problems))
    return Check(
        name=NAME,
        ok=True,
        detail=", ".join(
            f"{u.waiver.reason} ({u.status}, {u.waiver.approved_by})" for u in d.waivers
        ),
    )


def _problems(
    payload: Path, d: Any, lock: IdentityPolicy, signer: dict[str, str], bundled: set[str]
) -> list[str]:
    catalogue = _catalogue(payload, d)
    if catalogue is None:
        return [f"the bundled signing policy ({d.policy.path}) cannot be loaded"]
    if d.maintainers is None:
        return ["the decision lists waivers but names no maintainers policy"]
    trust = _trust(payload, d, lock, signer)
    if trust.maintainers.ref is None:
        return [
            f"{POLICY_DIR}/{FILE} is missing or is not the maintainers policy the decision names"
        ]
    problems: list[str] = []
    named: set[str] = set()
    for use in d.waivers:
        w = use.waiver
        rel = w.file
        if rel is None or unsafe_name(rel) or not (payload / rel).is_file():
            problems.append(f"{w.reason}: no signed waiver file in the bundle (unsigned)")
            continue
        named.add(rel)
        got = check_signed((payload / rel).read_bytes(), trust, catalogue)
        if got is None:
            problems.append(f"{rel}: a waiver of another candidate")
        elif not isinstance(got, Waiver):
            problems.append(f"{rel}: {got.why}")
        elif got != w:
            problems.append(f"{rel}: says something else than the decision's waiver")
    problems += [
        f"{rel}: bundled, but the decision does not list it" for rel in sorted(bundled - named)
    ]
    return problems
