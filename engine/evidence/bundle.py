"""Assembling a bundle from payload entries and writing it as one atomic directory rename."""

from __future__ import annotations

import datetime as dt
import errno
import hashlib
import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from engine.errors import InputError
from engine.evidence import PAYLOAD_DIR, SIGNATURE_FILE, STATEMENT_FILE
from engine.evidence.payload import PayloadEntry, json_entry
from engine.evidence.redact import (
    REDACTION_VERSION,
    RULES,
    RedactionReport,
    RedactionRule,
    redact_entry,
    redact_path,
    redact_value,
    rules_digest,
    rules_document,
)
from engine.evidence.replay import ReplayRecord
from engine.evidence.statement import PolicyPin, ResourceDescriptor, Statement, build_statement
from engine.evidence.timings import BYPRODUCT, TIMINGS_FILE
from engine.hashing import canonical_json

REPLAY_PATH = "replay.json"
REDACTION_PATH = "redaction.json"
INDEX_PATH = "index.json"  # every other payload file's claim kind and media type
OUTCOMES_DIR = "outcomes"  # outcomes/<step id>.json: each step's outcome, as built
POLICY_DIR = "policy"  # policy/<file>: the signing policy the decision applied, byte for byte
RESERVED = frozenset({REPLAY_PATH, REDACTION_PATH, INDEX_PATH})
MODEL_PATH = "model.json"  # model id, prompt_sha256 (of the bundled prompt.txt), parameters
PROMPT_PATH = "prompt.txt"
DECISION_KINDS = ("routing", "signing")
ROOT_FILES = frozenset({PAYLOAD_DIR, STATEMENT_FILE, SIGNATURE_FILE})  # all a bundle root holds
INFO_FILES = frozenset({TIMINGS_FILE})  # ...besides these: informational, never a subject


class Assembled(BaseModel):
    """A bundle in memory: redacted canonical payload files and the statement over them."""

    model_config = ConfigDict(frozen=True)

    entries: tuple[PayloadEntry, ...]
    statement: Statement
    statement_bytes: bytes
    timings: bytes | None = None  # timings.json beside the payload (engine.evidence.timings)


def policy_refs(entries: list[PayloadEntry] | tuple[PayloadEntry, ...]) -> dict[str, PolicyPin]:
    """Every `{name, version, digest}` policy reference inside the routing/signing decisions."""
    found: dict[str, PolicyPin] = {}

    def walk(v: object) -> None:
        if isinstance(v, dict):
            name, version, digest = v.get("name"), v.get("version"), v.get("digest")
            if isinstance(name, str) and isinstance(version, str) and isinstance(digest, str):
                found[name] = PolicyPin(version=version, digest=digest)
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    for e in entries:
        if e.kind in DECISION_KINDS and e.media_type == "application/json":
            try:
                walk(json.loads(e.data))
            except ValueError:
                continue
    return found


def _count(reports: dict[str, dict[str, int]], path: str, counts: dict[str, int]) -> None:
    mine = reports.setdefault(path, {})
    for rule_id, n in counts.items():
        mine[rule_id] = mine.get(rule_id, 0) + n


def _redact_entries(
    entries: list[PayloadEntry],
    rules: tuple[RedactionRule, ...],
    reports: dict[str, dict[str, int]],
) -> list[PayloadEntry]:
    """Each entry's name and bytes redacted (a secret may be a data file's name: the bundled
    name, the statement's subject and index.json then say `[REDACTED:<rule>]`; two names that
    redact alike get `~2`, `~3`, … appended)."""
    out: list[PayloadEntry] = []
    seen: set[str] = set()
    taken: set[str] = set()
    for e in entries:
        if e.path in RESERVED:
            raise InputError(f"payload path '{e.path}' is reserved for the bundle itself")
        if e.path in seen:
            raise InputError(f"payload path '{e.path}' appears twice", hint="rename one entry")
        seen.add(e.path)
        r, report = redact_entry(e, rules)
        path, counts = redact_path(e.path, rules)
        base, n = path, 1
        while path in taken or path in RESERVED:
            n += 1
            path = f"{base}~{n}"
        taken.add(path)
        _count(reports, path, report.counts)
        if counts:
            _count(reports, path, {f"{k} (name)": v for k, v in counts.items()})
        out.append(r.model_copy(update={"path": path}) if path != e.path else r)
    return out


