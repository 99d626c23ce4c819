"""The model steps' claims in a bundle, for a candidate drafted by `trace draft`.

When the candidate's folder holds `draft.json` (trace.draft/v1), the bundle carries it as
`agent/draft.json`, the review as `agent/review.md`, the accuracy comparison with the upstream
fix as `agent/accuracy.json` (when made), and every step's redacted transcript as
`agent/transcripts/<step>.json`; the replay record's model pin lists each transcript's step,
role, model, family, parameters, prompt digest and sha256 (`TranscriptPin`), which
`verify-bundle` checks against the bundled files. Transcripts were redacted when recorded
(engine/models/transcript.py) and pass the bundle's redaction again like every payload file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engine.candidate import Candidate
from engine.evidence.payload import PayloadEntry, json_entry, text_entry
from engine.evidence.replay import TranscriptPin

DRAFT = "draft.json"
AGENT_DIR = "agent"


def _draft(candidate: Candidate) -> dict[str, Any] | None:
    path = candidate.dir / DRAFT
    if not path.is_file():
        return None
    doc = json.loads(path.read_text(encoding="utf-8"))
    return doc if isinstance(doc, dict) and doc.get("schema") == "trace.draft/v1" else None


def transcript_pins(candidate: Candidate) -> list[TranscriptPin] | None:
    doc = _draft(candidate)
    if doc is None:
        return None
    return [
        TranscriptPin(
            step=s["id"],
            role=s["role"],
            model=s["model"],
            family=s["family"],
            parameters=s["parameters"],
            prompt_sha256=s["prompt_sha256"],
            key=s["transcript_key"],
            path=f"{AGENT_DIR}/transcripts/{Path(s['transcript']).name}",
        )
        for s in doc.get("steps", [])
    ]


def draft_entries(candidate: Candidate) -> list[PayloadEntry]:
    doc = _draft(candidate)
    if doc is None:
        return []
    out = [json_entry(f"{AGENT_DIR}/{DRAFT}", "review", doc)]
    review = candidate.dir / "review.md"
    if review.is_file():
        out.append(text_entry(f"{AGENT_DIR}/review.md", "review", review.read_text("utf-8")))
    accuracy = candidate.dir / "accuracy.json"
    if accuracy.is_file():
        out.append(
            json_entry(f"{AGENT_DIR}/accuracy.json", "accuracy", json.loads(accuracy.read_bytes()))
        )
    for s in doc.get("steps", []):
        raw = json.loads((candidate.dir / s["transcript"]).read_text(encoding="utf-8"))
        out.append(
            json_entry(f"{AGENT_DIR}/transcripts/{Path(s['transcript']).name}", "other", raw)
        )
    return out
