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


def skeleton_toml(
    cid: str, package: str, osv: str, upstream_fix: str | None, scope: list[str] | None = None
) -> str:
    """A routing-only candidate.toml: what the candidate is about, nothing drafted yet."""
    return candidate_toml(
        {"id": cid, "package": package, "origin": "model",
         "scope": scope or [f"pkgs/{package}/**"]},
        {"advisory": {"osv": osv, "upstream_fix": upstream_fix}},
    )  # fmt: skip


def skeleton_folder(fork: Path, advisory: OsvAdvisory, package: str) -> Path:
    return fork / CANDIDATES / candidate_id(advisory, package)


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
    folder.write("candidate.toml", skeleton_toml(cid, package, "advisory.json", upstream_fix))
    return target
