"""A run's steps as OpenTelemetry spans (`trace run|verify --otel FILE|URL`).

`StepClock` wraps a run's reporter and notes when each step reached each state; `export` turns
the run's result into one root span and one child span per step (key, status, cached or built,
builder, .drv, duration from the clock), with every gate record (`trace.gate/v1`) as a span
event on its step, and hands them to the official SDK's exporter: OTLP/HTTP (protobuf) for an
`http(s)://` URL, JSON lines (one span per line, the SDK's own JSON form) for a file.

The SDK is imported only here and only when `--otel` is given (`pip install 'trace[otel]'`);
`check_target` refuses a missing SDK or a bad target before any work.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import UsageError

if TYPE_CHECKING:
    from engine.run import RunResult, StepResult

Reporter = Callable[[str, str], None]
DEADLINE_S = 10.0  # every export call to an OTLP endpoint ends by then
SCOPE = "trace"
_INSTALL = "install the OpenTelemetry SDK: pip install 'trace[otel]'"
_ENDS = {"built", "reused", "substituted", "cached", "failed", "skipped"}


@dataclass
class StepClock:
    """A reporter that notes, per step, the first time (ns since the epoch) of each state."""

    inner: Reporter | None = None
    began: int = field(default_factory=time.time_ns)
    seen: dict[str, dict[str, int]] = field(default_factory=dict)

    def __call__(self, step_id: str, state: str) -> None:
        self.seen.setdefault(step_id, {}).setdefault(state, time.time_ns())
        if self.inner is not None:
            self.inner(step_id, state)

    def wrapping(self, inner: Reporter) -> StepClock:
        """This clock, passing every report on to `inner` too."""
        self.inner = inner
        return self

    def span_of(self, step_id: str, end: int) -> tuple[int, int]:
        """(start, end) of a step: from its build starting (else its queueing, else the run's
        start) to the last state it reached (checked after built), never before its start."""
        states = self.seen.get(step_id, {})
        start = states.get("building", states.get("queued", self.began))
        stop = max((t for s, t in states.items() if s in _ENDS | {"checked"}), default=end)
        return start, max(stop, start)


def check_target(target: str) -> None:
    """Refuse, before any work, an `--otel` target that cannot be written or a missing SDK."""
    need = ["opentelemetry.sdk.trace"]
    if _is_url(target):
        need.append("opentelemetry.exporter.otlp.proto.http")
    elif not Path(target).parent.is_dir():
        raise UsageError(
            f"--otel {target}: folder {Path(target).parent} does not exist",
            hint="name a file in an existing folder, or an http(s):// OTLP endpoint",
        )
    for module in need:
        if not _importable(module):
            raise UsageError(f"--otel needs {module}, which is not installed", hint=_INSTALL)


def _importable(module: str) -> bool:
    from importlib.util import find_spec

    try:
        return find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def _is_url(target: str) -> bool:
    return target.startswith(("http://", "https://"))


def export(
    result: RunResult, clock: StepClock, target: str, *, name: str, attributes: Mapping[str, str]
) -> None:
    """Write the run as spans to `target` (a file: JSON lines; a URL: OTLP/HTTP)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "trace"}))
    exporter = _exporter(target)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        _spans(provider.get_tracer(SCOPE), result, clock, name, attributes)
    finally:
        provider.shutdown()


def _exporter(target: str) -> Any:
    if _is_url(target):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(endpoint=target, timeout=DEADLINE_S)
    return _JsonLines(Path(target))


def _spans(
    tracer: Any, result: RunResult, clock: StepClock, name: str, attributes: Mapping[str, str]
) -> None:
    from opentelemetry import trace as api

    end = time.time_ns()
    root = tracer.start_span(name, start_time=clock.began, attributes=dict(attributes))
    context = api.set_span_in_context(root)
    for sid, step in result.steps.items():
        start, stop = clock.span_of(sid, end)
        span = tracer.start_span(
            sid, context=context, start_time=start, attributes=step_attributes(step)
        )
        for event in gate_events(step.outcome):
            span.add_event("trace.gate", attributes=event, timestamp=stop)
        if step.status in ("failed", "skipped"):
            span.set_status(api.Status(api.StatusCode.ERROR, step.status))
        span.end(end_time=stop)
    if not result.ok:
        root.set_status(api.Status(api.StatusCode.ERROR, "a step failed"))
    root.end(end_time=end)


def step_attributes(step: StepResult) -> dict[str, str | bool]:
    """A step span's attributes (OTel attribute values: no None)."""
    attrs: dict[str, str | bool] = {
        "trace.step.id": step.id,
        "trace.step.key": step.key,
        "trace.step.status": step.status,
        "trace.step.cached": step.status == "cached",
    }
    optional = {"trace.step.builder": step.built_on, "trace.step.drv": step.drv}
    attrs.update({k: v for k, v in optional.items() if v})
    if step.deterministic is not None:
        attrs["trace.step.deterministic"] = step.deterministic
    return attrs


def gate_events(outcome: object) -> list[dict[str, str | bool | float | Sequence[str]]]:
    """The gate records in a step's outcome, as span event attributes."""
    records = outcome if isinstance(outcome, list) else [outcome]
    events: list[dict[str, str | bool | float | Sequence[str]]] = []
    for rec in records:
        if isinstance(rec, dict) and rec.get("schema") == "trace.gate/v1":
            event: dict[str, str | bool | float | Sequence[str]] = {
                "trace.gate": str(rec.get("gate", "")),
                "trace.gate.passed": bool(rec.get("passed")),
                "trace.gate.measurable": bool(rec.get("measurable", True)),
                "trace.gate.reasons": [str(r) for r in rec.get("reasons", [])],
            }
            if isinstance(rec.get("score"), int | float):
                event["trace.gate.score"] = float(rec["score"])
            events.append(event)
    return events


class _JsonLines:
    """A SpanExporter writing each span as one line of the SDK's own JSON form."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.path.write_text("", encoding="utf-8")

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        with self.path.open("a", encoding="utf-8") as f:
            for span in spans:
                f.write(span.to_json(indent=None) + "\n")
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True
