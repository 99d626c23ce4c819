"""What the roles are given: the advisory, the grounded upstream reference and source files."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from engine.advisory import OsvAdvisory
from engine.errors import InputError

MAX_FILE = 64 * 1024
MAX_TOTAL = 256 * 1024


def advisory_value(adv: OsvAdvisory, raw: str) -> dict[str, Any]:
    return {
        "id": adv.id,
        "aliases": list(adv.aliases),
        "summary": adv.summary,
        "details": adv.details,
        "fix_references": adv.fix_references,
        "json": raw,
    }


def source_files(source: Path, only: list[str] | None = None) -> dict[str, str]:
    """Text files of the package's source tree (relative path -> text), bounded in size;
    `only`: just these paths (the files the upstream fix touches) when they exist."""
    if not source.is_dir():
        raise InputError(
            f"package source directory {source} does not exist",
            hint="pass --source DIR (the unpacked source the patches apply to)",
        )
    files = sorted(p for p in source.rglob("*") if p.is_file() and ".git" not in p.parts)
    rels = [p.relative_to(source).as_posix() for p in files]
    if only:
        chosen = [r for r in rels if r in set(only)]
        rels = chosen or rels
    out: dict[str, str] = {}
    total = 0
    for rel in rels:
        data = (source / rel).read_bytes()
        if len(data) > MAX_FILE or total + len(data) > MAX_TOTAL:
            continue
        try:
            out[rel] = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        total += len(data)
    if not out:
        raise InputError(
            f"no text source file under {source} fits the prompt ({MAX_TOTAL // 1024} KiB)",
            hint="pass --source with the directory holding the relevant files",
        )
    return out


def digest(value: object) -> str:
    """The digest of a value as it enters a transcript key."""
    raw = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(raw.encode()).hexdigest()


def verify_value(result: Any) -> dict[str, Any]:
    """What a reviewer sees of a verify result: claims and gates, no paths or step ids."""
    return {
        "passed": result.passed,
        "reasons": list(result.reasons),
        "claims": [
            {"claim": c.claim, "holds": c.holds, "reason": c.reason, "detail": c.detail}
            for c in result.claims
        ],
        "gates": {
            name: {
                "passed": g.passed,
                "measurable": g.measurable,
                "score": g.score,
                "reasons": list(g.reasons),
            }
            for name, g in sorted(result.gates.items())
        },
    }
