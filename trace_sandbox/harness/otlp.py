"""The targets' own OpenTelemetry spans: a loopback OTLP/HTTP receiver the harness runs.

Stdlib only (the sandbox has no OpenTelemetry package). The harness serves OTLP/HTTP on
127.0.0.1 (a port of the kernel's choosing, inside the build's network namespace) and gives every
target invocation the standard exporter variables pointing at it (`otel_env`), with a token of
its own in `OTEL_EXPORTER_OTLP_HEADERS`: what arrives with that token is that invocation's. The
reproducer never sees a target's environment (its own PID namespace), so it cannot post spans
in a target's name; whatever OTEL_EXPORTER_OTLP_* a reproducer sets is replaced.

Accepted: `POST /v1/traces` with an ExportTraceServiceRequest as OTLP/JSON (`application/json`;
the OpenTelemetry JSON encoding: hex ids, enums as integers or names) or as protobuf
(`application/x-protobuf`, decoded by `otlp_proto`: the official Python and Go SDKs' default).
Refused: an unknown token (403), another path (404), a body over MAX_BODY (413), another media
type (415), a body that does not decode (400).

The record keeps the spans deterministic (a reproducer run is a `--check`ed derivation and a
bundle's replay compares records bit for bit): no timestamps, no trace or span ids; each span's
name, kind, instrumentation scope, attributes, events (names and attributes, in time order),
status and its parent as an index into the invocation's list. Siblings are ordered by their
content (`canonical`), not by when they ran. At most MAX_SPANS spans per invocation (the rest
counted in `spans_dropped`), MAX_ATTRIBUTES attributes per span or event, strings cut at
MAX_TEXT characters.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading

from .otlp_proto import decode_request

TYPE_CHECKING = False  # typing only for the type checker (isolation.py)
if TYPE_CHECKING:
    from collections.abc import Callable
    from http.server import BaseHTTPRequestHandler
    from typing import Any

TOKEN_HEADER = "x-trace-invocation"
PATH = "/v1/traces"
MAX_BODY = 1 << 20
MAX_SPANS = 200
MAX_ATTRIBUTES = 64
MAX_TEXT = 1000
KINDS = ("unspecified", "internal", "server", "client", "producer", "consumer")
STATUS = ("unset", "ok", "error")


def _enum(value: Any, names: tuple[str, ...], prefix: str) -> str:
    """An OTLP enum given as an integer or as its name (`SPAN_KIND_SERVER`)."""
    if isinstance(value, int) and 0 <= value < len(names):
        return names[value]
    if isinstance(value, str) and value.lower().removeprefix(prefix) in names:
        return value.lower().removeprefix(prefix)
    return names[0]


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str:
    return str(value)[:MAX_TEXT]


def any_value(v: Any) -> Any:
    """An OTLP AnyValue as plain JSON."""
    if not isinstance(v, dict):
        return None
    if "stringValue" in v:
        return _text(v["stringValue"])
    if "boolValue" in v:
        return bool(v["boolValue"])
    if "intValue" in v:
        try:
            return int(v["intValue"])  # JSON carries int64 as a string
        except (TypeError, ValueError):
            return None
    if "doubleValue" in v:
        try:
            return float(v["doubleValue"])
        except (TypeError, ValueError):
            return None
    if "arrayValue" in v:
        values = (v["arrayValue"] or {}).get("values") or []
        return [any_value(x) for x in values[:MAX_ATTRIBUTES]]
    if "kvlistValue" in v:
        return attributes((v["kvlistValue"] or {}).get("values"))
    if "bytesValue" in v:
        return _text(v["bytesValue"])
    return None


def attributes(kvs: Any) -> dict[str, Any]:
    """OTLP KeyValues as a dict (the first MAX_ATTRIBUTES; a repeated key: its last value)."""
    out: dict[str, Any] = {}
    for kv in kvs[:MAX_ATTRIBUTES] if isinstance(kvs, list) else []:
        if isinstance(kv, dict) and isinstance(kv.get("key"), str):
            out[_text(kv["key"])] = any_value(kv.get("value"))
    return dict(sorted(out.items()))


def _event(e: Any) -> tuple[int, dict[str, Any]]:
    e = e if isinstance(e, dict) else {}
    try:
        when = int(e.get("timeUnixNano") or 0)
    except (TypeError, ValueError):
        when = 0
    return when, {"name": _text(e.get("name", "")), "attributes": attributes(e.get("attributes"))}


def span_of(s: dict[str, Any], scope: str) -> dict[str, Any]:
    """One OTLP span, without its times and ids (kept aside under `_id`, `_parent`)."""
    status = _dict(s.get("status"))
    events = sorted((_event(e) for e in s.get("events") or []), key=lambda x: x[0])
    return {
        "name": _text(s.get("name", "")),
        "kind": _enum(s.get("kind"), KINDS, "span_kind_"),
        "scope": scope,
        "attributes": attributes(s.get("attributes")),
        "events": [e for _, e in events[:MAX_ATTRIBUTES]],
        "status": _enum(status.get("code"), STATUS, "status_code_"),
        "status_message": _text(status.get("message", "")),
        "_id": (str(s.get("traceId", "")), str(s.get("spanId", ""))),
        "_parent": (str(s.get("traceId", "")), str(s.get("parentSpanId") or "")),
    }


def spans_of_request(doc: Any) -> list[dict[str, Any]]:
    """Every span of an ExportTraceServiceRequest (JSON form), in the order sent."""
    out: list[dict[str, Any]] = []
    for rs in doc.get("resourceSpans") or [] if isinstance(doc, dict) else []:
        for ss in (rs.get("scopeSpans") or []) if isinstance(rs, dict) else []:
            if not isinstance(ss, dict):
                continue
            scope = _dict(ss.get("scope"))
            for s in ss.get("spans") or []:
                if isinstance(s, dict):
                    out.append(span_of(s, _text(scope.get("name", ""))))
    return out


def canonical(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The spans as a forest in a deterministic order (siblings by content, then depth first),
    each with `parent`: its parent's index in the list (None for a root or an unknown parent)."""
    ids = {s["_id"] for s in spans}
    children: dict[Any, list[dict[str, Any]]] = {}
    for s in spans:
        children.setdefault(s["_parent"] if s["_parent"] in ids else None, []).append(s)
    keys: dict[int, str] = {}

    def key(s: dict[str, Any], seen: frozenset[Any]) -> str:
        if id(s) not in keys:
            below = [] if s["_id"] in seen else children.get(s["_id"], [])
            inner = sorted(key(c, seen | {s["_id"]}) for c in below)
            keys[id(s)] = json.dumps([_public(s), inner], sort_keys=True)
        return keys[id(s)]

    out: list[dict[str, Any]] = []
    placed: set[int] = set()

    def place(s: dict[str, Any], parent: int | None) -> None:
        if id(s) in placed:  # a forged cycle of ids: each span once
            return
        placed.add(id(s))
        out.append({**_public(s), "parent": parent})
        me = len(out) - 1
        for c in sorted(children.get(s["_id"], []), key=lambda c: key(c, frozenset())):
            place(c, me)

    for root in sorted(children.get(None, []), key=lambda c: key(c, frozenset())):
        place(root, None)
    return out


