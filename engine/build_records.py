"""Records that builds produce and that gates, policies and evidence consume.

These are the typed contract between modules: a reproducer run writes a `RunRecord` (as JSON in
its derivation's `$out/outcome.json`), a gate writes a `GateRecord`, and `trace verify` collects
them into a `VerifyResult`. Field names are stable: bundles and policies refer to them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

Side = Literal["pre", "post"]


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Sanitizer(Record):
    tool: str = Field(description="e.g. AddressSanitizer")
    kind: str = Field(
        description="the report's SUMMARY kind, e.g. heap-buffer-overflow, double-free, SEGV"
    )


class Stdin(Record):
    """What a target got on stdin (a file or a pipe), as the harness recorded it."""

    complete: bool = Field(description="false: more than 64 KiB, or never reached EOF")
    size: int | None = None
    sha256: str | None = None
    b64: str | None = Field(default=None, description="the bytes, base64")


class Frame(Record):
    """One frame of where the target failed, innermost first (trace_sandbox/gates/faultsite.py)."""

    function: str | None = None
    file: str | None = Field(default=None, description="as the report names it (normalised)")
    line: int | None = None
    source: Literal["sanitizer", "python"] = Field(
        description="the target's own sanitizer report or Python traceback"
    )


class SpanEvent(Record):
    """An event of a target's span: its name and attributes (no timestamp)."""

    name: str
    attributes: dict[str, JsonValue] = Field(default_factory=dict)


class Span(Record):
    """One OpenTelemetry span a target exported to the harness's loopback OTLP receiver
    (trace_sandbox/harness/otlp.py), deterministic: no timestamps, no trace or span ids."""

    name: str
    kind: Literal["unspecified", "internal", "server", "client", "producer", "consumer"]
    scope: str = Field(default="", description="the instrumentation scope's name")
    attributes: dict[str, JsonValue] = Field(default_factory=dict)
    events: list[SpanEvent] = Field(default_factory=list, description="in time order")
    status: Literal["unset", "ok", "error"] = "unset"
    status_message: str = ""
    parent: int | None = Field(
        default=None,
        description="its parent's index in the invocation's `spans` (None: a root, or a parent "
        "this invocation did not export)",
    )


class Invocation(Record):
    """One call of the package's own program, or one python process that ran the package's
    modules, as trace's harness saw it end: the target ran it, not the reproducer's account."""

    target: str = Field(
        description="bin/<name> for a program; for a python process the first module file of "
        "the package it opened, e.g. lib/python/pager/__init__.py"
    )
    kind: Literal["program", "python"] = "program"
    args: list[str] = Field(default_factory=list, description="arguments (normalised paths)")
    exit_code: int | None = None
    signal: str | None = None
    sanitizer: Sanitizer | None = Field(
        default=None, description="a sanitizer report on this invocation's own stderr"
    )
    opened: list[str] = Field(
        default_factory=list, description="the package's files a python process opened"
    )
    stdout_tail: str = ""
    stderr_tail: str = ""
    stdin: Stdin | None = Field(
        default=None, description="stdin as the target got it, when a file or a pipe"
    )
    stdout: str | None = Field(
        default=None,
        description="the target's stdout as captured (normalised; whole up to 16000 characters, "
        "else head and tail): what [expect]/[accept] regexes read",
    )
    stderr: str | None = Field(default=None, description="the same for stderr")
    stdout_sha256: str | None = Field(
        default=None, description="digest of the whole captured stdout (golden files)"
    )
    stderr_sha256: str | None = None
    frames: list[Frame] = Field(
        default_factory=list,
        description="where it failed: its sanitizer report's first stack or its Python "
        "traceback, innermost first (empty: no report, e.g. a wrong output or a bare signal)",
    )
    lifetime_frames: dict[Literal["freed", "allocated"], list[Frame]] = Field(
        default_factory=dict,
        description="a lifetime bug's (heap-use-after-free, double-free) other stacks: where "
        "the memory was freed and where it was allocated, innermost first",
    )
    spans: list[Span] = Field(
        default_factory=list,
        description="the target's own OpenTelemetry spans, exported over OTLP/HTTP to the "
        "harness (docs/telemetry.md); siblings in a canonical order, parents before children",
    )
    spans_dropped: int = Field(default=0, description="spans past the harness's cap, not kept")
    ended: Literal["killed-by-harness", "timed-out", "broken-pipe"] | None = Field(
        default=None,
        description="None: the target ended on its own. killed-by-harness: still running when "
        "the reproducer ended; timed-out: still running when the reproducer timed out (neither "
        "has an exit code or signal); broken-pipe: died of SIGPIPE after its reader went away. "
        "None of these is a target failure (a sanitizer report still is)",
    )

    @property
    def failed(self) -> bool:
        if self.ended is not None and self.sanitizer is None:
            return False
        return (
            self.exit_code not in (0, None) or self.signal is not None or self.sanitizer is not None
        )


class RunRecord(Record):
    """How one reproducer run against one build ended. Deterministic: no times, no temp paths.

    The verdict rests on the target's own behaviour: `invocations` (each target invocation's exit,
    signal, sanitizer report and output, seen by the harness), `target_ran`, `target_failed` and
    `sanitizer` (the first report on a target invocation's stderr). `exit_code`, `signal` and the
    output digests/tails are the reproducer script's own, kept for reviewers: a failure only the
    script reports (an echoed sanitizer line, an exit 1) is not the target failing."""

    schema_: Literal["trace.run/v1"] = Field(default="trace.run/v1", alias="schema")
    side: Side | None = Field(
        default=None,
        description="set by the engine from the step the record came from (the run itself is "
        "not told its side)",
    )
    run: int
    build: Literal["ok", "failed"] = "ok"
    target_ran: bool
    target_failed: bool = Field(
        default=False, description="a target invocation exited non-zero, died or reported"
    )
    invocations: list[Invocation] = Field(default_factory=list)
    exit_code: int | None = Field(default=None, description="the reproducer script's")
    signal: str | None = Field(default=None, description="the reproducer script's")
    timed_out: bool = Field(
        default=False, description="the reproducer hit its timeout: the run failed"
    )
    sanitizer: Sanitizer | None = Field(
        default=None, description="the first sanitizer report of a target invocation"
    )
    stdout_sha256: str | None = None
    stderr_sha256: str | None = None
    stdout_tail: str = ""
    stderr_tail: str = ""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @property
    def failed(self) -> bool:
        """The target failed: one of its invocations did (never the script's own account)."""
        return any(i.failed for i in self.invocations)

    @property
    def script_failed(self) -> bool:
        return self.exit_code not in (0, None) or self.signal is not None or self.timed_out


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
