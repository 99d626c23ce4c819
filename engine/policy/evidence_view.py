"""What the signing policy reads: the records `trace verify` and the gates actually produced.

The verify result (engine/verify_result.py, `trace.verify/v1`) carries the reproducer run
records of both sides, the determinism check and the expectation gate's record; further gate
records (scope, mutation, coverage: `trace.gate/v1` JSON) are collected beside it. Nothing here
reads logs or summaries' prose: the signing policy re-derives what it can from the raw run
records and reads gate verdicts only as the typed records the gates wrote.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, Field, ValidationError

from engine.build_records import GateRecord
from engine.errors import InputError
from engine.loader import decode, parse_json, read_bytes
from engine.paths import cli
from engine.policy.review import ReviewEvidence
from engine.policy.source import Strict
from engine.verify_result import VerifyResult

M = TypeVar("M", bound=BaseModel)


class SourceRef(Strict):
    """A file the decision read: where, and the sha256 of its bytes."""

    path: str
    sha256: str


class Evidence(Strict):
    candidate: str = Field(description="candidate id the evidence is about")
    verify: VerifyResult | None = Field(description="None when no verify result exists")
    gates: dict[str, GateRecord] = Field(default_factory=dict, description="by gate name")
    sources: list[SourceRef] = Field(default_factory=list)
    review: ReviewEvidence | None = Field(
        default=None, description="a drafted candidate's review claims, checked (draft record)"
    )


def _read_json(path: Path, what: str) -> tuple[object, SourceRef]:
    raw = read_bytes(path, what)
    data = parse_json(decode(raw, path, what), path, what)
    return data, SourceRef(path=str(path), sha256=hashlib.sha256(raw).hexdigest())


def add_gate_record(gates: dict[str, GateRecord], source: Path | str, record: GateRecord) -> None:
    """Add a record given beside the run (a `--gate` file): a second record for one gate, after
    the run's own or an earlier file's, is refused (`trace decide` and `trace verify` alike)."""
    if record.gate in gates:
        raise InputError(
            f"a second record for gate '{record.gate}'",
            file=source,
            hint="the verify run or an earlier file already recorded this gate; pass each gate's "
            "record once",
        )
    gates[record.gate] = record


def _read_model(path: Path, model: type[M], what: str, sources: list[SourceRef]) -> M:
    """One JSON record, validated as `model`; the file and its digest join `sources`."""
    data, src = _read_json(path, what)
    sources.append(src)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _invalid(path, what, exc) from None


def _invalid(path: Path, what: str, exc: ValidationError) -> InputError:
    err = exc.errors()[0]
    return InputError(
        f"{what} does not match its schema: {err['msg']}",
        file=path,
        key=".".join(str(p) for p in err["loc"]) or None,
        hint=f"it was written by another trace version or edited by hand; rerun `{cli('verify')}`",
    )


def load_evidence(
    candidate: str, verify_result: Path | None, gate_files: list[Path] | None = None
) -> Evidence:
    """Read the verify result (if it exists) and extra gate record files into one view.

    A missing verify result is not an error here: the signing policy turns it into
    `evidence-missing`. An unreadable or malformed one is an error (never silently ignored).
    """
    sources: list[SourceRef] = []
    verify: VerifyResult | None = None
    gates: dict[str, GateRecord] = {}
    if verify_result is not None and verify_result.exists():
        verify = _read_model(verify_result, VerifyResult, "verify result", sources)
        for record in _gate_records(verify):
            gates[record.gate] = record
    for path in gate_files or []:
        add_gate_record(gates, path, _read_model(path, GateRecord, "gate record", sources))
    return Evidence(candidate=candidate, verify=verify, gates=gates, sources=sources)


def _gate_records(verify: VerifyResult) -> list[GateRecord]:
    """The gate records a verify result carries (the expectation gate, and any later gates)."""
    records = [verify.expectation] if verify.expectation is not None else []
    extra = getattr(verify, "gates", None)
    if isinstance(extra, dict):
        extra = list(extra.values())
    if isinstance(extra, list):
        records += [g for g in extra if isinstance(g, GateRecord)]
    return records
