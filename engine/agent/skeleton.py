"""Candidate skeletons: what Scout writes and `trace draft ADVISORY` starts from — a routing-only
candidate.toml beside a copy of the advisory, under FORK/trace/candidates/<id>/."""

from __future__ import annotations

import re
from pathlib import Path

from engine.advisory import OsvAdvisory
from engine.agent.write import Folder, candidate_toml

CANDIDATES = Path("trace") / "candidates"


def candidate_id(advisory: OsvAdvisory, package: str) -> str:
    raw = f"{advisory.id}-{package}"
    return re.sub(r"[^A-Za-z0-9._-]+", "-", raw).strip("-.") or "candidate"


def write_skeleton(
    fork: Path, advisory: OsvAdvisory, raw: bytes, package: str, upstream_fix: str | None
) -> Path:
    """The skeleton's candidate.toml (an existing one is left as it is)."""
    cid = candidate_id(advisory, package)
    folder = Folder(fork / CANDIDATES / cid)
    target = folder.path / "candidate.toml"
    if target.is_file():
        return target
    folder.write("advisory.json", raw)
    folder.write(
        "candidate.toml",
        candidate_toml(
            {"id": cid, "package": package, "origin": "model", "scope": [f"pkgs/{package}/**"]},
            {"advisory": {"osv": "advisory.json", "upstream_fix": upstream_fix}},
        ),
    )
    return target
