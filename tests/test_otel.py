"""`trace run|verify --otel FILE|URL`: a run's steps as OpenTelemetry spans (issue 32).

Unit tests for the clock and the gate events; real builds for `trace run --otel FILE` (the JSON
lines of the SDK) and `trace verify --otel URL` against a loopback OTLP/HTTP collector that
decodes the real protobuf request."""

from __future__ import annotations

import http.server
import json
import shutil
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from engine.errors import UsageError
from engine.otel import StepClock, check_target, gate_events
from tests.enginekit import cli, make_project

FIXTURE = Path(__file__).parent / "fixtures" / "fork"


def test_clock_spans_a_step_from_building_to_its_end() -> None:
    clock = StepClock(began=100)
    seen: list[tuple[str, str]] = []
    clock.wrapping(lambda s, st: seen.append((s, st)))
    clock.seen = {
        "a": {"queued": 110, "building": 120, "built": 150, "checked": 170},
        "b": {"cached": 105},
        "c": {"queued": 130},  # never ended: the run's end
    }
    assert clock.span_of("a", 999) == (120, 170)
    assert clock.span_of("b", 999) == (100, 105)
    assert clock.span_of("c", 999) == (130, 999)
    clock("d", "queued")
    clock("d", "queued")  # the first time counts
    assert seen == [("d", "queued"), ("d", "queued")]
    assert list(clock.seen["d"]) == ["queued"]


def test_gate_events_take_gate_records_only() -> None:
    record = {
        "schema": "trace.gate/v1",
        "gate": "mutation",
        "passed": False,
        "measurable": True,
        "score": 0.5,
        "reasons": ["mutation-score-below-threshold"],
    }
    assert gate_events(record) == [
        {
            "trace.gate": "mutation",
            "trace.gate.passed": False,
            "trace.gate.measurable": True,
            "trace.gate.reasons": ["mutation-score-below-threshold"],
            "trace.gate.score": 0.5,
        }
    ]
    assert gate_events({"schema": "trace.run/v1"}) == []
    assert gate_events(None) == []
    assert [e["trace.gate"] for e in gate_events([record, {"x": 1}])] == ["mutation"]


def test_bad_target_and_missing_sdk_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        check_target(str(tmp_path / "no" / "spans.jsonl"))
    check_target(str(tmp_path / "spans.jsonl"))
    monkeypatch.setattr("engine.otel._importable", lambda m: "exporter" not in m)
    with pytest.raises(UsageError, match=r"opentelemetry\.exporter"):
        check_target("http://127.0.0.1:4318/v1/traces")


def test_run_with_a_bad_otel_target_writes_nothing(tmp_path: Path) -> None:
    graph = make_project(tmp_path / "p", '[steps.a]\nkind = "text"\n')
    rc, _, err = cli("run", str(graph), "--root", str(graph.parent), "--otel", "/nonexistent/x")
    assert rc == 2 and "--otel" in err
    assert not (graph.parent / ".trace").exists()


def _spans(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.nix
def test_run_writes_one_span_per_step_under_one_root(tmp_path: Path) -> None:
    salt = uuid.uuid4().hex
    steps = f'[steps.a]\nkind = "text"\nparams = {{ message = "{salt}" }}\n'
    steps += '[steps.b]\nkind = "text"\nneeds = ["a"]\n'
    graph = make_project(tmp_path / "p", steps)
    root = str(graph.parent)
    out = tmp_path / "spans.jsonl"
    rc, _, err = cli("run", str(graph), "--root", root, "-q", "--otel", str(out))
    assert rc == 0, err
    spans = _spans(out)
    (top,) = [s for s in spans if s["parent_id"] is None]
    assert top["name"] == f"trace run {graph}"
    steps_ = {s["name"]: s for s in spans if s["parent_id"] == top["context"]["span_id"]}
    assert set(steps_) == {"a", "b"} and len(spans) == 3
    assert {s["context"]["trace_id"] for s in spans} == {top["context"]["trace_id"]}
    for name, span in steps_.items():
        attrs = span["attributes"]
        assert attrs["trace.step.id"] == name and len(attrs["trace.step.key"]) == 64
        assert attrs["trace.step.status"] == "built" and attrs["trace.step.cached"] is False
        assert attrs["trace.step.drv"].endswith(".drv") and attrs["trace.step.builder"] == "local"
    # a rerun answers both from the cache (--otel never takes the stat-only no-op path)
    rc, _, err = cli("run", str(graph), "--root", root, "-q", "--otel", str(out))
    assert rc == 0, err
    statuses = {s["name"]: s["attributes"].get("trace.step.status") for s in _spans(out)}
    assert statuses["a"] == statuses["b"] == "cached"


class _Collector(http.server.BaseHTTPRequestHandler):
    """A loopback OTLP/HTTP trace receiver: decodes each ExportTraceServiceRequest."""

    received: ClassVar[list[Any]] = []

    def do_POST(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
            ExportTraceServiceResponse,
        )

        body = self.rfile.read(int(self.headers["Content-Length"]))
        assert self.headers["Content-Type"] == "application/x-protobuf"
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        type(self).received.append(request)
        reply = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture
def collector() -> Iterator[str]:
    _Collector.received = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    server.timeout = 10
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _received_spans() -> list[Any]:
    return [
        span
        for request in _Collector.received
        for rs in request.resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
    ]


def _attrs(span: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in span.attributes:
        kind = kv.value.WhichOneof("value")
        value = getattr(kv.value, kind)
        out[kv.key] = list(v.string_value for v in value.values) if kind == "array_value" else value
    return out


@pytest.mark.nix
def test_verify_sends_its_steps_and_gate_records_to_an_otlp_collector(
    tmp_path: Path, collector: str
) -> None:
    fork = tmp_path / "fork"
    shutil.copytree(FIXTURE, fork, ignore=shutil.ignore_patterns(".trace", "result*"))
    candidate = fork / "trace" / "candidates" / "pager-last-page" / "candidate.toml"
    rc, out, err = cli("verify", str(candidate), "--fork", str(fork), "-q", "--otel", collector)
    assert rc == 0, out + err
    spans = _received_spans()
    (top,) = [s for s in spans if not s.parent_span_id]
    assert top.name == "trace verify TRACE-2026-0002-pager"
    children = {s.name: s for s in spans if s.parent_span_id == top.span_id}
    assert len(children) == len(spans) - 1 and {"pre-fix", "post-fix"} <= set(children)
    assert all(s.trace_id == top.trace_id for s in spans)
    post = _attrs(children["post-fix"])
    # built here, or already in the store (another test built the same derivation): not cached
    assert post["trace.step.status"] in ("built", "reused") and post["trace.step.cached"] is False
    assert post["trace.step.drv"].endswith(".drv") and len(post["trace.step.key"]) == 64
    assert children["post-fix"].end_time_unix_nano >= children["post-fix"].start_time_unix_nano
    gates = {
        _attrs_of_event(e)["trace.gate"]: _attrs_of_event(e)
        for s in spans
        for e in s.events
        if e.name == "trace.gate"
    }
    assert gates["expectation"]["trace.gate.passed"] is True
    assert {"scope", "mutation", "coverage"} <= set(gates)


def _attrs_of_event(event: Any) -> dict[str, Any]:
    return _attrs(event)
