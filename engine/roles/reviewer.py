"""The Reviewer's answer: `{"verdict": "approve" | "request-changes", "concerns": [...],
"summary": "..."}`. It is a claim in the bundle, never a verdict on its own."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.roles.outcome import RoleFailure, json_object


class Review(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    verdict: Literal["approve", "request-changes"]
    concerns: list[str] = Field(default_factory=list)
    summary: str = ""


def parse_review(answer: str) -> Review | RoleFailure:
    doc = json_object(answer)
    if isinstance(doc, RoleFailure):
        return doc
    try:
        return Review.model_validate(doc)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        return RoleFailure(reason="model-output-unparseable", detail=f"{where}: {err['msg']}")
