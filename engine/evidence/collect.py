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
| verify-result.json           | verify     | `trace verify`'s VerifyResult: claims, verdict, |
|                              |            | the K run records of each side (build failures |
|                              |            | included), determinism and flakiness           |
| gates/<gate>.json            | gate       | every gate record: the verify result's own     |
|                              |            | (expectation, later gates) and further gate    |
|                              |            | steps' and `--gate` files' records             |
| decisions/routing.json       | routing    | the routing decision (policy + critical list   |
|                              |            | name, version, digest)                         |
| decisions/signing.json       | signing    | the signing decision record (`trace decide`'s) |

The bundle adds `replay.json`, `redaction.json` and `index.json` (every file's claim kind).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from engine.candidate import Candidate
from engine.errors import InputError
from engine.evidence.bundle import OUTCOMES_DIR
from engine.evidence.payload import (
    ClaimKind,
    PayloadEntry,
    diff_entry,
    json_entry,
    text_entry,
)
from engine.evidence.replay import ModelPin
from engine.records import GateRecord
from engine.run import RunResult
from engine.verify.result import VerifyResult

VERIFY_RESULT_PATH = "verify-result.json"
GATES_DIR = "gates"
GATE_SCHEMA = "trace.gate/v1"


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
    return "gate" if schema == GATE_SCHEMA else "run"


def outcome_entries(run: RunResult) -> list[PayloadEntry]:
    return [
        json_entry(f"{OUTCOMES_DIR}/{sid}.json", _outcome_kind(r.outcome), r.outcome)
        for sid, r in sorted(run.steps.items())
        if r.outcome is not None
    ]


def verify_entry(result: VerifyResult) -> PayloadEntry:
    return json_entry(VERIFY_RESULT_PATH, "verify", result.model_dump(mode="json", by_alias=True))


def gate_records(
    result: VerifyResult, run: RunResult | None = None, extra: Sequence[tuple[str, GateRecord]] = ()
) -> dict[str, GateRecord]:
    """Every gate record, by gate name: the verify result's own (its expectation gate and any
    `gates` it carries), then those of further gate steps in the run, then `extra`
    (source, record) pairs such as `--gate` files. Generic over the result's shape: whatever
    gate records it holds are taken."""
    found: dict[str, GateRecord] = {}
    if result.expectation is not None:
        found[result.expectation.gate] = result.expectation
    carried = getattr(result, "gates", None)
    if isinstance(carried, dict):
        carried = list(carried.values())
    for record in carried if isinstance(carried, list) else []:
        if isinstance(record, GateRecord):
            found.setdefault(record.gate, record)
    for _, step in sorted((run.steps if run else {}).items()):
        outcome = step.outcome
        if isinstance(outcome, dict) and outcome.get("schema") == GATE_SCHEMA:
            record = GateRecord.model_validate(outcome)
            found.setdefault(record.gate, record)
    for source, record in extra:
        if record.gate in found:
            raise InputError(
                f"a second record for gate '{record.gate}'",
                file=source,
                hint="the verify run already recorded this gate; pass each gate's record once",
            )
        found[record.gate] = record
    return found


def gate_entries(records: dict[str, GateRecord]) -> list[PayloadEntry]:
    return [
        json_entry(f"{GATES_DIR}/{name}.json", "gate", rec.model_dump(mode="json", by_alias=True))
        for name, rec in sorted(records.items())
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
