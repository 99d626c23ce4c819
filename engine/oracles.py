"""The oracles of a candidate file: how the target must misbehave before the fix ([expect]) and
behave after it ([accept]), on some or on selected invocations. Judged in the sandbox on what the
harness saw the target itself do (trace_sandbox/gates/oracle.py); the candidate file is
engine/candidate.py.
"""

from __future__ import annotations

import re
from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SIGNALS = {
    "SIGHUP": 1,
    "SIGINT": 2,
    "SIGQUIT": 3,
    "SIGILL": 4,
    "SIGTRAP": 5,
    "SIGABRT": 6,
    "SIGBUS": 7,
    "SIGFPE": 8,
    "SIGKILL": 9,
    "SIGSEGV": 11,
    "SIGPIPE": 13,
    "SIGALRM": 14,
    "SIGTERM": 15,
}


class Strict(BaseModel):
    """Unknown keys are errors and types strict: `runs = "3"` or `exit_code = "1"` are refused,
    not converted."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


# An exit status as a process reports it (0-255); a signal is `signal`, not a code.
ExitCode = Annotated[int, Field(ge=0, le=255)]


def _regex(v: str | None) -> str | None:
    if v is not None:
        try:
            re.compile(v)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from None
    return v


class Oracle(Strict):
    """How the target behaves on one invocation: every field given must hold. Judged on what the
    harness saw the target itself do (trace_sandbox/gates/oracle.py), never on the reproducer's
    own exit or output."""

    exit_code: ExitCode | Annotated[list[ExitCode], Field(min_length=1)] | None = Field(
        default=None,
        description="the target's exit status, or a list of accepted ones (a set), e.g. [1, 2]",
    )
    signal: str | None = Field(
        default=None, description="the signal the target died of, e.g. SIGSEGV, SIGABRT"
    )
    sanitizer: str | None = Field(
        default=None,
        description="the target's own sanitizer report: 'Tool' or 'Tool: kind', e.g. "
        "'AddressSanitizer: heap-buffer-overflow'",
    )
    output: str | None = Field(
        default=None, description="regex searched (multi-line) in the target's stdout + stderr"
    )
    stdout: str | None = Field(
        default=None,
        description="regex searched (multi-line) in the target's own stdout as the harness "
        "captured it; in [expect] it declares a wrong output (the target may exit 0)",
    )
    stderr: str | None = Field(
        default=None, description="regex searched (multi-line) in the target's own stderr"
    )
    golden: str | None = Field(
        default=None,
        description="file (relative to the candidate) the target's stdout must equal exactly "
        "(as captured: store paths, pids and addresses normalised)",
    )
    not_golden: str | None = Field(
        default=None,
        description="file holding the CORRECT stdout: the target's stdout must differ from it "
        "(in [expect]: a wrong-output bug)",
    )

    @field_validator("signal")
    @classmethod
    def _signal(cls, v: str | None) -> str | None:
        return _known_signal(v)

    @field_validator("output", "stdout", "stderr")
    @classmethod
    def _regexes(cls, v: str | None) -> str | None:
        return _regex(v)

    def codes(self) -> list[int] | None:
        if self.exit_code is None:
            return None
        return [self.exit_code] if isinstance(self.exit_code, int) else sorted(set(self.exit_code))

    def misbehaviour(self) -> bool:
        """Does this oracle declare a misbehaviour (a failure or a wrong output)?"""
        codes = self.codes()
        fields = (self.signal, self.sanitizer, self.output, self.stdout, self.stderr)
        return any(fields) or bool(self.not_golden) or bool(codes and set(codes) != {0})


def _known_signal(v: str | None) -> str | None:
    if v is not None and v not in SIGNALS:
        raise ValueError(f"unknown signal {v!r}; use one of {', '.join(SIGNALS)}")
    return v


class Selectors(Strict):
    """Which target invocations something applies to: every selector given must match."""

    WHAT: ClassVar[str] = "a per-invocation oracle"

    target: str | None = Field(default=None, description="the program, 'bin/NAME' or 'NAME'")
    args: str | None = Field(
        default=None, description="regex searched in the invocation's arguments joined by spaces"
    )
    index: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="1-based position in the run record's canonical order (by program, then "
        "arguments)",
    )

    @field_validator("args")
    @classmethod
    def _args(cls, v: str | None) -> str | None:
        return _regex(v)

    @model_validator(mode="after")
    def _selects(self) -> Selectors:
        if self.target is None and self.args is None and self.index is None:
            raise ValueError(f"{self.WHAT} needs a selector: target, args or index")
        return self


class InvocationOracle(Oracle, Selectors):
    """An oracle for the target invocations it selects (all selectors given must match)."""


class RelationSide(Selectors):
    """The invocations one side of a relation reads (in natural order of their arguments,
    concatenated), and which of their streams."""

    WHAT: ClassVar[str] = "a relation side"

    stream: Literal["stdout", "stdin"] = Field(
        default="stdout", description="what the side's invocations printed, or what they read"
    )


class Relation(Strict):
    """A relation oracle (`[[accept.relation]]`, `[[expect.relation]]`): two sides and how their
    texts relate, where no golden output exists (the paginator's pages 1..k of n items, in page
    order, are the n items on one page). `equal`: a's text is b's; `permutation`: the same lines
    in another order; `prefix`: a's text starts b's; a round trip is `equal` between the
    encoder's `stdin` and the decoder's `stdout`. In [accept] every relation must hold on the
    patched target; in [expect] it is one the unpatched target BREAKS (the bug, as `not_golden`
    is for one output). Judged in the sandbox (trace_sandbox/gates/oracle.py)."""

    a: RelationSide
    b: RelationSide
    relation: Literal["equal", "permutation", "prefix"] = Field(
        description="equal: a's text is b's; permutation: the same lines in another order; "
        "prefix: a's text starts b's"
    )


class Expectation(Oracle):
    """[expect]: how the UNPATCHED target must misbehave. Top-level fields: some invocation
    meets them all; [[expect.invocation]]: every invocation each selects meets it;
    [[expect.relation]]: a relation the unpatched target breaks (`Relation`)."""

    invocation: list[InvocationOracle] = Field(
        default_factory=list, description="per-invocation oracles ([[expect.invocation]])"
    )
    relation: list[Relation] = Field(
        default_factory=list,
        description="relations between invocations the UNPATCHED target breaks (the bug)",
    )

    def misbehaviour(self) -> bool:
        return super().misbehaviour() or bool(self.relation)


class Acceptance(Oracle):
    """[accept]: how the PATCHED target must behave. Top-level fields: every invocation no
    [[accept.invocation]] selects (default: exit code 0); a signal or a sanitizer report is
    never acceptable."""

    invocation: list[InvocationOracle] = Field(
        default_factory=list, description="per-invocation oracles ([[accept.invocation]])"
    )
    relation: list[Relation] = Field(
        default_factory=list,
        description="relations between invocations the PATCHED target keeps ([[accept.relation]])",
    )
