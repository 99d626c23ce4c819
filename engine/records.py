"""Records that builds produce and that gates, policies and evidence consume.

These are the typed contract between modules: a reproducer run writes a `RunRecord` (as JSON in
its derivation's `$out/outcome.json`), a gate writes a `GateRecord`, and `trace verify` collects
them into a `VerifyResult`. Field names are stable: bundles and policies refer to them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Side = Literal["pre", "post"]


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Sanitizer(Record):
    tool: str = Field(description="e.g. AddressSanitizer")
    kind: str = Field(description="e.g. heap-buffer-overflow")


class Invocation(Record):
    """One call of the package's own program or module, seen by trace's wrapper/audit hook."""

    target: str = Field(description="path inside the package, e.g. bin/cparse")
    exit_code: int | None = None
    signal: str | None = None


class RunRecord(Record):
    """How one reproducer run against one build ended. Deterministic: no times, no temp paths."""

    schema_: Literal["trace.run/v1"] = Field(default="trace.run/v1", alias="schema")
    side: Side
    run: int
    build: Literal["ok", "failed"] = "ok"
    target_ran: bool
    invocations: list[Invocation] = Field(default_factory=list)
    exit_code: int | None = None
    signal: str | None = None
    sanitizer: Sanitizer | None = None
    stdout_sha256: str | None = None
    stderr_sha256: str | None = None
    stdout_tail: str = ""
    stderr_tail: str = ""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @property
    def failed(self) -> bool:
        return (
            self.exit_code not in (0, None)
            or self.signal is not None
            or (self.sanitizer is not None)
        )


class GateRecord(Record):
    """The result of one gate: a pass/fail, an optional score and stable reason codes."""

    schema_: Literal["trace.gate/v1"] = Field(default="trace.gate/v1", alias="schema")
    gate: str
    passed: bool
    measurable: bool = True
    score: float | None = None
    reasons: list[str] = Field(default_factory=list, description="stable reason codes")
    details: dict[str, object] = Field(default_factory=dict)

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
