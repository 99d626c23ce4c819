"""`draft.json`: what each model step saw and said, and what was decided (trace.draft/v1)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class StepRecord(_Model):
    id: str
    role: str
    model: str
    family: str
    backend: str
    parameters: dict[str, Any]
    system_sha256: str
    prompt_sha256: str
    inputs: dict[str, str] = Field(description="need -> sha256 of the value the prompt was made of")
    transcript_key: str
    transcript: str = Field(description="path of the transcript in the candidate folder")
    transcript_sha256: str
    replayed: bool
    outcome: str = Field(description="'ok' or a reason code of policy/reasons.toml")
    detail: str = ""


class ReviewClaim(_Model):
    step: str
    verdict: Literal["approve", "request-changes"]
    concerns: list[str]
    summary: str
    model: str
    family: str
    cross_family: bool = Field(description="the reviewer's family differs from every patcher's")


class DraftDecision(_Model):
    decision: Literal["allow", "deny"]
    reasons: list[str] = Field(description="codes: routing, verify, signing and review rules")
    signing: str | None = Field(default=None, description="the signing policy's allow/deny")
    routing: str | None = None


class DraftRecord(_Model):
    schema_: Literal["trace.draft/v1"] = Field(default="trace.draft/v1", alias="schema")
    candidate: str
    package: str
    advisory: str
    stage: str = Field(description="the last stage reached: route, patch, reproduce, verify, ...")
    steps: list[StepRecord] = Field(default_factory=list)
    verify_passed: bool | None = None
    reviews: list[ReviewClaim] = Field(default_factory=list)
    decision: DraftDecision
