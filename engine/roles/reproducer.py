"""The Reproducer's answer: a JSON object with `script` (sh, run with $TARGET = the package),
`data` (file name -> content) and `expect` (how the unpatched build must fail). The script is
only ever run through the harness, with its oracles."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.oracles import Expectation
from engine.roles.outcome import RoleFailure, json_object

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class Reproduction(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    script: str = Field(min_length=1)
    data: dict[str, str] = Field(default_factory=dict)
    expect: Expectation


def parse_reproducer(answer: str) -> Reproduction | RoleFailure:
    doc = json_object(answer)
    if isinstance(doc, RoleFailure):
        return doc
    try:
        out = Reproduction.model_validate(doc)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        return RoleFailure(reason="model-output-unparseable", detail=f"{where}: {err['msg']}")
    bad = [n for n in out.data if not _NAME.match(n) or n in ("repro.sh", "candidate.toml")]
    if bad:
        return RoleFailure(
            reason="model-output-unparseable",
            detail=f"data file names must be plain file names: {', '.join(bad)}",
        )
    if out.expect == Expectation():
        return RoleFailure(reason="model-output-unparseable", detail="expect names no failure")
    return out
