"""verify-bundle's check of a drafted candidate's model steps
(engine/evidence/agent_claims.py): every transcript the replay record pins is bundled, names the
key, model and prompt digest pinned, its key is the digest of its own fields, its unredacted
prompts hash to its digests, and agent/draft.json's steps name the same transcripts.
The statement already covers each file's sha256; this ties the files to each other and to the
replay record."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def transcript_problems(payload: Path, replay: Any) -> list[str]:
    from engine.models.model_spec import ModelSpec
    from engine.models.transcript import Transcript, key_of

    pin = replay.model if replay is not None else None
    pins = pin.transcripts if pin is not None else None
    if not pins:
        return []
    problems: list[str] = []
    draft_path = payload / "agent" / "draft.json"
    draft = json.loads(draft_path.read_bytes()) if draft_path.is_file() else {}
    draft_keys = {s.get("id"): s.get("transcript_key") for s in draft.get("steps", [])}
    for p in pins:
        path = payload / p.path
        if not path.is_file():
            problems.append(f"replay record pins transcript {p.path}, which is not bundled")
            continue
        try:
            t = Transcript.model_validate_json(path.read_bytes())
        except ValueError as exc:
            problems.append(f"{p.path}: not a trace.transcript/v1 record ({exc})")
            continue
        if (t.key, t.model, t.prompt_sha256, t.parameters) != (
            p.key,
            p.model,
            p.prompt_sha256,
            p.parameters,
        ):
            problems.append(f"{p.path} differs from the replay record's pin of step {p.step}")
        spec = ModelSpec.model_validate({"backend": "replay", "model": t.model,
                                         "parameters": t.parameters})  # fmt: skip
        # the key over the transcript's own digests (the prompts themselves may be redacted)
        if key_of(spec, t.role, t.system_sha256, t.prompt_sha256, t.inputs) != t.key:
            problems.append(f"{p.path}: its key is not the digest of its own fields")
        if not t.redactions and (
            _sha(t.request.get("prompt", "")) != t.prompt_sha256
            or _sha(t.request.get("system", "")) != t.system_sha256
        ):
            problems.append(f"{p.path}: the recorded prompt does not hash to its digest")
        if draft_keys.get(p.step) != t.key:
            problems.append(f"agent/draft.json does not name transcript {p.path} for {p.step}")
    return problems