def _prompt_digest(
    entries: list[PayloadEntry], replay: ReplayRecord
) -> tuple[list[PayloadEntry], ReplayRecord]:
    """model.json's and the replay record's prompt_sha256 over the bundled prompt.txt bytes."""
    by_path = {e.path: e for e in entries}
    prompt = by_path.get(PROMPT_PATH)
    if prompt is None:
        return entries, replay
    digest = hashlib.sha256(prompt.data).hexdigest()
    model = by_path.get(MODEL_PATH)
    if model is not None:
        doc = json.loads(model.data)
        if isinstance(doc, dict) and doc.get("prompt_sha256") is not None:
            doc["prompt_sha256"] = digest
            fixed = json_entry(MODEL_PATH, model.kind, doc)
            entries = [fixed if e.path == MODEL_PATH else e for e in entries]
    if replay.model is not None and replay.model.prompt_sha256 is not None:
        replay = replay.model_copy(
            update={"model": replay.model.model_copy(update={"prompt_sha256": digest})}
        )
    return entries, replay


def assemble(
    entries: list[PayloadEntry],
    *,
    replay: ReplayRecord,
    candidate_id: str,
    policy_versions: dict[str, str],
    builder_id: str,
    rules: tuple[RedactionRule, ...] = RULES,
    started: dt.datetime | None = None,
    finished: dt.datetime | None = None,
    machines: dict[str, tuple[str | None, str | None]] | None = None,
    timings: dict[str, Any] | None = None,
) -> Assembled:
    """Redact, add the replay record, redaction rules and the index, and build the statement.

    Everything is redacted before anything is hashed: payload bytes, the replay record
    (the statement is built from the redacted copy), and the other strings of the statement.
    `timings` (a trace.step-timings/v1 document) is redacted too and written beside the payload;
    the statement names its sha256 among the byproducts (engine.evidence.timings).
    """
    reports: dict[str, dict[str, int]] = {}
    redacted = _redact_entries(entries, rules, reports)
    redacted, replay = _prompt_digest(redacted, replay)
    replay_doc, counts = redact_value(replay.model_dump(mode="json", by_alias=True), rules)
    replay = ReplayRecord.model_validate(replay_doc)
    _count(reports, REPLAY_PATH, counts)
    redacted.append(json_entry(REPLAY_PATH, "replay", replay_doc))
    (candidate_id, builder_id, versions, where), counts = redact_value(
        [
            candidate_id,
            builder_id,
            policy_versions,
            {k: list(v) for k, v in (machines or {}).items()},
        ],
        rules,
    )
    _count(reports, STATEMENT_FILE, counts)
    timings_bytes = None
    if timings is not None:
        doc, counts = redact_value(timings, rules)
        _count(reports, TIMINGS_FILE, counts)
        timings_bytes = canonical_json(doc)
    applied = [RedactionReport(path=p, counts=c) for p, c in sorted(reports.items()) if c]
    redacted.append(json_entry(REDACTION_PATH, "redaction", rules_document(rules, applied)))
    index = {e.path: {"kind": e.kind, "media_type": e.media_type} for e in redacted}
    redacted.append(
        json_entry(INDEX_PATH, "other", {"schema": "trace.bundle-index/v1", "files": index})
    )
    redacted.sort(key=lambda e: e.path)
    subjects = {e.path: hashlib.sha256(e.data).hexdigest() for e in redacted}
    pins = policy_refs(redacted)  # from the redacted decisions, as bundled
    pins["redaction"] = PolicyPin(version=REDACTION_VERSION, digest=rules_digest(rules))
    now = dt.datetime.now(dt.UTC)
    statement = build_statement(
        subjects,
        replay=replay,
        candidate_id=candidate_id,
        policy_versions={**versions, "redaction": REDACTION_VERSION},
        policies=pins,
        redaction_version=REDACTION_VERSION,
        builder_id=builder_id,
        invocation_id=str(uuid.uuid4()),
        started=started or now,
        finished=finished or now,
        machines={k: (v[0], v[1]) for k, v in where.items()},
    )
    if timings_bytes is not None:
        statement.predicate.runDetails.byproducts.append(timings_byproduct(timings_bytes))
    return Assembled(
        entries=tuple(redacted),
        statement=statement,
        statement_bytes=statement.to_bytes(),
        timings=timings_bytes,
    )


def timings_byproduct(data: bytes) -> ResourceDescriptor:
    """The statement's runDetails.byproducts entry for timings.json's bytes."""
    return ResourceDescriptor(
        name=BYPRODUCT,
        uri=TIMINGS_FILE,
        digest={"sha256": hashlib.sha256(data).hexdigest()},
        annotations={"trace.informational": "true"},
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
        if assembled.timings is not None:
            _write(tmp / TIMINGS_FILE, assembled.timings)
        if signature is not None:
            _write(tmp / SIGNATURE_FILE, signature.encode())
        try:
            os.rename(tmp, out)  # fails when another run wrote `out` since the check above
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                raise
            raise InputError(
                f"bundle directory {out} was written by another process meanwhile",
                file=out,
                hint="two `trace bundle` runs wrote the same --out; keep the one that exists, "
                "or pass another --out; bundles are never overwritten",
            ) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
