"""Content-addressed transcripts of model exchanges, and the store that replays them.

A transcript records one exchange: role, model id and family, parameters, the digests of the
system prompt, user prompt and inputs, and the redacted request and response. Its key is the
digest of what determines the question (`transcript_key`); the file is written atomically under
`STATE/transcripts/<key>.json`, so a run interrupted mid-call leaves nothing half-written.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.errors import InputError
from engine.evidence.redact import redact_text
from engine.files import write_atomic
from engine.models.model_spec import ModelSpec, Request

SCHEMA = "trace.transcript/v1"


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def canonical(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def transcript_key(spec: ModelSpec, request: Request) -> str:
    """The prompt, the model and its parameters, and the inputs: same key, same answer."""
    return key_of(
        spec, request.role, sha256(request.system), sha256(request.prompt), request.inputs
    )


def key_of(
    spec: ModelSpec, role: str, system_sha256: str, prompt_sha256: str, inputs: dict[str, str]
) -> str:
    """The key from digests (verify-bundle recomputes it from a redacted transcript)."""
    return hashlib.sha256(
        canonical(
            {
                "schema": SCHEMA,
                "role": role,
                **spec.identity(),
                "system_sha256": system_sha256,
                "prompt_sha256": prompt_sha256,
                "inputs": dict(sorted(inputs.items())),
            }
        )
    ).hexdigest()


class Transcript(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    schema_: Literal["trace.transcript/v1"] = Field(default="trace.transcript/v1", alias="schema")
    key: str
    role: str
    backend: str = Field(description="the backend that answered (not part of the key)")
    model: str
    family: str
    parameters: dict[str, object]
    system_sha256: str
    prompt_sha256: str
    inputs: dict[str, str]
    request: dict[str, str] = Field(description="system and prompt, redacted")
    response: str = Field(description="the model's text, redacted")
    redactions: dict[str, int] = Field(default_factory=dict)

    def dump(self) -> bytes:
        return (
            json.dumps(
                self.model_dump(mode="json", by_alias=True), indent=2, sort_keys=True
            ).encode()
            + b"\n"
        )


def make_transcript(spec: ModelSpec, request: Request, backend: str, text: str) -> Transcript:
    counts: dict[str, int] = {}
    parts: dict[str, str] = {}
    for name, value in (("system", request.system), ("prompt", request.prompt), ("response", text)):
        clean, found = redact_text(value)
        parts[name] = clean
        for rule, n in found.items():
            counts[rule] = counts.get(rule, 0) + n
    return Transcript(
        key=transcript_key(spec, request),
        role=request.role,
        backend=backend,
        model=spec.model,
        family=spec.model_family,
        parameters=spec.parameters.model_dump(),
        system_sha256=sha256(request.system),
        prompt_sha256=sha256(request.prompt),
        inputs=dict(sorted(request.inputs.items())),
        request={"system": parts["system"], "prompt": parts["prompt"]},
        response=parts["response"],
        redactions=counts,
    )


class TranscriptStore:
    """`STATE/transcripts/<key>.json`, written atomically; read back and checked on replay."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, key: str) -> Path:
        return self.root / f"{key}.json"

    def get(self, key: str) -> Transcript | None:
        path = self.path(key)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            found = Transcript.model_validate_json(raw)
        except ValidationError as exc:
            raise InputError(
                "recorded transcript is not a trace.transcript/v1 record: "
                + str(exc.errors()[0]["msg"]),
                file=path,
                hint="delete it and run again with --refresh to ask the model again",
            ) from None
        if found.key != key:
            raise InputError(
                f"recorded transcript names key {found.key[:16]}…, not its file name's",
                file=path,
                hint="the store was edited; delete the file and run with --refresh",
            )
        return found

    def put(self, transcript: Transcript) -> Path:
        path = self.path(transcript.key)
        write_atomic(path, transcript.dump())
        return path
