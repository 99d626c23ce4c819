"""Relation oracles: `[[accept.relation]]` and `[[expect.relation]]` (issue 32).

A relation relates what two groups of target invocations printed, where no golden output
exists: the paginator's pages 1..k of n items, in page order, are exactly the n items on one
page. Each side (`a`, `b`) selects invocations as a per-invocation oracle does (`target`, `args`,
`index`); a side's text is the chosen stream of its invocations, in natural order of their
arguments (numbers by value: page 2 before page 10), concatenated. The relation:

* `equal`: a's text is b's;
* `permutation`: a's lines are b's lines in some order;
* `prefix`: a's text is a prefix of b's.

A round trip (encode then decode returns the input) is `equal` between the encoder's `stdin`
and the decoder's `stdout`: `a = { args = "encode", stream = "stdin" }`.

In `[accept]` every relation must hold on the patched target; in `[expect]` a relation is one
the unpatched target BREAKS (the bug, as `not_golden` is for one output). The judge is the
sandbox's oracle module (trace_sandbox/gates/oracle.py `judge_pre`, `judge_post`).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class RelationSide(_Strict):
    """The invocations one side of a relation reads, and which of their streams."""

    target: str | None = Field(default=None, description="the program, 'bin/NAME' or 'NAME'")
    args: str | None = Field(
        default=None, description="regex searched in the invocation's arguments joined by spaces"
    )
    index: int | None = Field(
        default=None, ge=1, le=1_000_000, description="1-based position in canonical order"
    )
    stream: Literal["stdout", "stdin"] = Field(
        default="stdout", description="what the side's invocations printed, or what they read"
    )

    @field_validator("args")
    @classmethod
    def _args(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression: {exc}") from None
        return v

    @model_validator(mode="after")
    def _selects(self) -> RelationSide:
        if self.target is None and self.args is None and self.index is None:
            raise ValueError("a relation side needs a selector: target, args or index")
        return self


class Relation(_Strict):
    """Two sides and how their texts relate."""

    a: RelationSide
    b: RelationSide
    relation: Literal["equal", "permutation", "prefix"] = Field(
        description="equal: a's text is b's; permutation: the same lines in another order; "
        "prefix: a's text starts b's"
    )
