"""Signed waivers for tests: maintainer keys, a maintainers policy, and waiver files signed the
way `trace waive` signs them (engine.policy.signed_waiver)."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path

from engine.policy.maintainers import load_maintainers
from engine.policy.signed_waiver import WaiverStatement, WaiverTrust, sign_statement
from engine.signing.keys import key_hint, keygen, load_private_key

PATCH = hashlib.sha256(b"the candidate's patch").hexdigest()
JUSTIFICATION = "a reviewer read the patch and the gate records and accepts it"


def make_key(folder: Path, name: str) -> Path:
    """A new key pair under `folder` (PRIVATE and PRIVATE.pub); returns the private key path."""
    priv, _, _ = keygen(folder / f"{name}.key")
    return priv


def hint_of(key: Path) -> str:
    return key_hint(load_private_key(key).public_key())


def write_maintainers(path: Path, keys: dict[str, Path], version: str = "1.0.0") -> Path:
    """A trace.maintainers/v1 file listing `keys` (name -> private key; the .pub is inlined)."""
    lines = [
        "[policy]",
        'name = "trace-maintainers"',
        f'version = "{version}"',
        'schema = "trace.maintainers/v1"',
    ]
    for name, key in keys.items():
        pem = Path(f"{key}.pub").read_text()
        lines += ["", "[[maintainers]]", f'name = "{name}"', f'public_key = """\n{pem}"""']
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def sign_waiver(
    folder: Path,
    key: Path,
    candidate: str,
    reason: str,
    *,
    patch: str = PATCH,
    expires: dt.date = dt.date(2099, 12, 31),
    date: dt.date = dt.date(2026, 11, 1),
) -> Path:
    """A waiver file signed with `key`, written to folder/CANDIDATE.REASON.json."""
    statement = WaiverStatement(
        candidate=candidate,
        patch_sha256=patch,
        reason=reason,
        justification=JUSTIFICATION,
        signer=hint_of(key),
        date=date,
        expires=expires,
    )
    path = folder / f"{candidate}.{reason}.json"
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(sign_statement(statement, load_private_key(key)))
    return path


def unsigned_waiver(folder: Path, candidate: str, reason: str) -> Path:
    """The same statement, written as plain JSON with no signature."""
    doc = {
        "schema": "trace.waiver/v2",
        "candidate": candidate,
        "patch_sha256": PATCH,
        "reason": reason,
        "justification": JUSTIFICATION,
        "signer": "0" * 64,
        "date": "2026-11-01",
        "expires": "2099-12-31",
    }
    path = folder / f"{candidate}.{reason}.json"
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def trust(
    maintainers: Path, patches: dict[str, str], forbidden: dict[str, str] | None = None
) -> WaiverTrust:
    return WaiverTrust(
        maintainers=load_maintainers(maintainers), forbidden=forbidden or {}, patches=patches
    )
