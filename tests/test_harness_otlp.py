"""The harness records a target's own OpenTelemetry spans (issue 32): a loopback OTLP/HTTP
receiver in the harness, the standard exporter variables with a per-invocation token in the
target's environment, the spans kept with the invocation in the run record without times or ids
(deterministic), capped, in a canonical order. Receiver and decoder unit tests here, the harness
run outside the sandbox against the fake package of test_verify_gate (with a target that posts
OTLP/JSON by urllib, tests/fixtures/otlp/emit_spans.py); the real build is in
test_e2e_otlp."""

from __future__ import annotations

import json
import shutil
import socket
import struct
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from engine.build_records import RunRecord
from tests.test_verify_gate import ROOT, run_harness
from trace_sandbox.harness import otlp
from trace_sandbox.harness.otlp_proto import decode_request

EMITTER = Path(__file__).parent / "fixtures" / "otlp" / "emit_spans.py"


def fake_pkg(tmp: Path) -> None:
    """test_verify_gate's fake package (made by a first harness run) plus bin/paginate."""
    run_harness(tmp, "init", "true\n")
    shutil.copy(EMITTER, tmp / "pkg" / "bin" / "paginate")
    (tmp / "pkg" / "bin" / "paginate").chmod(0o755)


def spans_of(rec: dict[str, Any], target: str = "bin/paginate") -> list[dict[str, Any]]:
    """The spans of `target`'s python invocation (bin/paginate is a python script: the python
    process that runs it is the target invocation that exports, with a token of its own)."""
    RunRecord.model_validate(rec)  # the engine's model takes the record
    (inv,) = [i for i in rec["invocations"] if i["target"] == target and i["kind"] == "python"]
    spans: list[dict[str, Any]] = inv["spans"]
    return spans


def test_a_target_s_own_spans_are_kept_with_its_invocation(tmp_path: Path) -> None:
    fake_pkg(tmp_path)
    rec = run_harness(tmp_path, "spans", '"$TARGET/bin/paginate" 23 10\n"$TARGET/bin/ok"\n')
    by_target = {(i["target"], i["kind"]): i for i in rec["invocations"]}
    assert by_target["bin/paginate", "python"]["stdout_tail"] == "3\n"
    assert by_target["bin/ok", "program"]["spans"] == []
    assert by_target["bin/ok", "program"]["spans_dropped"] == 0
    root, *pages = spans_of(rec)
    assert (root["name"], root["parent"], root["scope"], root["status"]) == (
        "paginate",
        None,
        "paginate",
        "ok",
    )
    assert root["attributes"] == {"items": 23, "per.page": 10}
    assert root["events"] == [{"name": "paged", "attributes": {"pages": 3}}]
    assert [(p["name"], p["parent"], p["attributes"]["items"]) for p in pages] == [
        ("page", 0, 10),
        ("page", 0, 10),
        ("page", 0, 3),
    ]
    text = json.dumps(rec["invocations"])
    assert "Nano" not in text and "spanId" not in text and "traceId" not in text


def test_the_spans_are_the_same_on_every_run(tmp_path: Path) -> None:
    fake_pkg(tmp_path)
    script = '"$TARGET/bin/paginate" 7 3\n'
    first = run_harness(tmp_path, "a", script)
    second = run_harness(tmp_path, "b", script)
    assert len(spans_of(first)) == 4  # paginate and its three pages
    assert first["invocations"] == second["invocations"]


def test_the_reproducer_cannot_redirect_or_forge_a_target_s_spans(tmp_path: Path) -> None:
    fake_pkg(tmp_path)
    script = (
        "export OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:9\n"
        "export OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://127.0.0.1:9/v1/traces\n"
        "export OTEL_EXPORTER_OTLP_HEADERS=x-trace-invocation=forged\n"
        '"$TARGET/bin/paginate" 4 2\n"$TARGET/bin/showenv"\n'
    )
    rec = run_harness(tmp_path, "redirect", script)
    assert len(spans_of(rec)) == 3  # exported to the harness, not to the script's endpoint
    env = next(i for i in rec["invocations"] if i["target"] == "bin/showenv")["stdout"]
    assert "127.0.0.1:9" not in env and "forged" not in env
    # each invocation its own token: showenv's is not paginate's
    assert env.count("x-trace-invocation=") == 2  # OTEL_EXPORTER_OTLP[_TRACES]_HEADERS


# The harness as a derivation runs it (`python3 -I -S`, main()), then the modules it loaded
PROBE = (
    "import os, sys\n"
    f"sys.path.insert(0, {str(ROOT)!r})\n"
    "from trace_sandbox.harness.main import main\n"
    "main()\n"
    "with open(os.environ['MODULES_OUT'], 'w') as fh:\n"
    "    fh.write('\\n'.join(sorted(sys.modules)))\n"
)


def harness_modules(tmp: Path, name: str, script: str) -> tuple[dict[str, Any], set[str]]:
    """One harness run in a process of its own: its record and the modules it imported."""
    listing = tmp / f"modules-{name}.txt"
    command = [sys.executable, "-I", "-S", "-c", PROBE]
    rec = run_harness(tmp, name, script, extra_env={"MODULES_OUT": str(listing)}, command=command)
    return rec, set(listing.read_text().split())


