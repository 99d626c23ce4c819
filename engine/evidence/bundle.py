"""Assembling a bundle from payload entries and writing it as one atomic directory rename."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import shutil
import tempfile
import uuid
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from engine.errors import InputError
from engine.evidence import PAYLOAD_DIR, SIGNATURE_FILE, STATEMENT_FILE
from engine.evidence.payload import PayloadEntry, json_entry
from engine.evidence.redact import (
    REDACTION_VERSION,
    RULES,
    RedactionRule,
    redact_entry,
    rules_document,
)
from engine.evidence.replay import ReplayRecord
from engine.evidence.statement import Statement, build_statement

REPLAY_PATH = "replay.json"
REDACTION_PATH = "redaction.json"
INDEX_PATH = "index.json"  # every other payload file's claim kind and media type
OUTCOMES_DIR = "outcomes"  # outcomes/<step id>.json: each step's outcome, as built
RESERVED = frozenset({REPLAY_PATH, REDACTION_PATH, INDEX_PATH})


class Assembled(BaseModel):
    """A bundle in memory: redacted canonical payload files and the statement over them."""

    model_config = ConfigDict(frozen=True)

    entries: tuple[PayloadEntry, ...]
    statement: Statement
    statement_bytes: bytes


def assemble(
    entries: list[PayloadEntry],
    *,
    replay: ReplayRecord,
    candidate_id: str,
    policy_versions: dict[str, str],
    builder_id: str,
    rules: tuple[RedactionRule, ...] = RULES,
    started: dt.datetime | None = None,
) -> Assembled:
    """Redact, add the replay record, redaction rules and the index, and build the statement."""
    seen: set[str] = set()
    for e in entries:
        if e.path in RESERVED:
            raise InputError(f"payload path '{e.path}' is reserved for the bundle itself")
        if e.path in seen:
            raise InputError(f"payload path '{e.path}' appears twice", hint="rename one entry")
        seen.add(e.path)
    redacted = []
    reports = []
    for e in entries:
        r, report = redact_entry(e, rules)
        redacted.append(r)
        reports.append(report)
    replay_entry, report = redact_entry(
        json_entry(REPLAY_PATH, "replay", replay.model_dump(mode="json", by_alias=True)), rules
    )
    reports.append(report)
    redacted.append(replay_entry)
    redacted.append(json_entry(REDACTION_PATH, "redaction", rules_document(rules, reports)))
    index = {e.path: {"kind": e.kind, "media_type": e.media_type} for e in redacted}
    redacted.append(
        json_entry(INDEX_PATH, "other", {"schema": "trace.bundle-index/v1", "files": index})
    )
    redacted.sort(key=lambda e: e.path)
    subjects = {e.path: hashlib.sha256(e.data).hexdigest() for e in redacted}
    now = dt.datetime.now(dt.UTC)
    statement = build_statement(
        subjects,
        replay=replay,
        candidate_id=candidate_id,
        policy_versions={**policy_versions, "redaction": REDACTION_VERSION},
        redaction_version=REDACTION_VERSION,
        builder_id=builder_id,
        invocation_id=str(uuid.uuid4()),
        started=started or now,
        finished=now,
    )
    return Assembled(
        entries=tuple(redacted), statement=statement, statement_bytes=statement.to_bytes()
    )


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def write_bundle(out: Path, assembled: Assembled, signature: str | None) -> Path:
    """Write the bundle directory at `out` (which must not exist) in one rename.

    `signature` is the Sigstore bundle JSON (or None for an unsigned bundle).
    """
    out = out.resolve()
    if out.exists():
        raise InputError(
            f"bundle directory {out} already exists",
            file=out,
            hint="remove it or pass another --out; bundles are never overwritten",
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for e in assembled.entries:
            _write(tmp / PAYLOAD_DIR / e.path, e.data)
        _write(tmp / STATEMENT_FILE, assembled.statement_bytes)
        if signature is not None:
            _write(tmp / SIGNATURE_FILE, signature.encode())
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
