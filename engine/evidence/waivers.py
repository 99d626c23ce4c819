"""The signed waivers a decision read, as payload files: `waivers/<reason>.json` (each file
byte for byte as the maintainer signed it) and `policy/maintainers.toml` (the maintainers policy
whose keys they were checked against; its sha256 is the decision's `maintainers` digest, which
the statement pins). verify-bundle re-verifies every waiver from these files alone
(engine/audit/waivers.py)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from engine.errors import InputError
from engine.evidence.bundle import POLICY_DIR
from engine.evidence.payload import PayloadEntry
from engine.paths import resolve_ref
from engine.policy.maintainers import FILE
from engine.policy.source import PolicyRef
from engine.policy.waivers import WaiverSet

MAINTAINERS_PATH = f"{POLICY_DIR}/{FILE}"


def waiver_entries(
    waivers: WaiverSet, candidate: str, maintainers: PolicyRef | None
) -> list[PayloadEntry]:
    files = waivers.files_of(candidate)
    if not files or maintainers is None:
        return []
    source = resolve_ref(maintainers.path, Path.cwd())
    data = source.read_bytes()
    if hashlib.sha256(data).hexdigest() != maintainers.digest:
        raise InputError(
            "the maintainers file changed while the bundle was made", file=source, hint="rerun"
        )
    out = [
        PayloadEntry(path=path, kind="waiver", data=raw, media_type="application/json")
        for path, raw in files
    ]
    out.append(
        PayloadEntry(
            path=MAINTAINERS_PATH,
            kind="waiver",
            data=data,
            media_type="application/toml",
        )
    )
    return out
