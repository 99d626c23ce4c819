"""Typed payload entries for one candidate: every claim of the bundle as its own file.

| path                         | kind       | from                                           |
|------------------------------|------------|------------------------------------------------|
| candidate.toml               | other      | the candidate file                             |
| advisory.json                | advisory   | the OSV advisory                               |
| upstream.json                | upstream   | the upstream fix reference (when given)        |
| patches/<n>-<name>           | patch      | each patch, canonical `-U0` diff form          |
| rationale.md, review.md      | rationale, review | when the candidate names them           |
| reproducer/<name>            | reproducer | the script and its data files                  |
| model.json                   | other      | model id, prompt digest, parameters (if any)   |
| prompt.txt                   | other      | the prompt (when the candidate names one)      |
| outcomes/<step id>.json      | run / gate | every step's outcome as built (all K runs)     |
| verify-result.json           | verify     | `trace verify`'s VerifyResult (when given)     |
| decisions/<name>.json        | routing / signing | policy decisions, with policy versions  |
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from engine.candidate import Candidate
from engine.evidence.bundle import OUTCOMES_DIR
from engine.evidence.payload import (
    ClaimKind,
    PayloadEntry,
    diff_entry,
    json_entry,
    text_entry,
)
from engine.evidence.replay import ModelPin
from engine.run import RunResult


def _file_entry(path: str, kind: ClaimKind, source: Path) -> PayloadEntry:
    data = source.read_bytes()
    try:
        return text_entry(path, kind, data.decode("utf-8"))
    except UnicodeDecodeError:
        return PayloadEntry(path=path, kind=kind, data=data, media_type="application/octet-stream")


def model_pin(candidate: Candidate) -> ModelPin | None:
    m = candidate.spec.model
    if m is None:
        return None
    prompt = hashlib.sha256(candidate.file(m.prompt).read_bytes()).hexdigest() if m.prompt else None
    return ModelPin(id=m.id, prompt_sha256=prompt, parameters=m.parameters)


def candidate_entries(candidate: Candidate) -> list[PayloadEntry]:
    s = candidate.spec
    out = [
        _file_entry("candidate.toml", "other", candidate.path),
        _file_entry("advisory.json", "advisory", candidate.file(s.advisory.osv)),
    ]
    if s.advisory.upstream_fix:
        out.append(
            json_entry("upstream.json", "upstream", {"upstream_fix": s.advisory.upstream_fix})
        )
    for i, rel in enumerate(s.patches, 1):
        out.append(
            diff_entry(f"patches/{i:02d}-{Path(rel).name}", candidate.file(rel).read_bytes())
        )
    if s.rationale:
        out.append(_file_entry("rationale.md", "rationale", candidate.file(s.rationale)))
    if s.review:
        out.append(_file_entry("review.md", "review", candidate.file(s.review)))
    out.append(
        _file_entry(
            f"reproducer/{Path(s.reproducer.script).name}",
            "reproducer",
            candidate.file(s.reproducer.script),
        )
    )
    for rel in s.reproducer.data:
        out.append(
            _file_entry(f"reproducer/data/{Path(rel).name}", "reproducer", candidate.file(rel))
        )
    pin = model_pin(candidate)
    if pin is not None:
        out.append(json_entry("model.json", "other", pin.model_dump()))
        if s.model and s.model.prompt:
            out.append(_file_entry("prompt.txt", "other", candidate.file(s.model.prompt)))
    return out


def _outcome_kind(outcome: Any) -> ClaimKind:
    schema = outcome.get("schema") if isinstance(outcome, dict) else None
    return "gate" if schema == "trace.gate/v1" else "run"


def outcome_entries(run: RunResult) -> list[PayloadEntry]:
    return [
        json_entry(f"{OUTCOMES_DIR}/{sid}.json", _outcome_kind(r.outcome), r.outcome)
        for sid, r in sorted(run.steps.items())
        if r.outcome is not None
    ]


def decision_entry(name: str, kind: ClaimKind, decision: Any) -> PayloadEntry:
    value = (
        decision.model_dump(mode="json", by_alias=True)
        if isinstance(decision, BaseModel)
        else decision
    )
    return json_entry(f"decisions/{name}.json", kind, value)


def policy_versions(value: Any) -> dict[str, str]:
    """Every `{name, version, digest}` policy reference found inside a decision, name -> version."""
    found: dict[str, str] = {}
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json", by_alias=True)
    if isinstance(value, dict):
        if {"name", "version", "digest"} <= value.keys() and isinstance(value["version"], str):
            found[str(value["name"])] = value["version"]
        for v in value.values():
            found.update(policy_versions(v))
    elif isinstance(value, list):
        for v in value:
            found.update(policy_versions(v))
    return found


def load_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))