def map_strings(value: Any, f: Callable[[str], str]) -> Any:
    """`value` with `f` applied to every string in it (keys included)."""
    if isinstance(value, str):
        return f(value)
    if isinstance(value, list):
        return [map_strings(v, f) for v in value]
    if isinstance(value, dict):
        return {f(k) if isinstance(k, str) else k: map_strings(v, f) for k, v in value.items()}
    return value


def _public(s: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in s.items() if not k.startswith("_")}


LISTEN_BACKLOG = 64  # connections waiting to be accepted (socketserver's default was 5)


class Receiver:
    """The loopback OTLP/HTTP receiver of one reproducer run (see the module's docstring).

    Its socket is bound and listening from the start (every target invocation is given its
    address), but its HTTP code (`http.server`, which loads `email`, `http.client` and more: a
    third of the harness's imports) is loaded only when a target connects: most targets export
    nothing. One thread waits in accept() and answers each connection in a thread of its own
    (as ThreadingHTTPServer did, with the same request handler); `stop` wakes it at once by
    shutting the listener down (the server's select loop it replaced was polled for its stop,
    which cost every run up to its poll interval)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.received: dict[str, list[dict[str, Any]]] = {}
        self.dropped: dict[str, int] = {}
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as HTTPServer
            self.listener.bind(("127.0.0.1", 0))
            self.listener.listen(LISTEN_BACKLOG)
        except OSError:
            self.listener.close()
            raise
        self.port = int(self.listener.getsockname()[1])
        self.handler: type[BaseHTTPRequestHandler] | None = None
        self.thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Receiver:
        self.thread.start()
        return self

    def _serve(self) -> None:
        while True:
            try:
                conn, addr = self.listener.accept()
            except OSError:  # stop() shut the listener down
                return
            threading.Thread(target=self._answer, args=(conn, addr), daemon=True).start()

    def _answer(self, conn: socket.socket, addr: Any) -> None:
        """One connection, answered as ThreadingHTTPServer answered it: the request handler,
        then the write side shut down and the socket closed."""
        try:
            if self.handler is None:  # the first connection of the run (a race makes two: alike)
                self.handler = _handler(self)
            self.handler(conn, addr, None)  # type: ignore[arg-type]  # it never reads `server`
        except Exception as exc:  # as socketserver's handle_error: reported, the run goes on
            sys.stderr.write(f"trace harness: an OTLP request failed: {exc!r}\n")
        finally:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_WR)
            conn.close()

    def stop(self) -> None:
        """Stop accepting (connections already accepted are answered in their own threads, as
        before: the run's spans were taken by then)."""
        with contextlib.suppress(OSError):
            # wakes the blocking accept() at once: it fails on a shut-down listener
            self.listener.shutdown(socket.SHUT_RDWR)
        if self.thread.ident is not None:
            self.thread.join()
        self.listener.close()

    def token(self) -> str:
        """A new invocation's token (its spans are kept under it): 16 random bytes in hex, as
        secrets.token_hex(16) (whose import loads `random`, `hmac` and `base64`) makes it."""
        token = os.urandom(16).hex()
        with self.lock:
            self.received[token] = []
            self.dropped[token] = 0
        return token

    def env(self, token: str) -> dict[str, str]:
        """The exporter variables a target invocation gets."""
        return {
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint,
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": self.endpoint + PATH,
            # OTLP over HTTP (the spec's default protocol, what the official SDKs speak over
            # HTTP); a JSON exporter's `application/json` posts are accepted as well
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_HEADERS": f"{TOKEN_HEADER}={token}",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS": f"{TOKEN_HEADER}={token}",
        }

    def with_env(self, env: dict[str, str], token: str) -> dict[str, str]:
        """`env` with every OTEL_EXPORTER_OTLP_* replaced by this receiver's for `token`."""
        kept = {k: v for k, v in env.items() if not k.startswith("OTEL_EXPORTER_OTLP")}
        return {**kept, **self.env(token)}

    def keep(self, token: str, spans: list[dict[str, Any]]) -> bool:
        """Keep `spans` for `token`'s invocation (False: an unknown token)."""
        with self.lock:
            kept = self.received.get(token)
            if kept is None:
                return False
            room = max(MAX_SPANS - len(kept), 0)
            kept.extend(spans[:room])
            self.dropped[token] += len(spans) - min(room, len(spans))
        return True

    def take(self, token: str | None) -> tuple[list[dict[str, Any]], int]:
        """An invocation's spans (canonical) and how many were dropped past the cap."""
        with self.lock:
            spans = list(self.received.get(token or "", []))
            dropped = self.dropped.get(token or "", 0)
        return canonical(spans), dropped


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    """The receiver's request handler (http.server's, imported here: on the first connection)."""
    from http.server import BaseHTTPRequestHandler

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            status = self._status()
            body = b"{}" if status == 200 else b""
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _status(self) -> int:
            if self.path.split("?", 1)[0] != PATH:
                return 404
            token = self.headers.get(TOKEN_HEADER, "")
            with receiver.lock:
                known = token in receiver.received
            if not known:
                return 403
            size = int(self.headers.get("Content-Length") or 0)
            if size < 0 or size > MAX_BODY:
                return 413
            decode = _decoder(self.headers.get("Content-Type", ""))
            if decode is None:
                return 415
            try:
                spans = spans_of_request(decode(self.rfile.read(size)))
            except (ValueError, RecursionError, UnicodeDecodeError):
                return 400
            receiver.keep(token, spans)
            return 200

        def log_message(self, format: str, *args: Any) -> None:
            return None

    return Handler


def _decoder(content_type: str) -> Callable[[bytes], Any] | None:
    media = content_type.split(";", 1)[0].strip().lower()
    if media == "application/json":
        return json.loads
    if media == "application/x-protobuf":
        return decode_request
    return None


def start_receiver() -> Receiver | None:
    """The run's receiver, serving; None when no loopback address can be bound."""
    try:
        return Receiver().start()
    except OSError:
        return None