def test_the_http_server_is_imported_only_when_a_target_connects(tmp_path: Path) -> None:
    """Every target gets the receiver's address, but a run whose targets export nothing never
    loads http.server (with email, http.client, ssl: a third of the harness's imports, issue
    30), nor `secrets`, `typing` or `tempfile`; a target that exports gets its spans kept."""
    fake_pkg(tmp_path)
    rec, quiet = harness_modules(tmp_path, "quiet", '"$TARGET/bin/ok"\n"$TARGET/bin/showenv"\n')
    showenv = next(i for i in rec["invocations"] if i["target"] == "bin/showenv")
    assert "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:" in showenv["stdout"]
    assert "trace_sandbox.harness.otlp" in quiet
    assert not {"http.server", "email", "secrets", "typing", "tempfile"} & quiet
    rec, loud = harness_modules(tmp_path, "loud", '"$TARGET/bin/paginate" 7 3\n')
    assert "http.server" in loud
    assert len(spans_of(rec)) == 4


# -- the receiver -----------------------------------------------------------------------------


def post(url: str, body: bytes, headers: dict[str, str]) -> int:
    req = urllib.request.Request(url, body, headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def request(*spans: dict[str, Any], scope: str = "s") -> dict[str, Any]:
    return {"resourceSpans": [{"scopeSpans": [{"scope": {"name": scope}, "spans": list(spans)}]}]}


def sp(sid: str, parent: str = "", name: str = "x", **extra: Any) -> dict[str, Any]:
    return {"traceId": "t", "spanId": sid, "parentSpanId": parent, "name": name, **extra}


@pytest.fixture(scope="module")
def receiver() -> Any:
    """One receiver for the module (each test takes its own invocation token)."""
    r = otlp.start_receiver()
    assert r is not None
    yield r
    r.stop()


def test_the_receiver_refuses_what_is_not_a_known_invocation_s_export(receiver: Any) -> None:
    token = receiver.token()
    url = receiver.endpoint + otlp.PATH
    good = {"Content-Type": "application/json", otlp.TOKEN_HEADER: token}
    body = json.dumps(request(sp("a"))).encode()
    assert post(url, body, {**good, otlp.TOKEN_HEADER: "guessed"}) == 403
    assert post(receiver.endpoint + "/v1/metrics", body, good) == 404
    assert post(url, body, {**good, "Content-Type": "text/plain"}) == 415
    assert post(url, b"{not json", good) == 400
    assert post(url, b"\xff\xff\xff", {**good, "Content-Type": "application/x-protobuf"}) == 400
    assert receiver.take(token) == ([], 0)  # nothing of the refused requests was kept
    assert post(url, body, good) == 200
    assert [s["name"] for s in receiver.take(token)[0]] == ["x"]
    assert receiver.env(token)["OTEL_EXPORTER_OTLP_HEADERS"] == f"{otlp.TOKEN_HEADER}={token}"
    given = {"OTEL_EXPORTER_OTLP_CERTIFICATE": "/mine.pem", "OTEL_SERVICE_NAME": "svc", "A": "1"}
    env = receiver.with_env(given, token)
    assert "OTEL_EXPORTER_OTLP_CERTIFICATE" not in env  # every exporter setting is the harness's
    assert env["A"] == "1" and env["OTEL_SERVICE_NAME"] == "svc"


def test_the_receiver_caps_spans_per_invocation(receiver: Any) -> None:
    token = receiver.token()
    many = [sp(f"s{i}") for i in range(otlp.MAX_SPANS + 7)]
    url, headers = receiver.endpoint + otlp.PATH, {otlp.TOKEN_HEADER: token}
    headers["Content-Type"] = "application/json"
    assert post(url, json.dumps(request(*many)).encode(), headers) == 200
    spans, dropped = receiver.take(token)
    assert len(spans) == otlp.MAX_SPANS and dropped == 7


def test_canonical_order_is_by_content_and_survives_forged_ids() -> None:
    a = [sp("r", name="root"), sp("c2", "r", name="b"), sp("c1", "r", name="a")]
    flat = otlp.canonical([otlp.span_of(s, "s") for s in a])
    again = otlp.canonical([otlp.span_of(s, "s") for s in reversed(a)])
    assert flat == again
    assert [(s["name"], s["parent"]) for s in flat] == [("root", None), ("a", 0), ("b", 0)]
    cycle = [sp("p", "q", name="p"), sp("q", "p", name="q"), sp("o", "missing", name="orphan")]
    out = otlp.canonical([otlp.span_of(s, "s") for s in cycle])
    assert [s["name"] for s in out] == ["orphan"]  # a cycle has no root: not placed, no hang


def test_values_kinds_and_status_of_the_json_encoding() -> None:
    s = otlp.span_of(
        sp(
            "a",
            kind="SPAN_KIND_SERVER",
            status={"code": "STATUS_CODE_ERROR", "message": "boom"},
            attributes=[
                {"key": "i", "value": {"intValue": "-5"}},
                {"key": "d", "value": {"doubleValue": 0.5}},
                {"key": "l", "value": {"arrayValue": {"values": [{"boolValue": True}]}}},
                {"key": "m", "value": {"kvlistValue": {"values": [{"key": "k", "value": {}}]}}},
                {"key": "s", "value": {"stringValue": "x" * 5000}},
                {"key": 3, "value": {"stringValue": "not a key"}},
            ],
        ),
        "sc",
    )
    assert (s["kind"], s["status"], s["status_message"]) == ("server", "error", "boom")
    attrs = s["attributes"]
    assert attrs["i"] == -5 and attrs["d"] == 0.5 and attrs["l"] == [True]
    assert attrs["m"] == {"k": None} and len(attrs["s"]) == otlp.MAX_TEXT and 3 not in attrs


# -- protobuf, as the official SDKs send it -----------------------------------------------------


def _varint(n: int) -> bytes:
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out


def _len(num: int, data: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(data)) + data


def _vint(num: int, value: int) -> bytes:
    return _varint(num << 3) + _varint(value)


def _kv(key: str, value: bytes) -> bytes:
    return _len(1, key.encode()) + _len(2, value)


def proto_request() -> bytes:
    string = _len(1, b"hello")
    integer = _vint(3, (1 << 64) - 2)  # int64 -2
    double = _varint(4 << 3 | 1) + struct.pack("<d", 1.5)
    root = (
        _len(1, b"\x01" * 16)
        + _len(2, b"\x02" * 8)
        + _len(5, b"root")
        + _vint(6, 2)
        + _varint(7 << 3 | 1)
        + (123).to_bytes(8, "little")
        + _len(9, _kv("s", string))
        + _len(9, _kv("i", integer))
        + _len(11, _len(2, b"ev") + _len(3, _kv("d", double)))
        + _len(15, _len(2, b"bad") + _vint(3, 2))
        + _vint(99, 7)  # a field this reader does not know: skipped
    )
    child = _len(1, b"\x01" * 16) + _len(2, b"\x03" * 8) + _len(4, b"\x02" * 8) + _len(5, b"kid")
    scope_spans = _len(1, _len(1, b"lib")) + _len(2, root) + _len(2, child)
    return _len(1, _len(2, scope_spans))


def test_protobuf_requests_decode_like_their_json_form(receiver: Any) -> None:
    doc = decode_request(proto_request())
    spans = otlp.canonical(otlp.spans_of_request(doc))
    assert [(s["name"], s["parent"], s["kind"], s["scope"]) for s in spans] == [
        ("root", None, "server", "lib"),
        ("kid", 0, "unspecified", "lib"),
    ]
    assert spans[0]["attributes"] == {"i": -2, "s": "hello"}
    assert spans[0]["events"] == [{"name": "ev", "attributes": {"d": 1.5}}]
    assert (spans[0]["status"], spans[0]["status_message"]) == ("error", "bad")
    token = receiver.token()
    headers = {"Content-Type": "application/x-protobuf", otlp.TOKEN_HEADER: token}
    assert post(receiver.endpoint + otlp.PATH, proto_request(), headers) == 200
    assert receiver.take(token)[0] == spans
    with pytest.raises(ValueError):
        decode_request(proto_request()[:-3])  # truncated


def test_the_official_sdk_s_protobuf_export_is_read(receiver: Any) -> None:
    """The OpenTelemetry SDK's own OTLP/HTTP exporter (protobuf), configured only by the
    variables the harness gives a target, against the receiver: the span tree arrives."""
    sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.trace import Status, StatusCode

    token = receiver.token()
    env = receiver.env(token)
    assert env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "http/protobuf"
    headers = dict([env["OTEL_EXPORTER_OTLP_TRACES_HEADERS"].split("=", 1)])
    exporter = OTLPSpanExporter(endpoint=env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"], headers=headers)
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("pager.lib")
    with tracer.start_as_current_span("render", attributes={"pages": 11, "ok": True}) as root:
        with tracer.start_as_current_span("page") as child:
            child.add_event("cut", {"at": 101})
        root.set_status(Status(StatusCode.ERROR, "last page short"))
    provider.shutdown()
    spans, dropped = receiver.take(token)
    assert dropped == 0
    assert [(s["name"], s["parent"], s["scope"]) for s in spans] == [
        ("render", None, "pager.lib"),
        ("page", 0, "pager.lib"),
    ]
    assert spans[0]["attributes"] == {"ok": True, "pages": 11}
    assert (spans[0]["status"], spans[0]["status_message"]) == ("error", "last page short")
    assert spans[1]["events"] == [{"name": "cut", "attributes": {"at": 101}}]
    assert spans[0]["kind"] == "internal"


def test_stop_ends_the_receiver_even_with_a_connection_that_sends_nothing() -> None:
    """A target that connects and never sends cannot hold the run's end: stop wakes the
    accepting thread at once (no poll), and the port is closed afterwards."""
    r = otlp.start_receiver()
    assert r is not None
    idle = socket.create_connection(("127.0.0.1", r.port), timeout=10)
    try:
        r.stop()
        assert not r.thread.is_alive()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", r.port), timeout=10).close()
    finally:
        idle.close()
