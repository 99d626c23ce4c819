"""The fake server. `answer(role_hint, body)` -> the text to return; None: hang; a `Raw`: that
exact status and body (a reply that is not the API's JSON); a `Trickle`: a 200 whose body comes
one byte every `every_s` seconds (a slow server that never stops talking within a deadline)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# how often the serving loop looks for shutdown(): socketserver's 0.5 s made every test using
# the fake wait up to half a second at its end
POLL = 0.02


@dataclass(frozen=True)
class Raw:
    body: bytes
    status: int = 200
    content_type: str = "application/json"


@dataclass(frozen=True)
class Trickle:
    every_s: float = 2.0
    count: int = 200


Answerer = Callable[[str, dict[str, Any]], "str | Raw | Trickle | None"]


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self.body)
        return doc

    @property
    def user_text(self) -> str:
        return str(self.json["messages"][-1]["content"])


@dataclass
class FakeModelServer:
    """`with FakeModelServer(answer) as srv:` -> srv.anthropic_url, srv.openai_url, srv.requests."""

    answer: Answerer
    requests: list[Recorded] = field(default_factory=list)
    api_key: str = "test-key-not-secret"
    _server: ThreadingHTTPServer | None = None
    _release: threading.Event = field(default_factory=threading.Event)

    @property
    def base(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def anthropic_url(self) -> str:
        return self.base

    @property
    def openai_url(self) -> str:
        return self.base + "/v1"

    def __enter__(self) -> FakeModelServer:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                fake.requests.append(Recorded(self.path, dict(self.headers.items()), body))
                bearer = self.headers.get("authorization") == f"Bearer {fake.api_key}"
                if self.path == "/v1/messages":
                    # the Messages API takes x-api-key (newer SDKs send a bearer token) and
                    # always an anthropic-version header
                    ok = (self.headers.get("x-api-key") == fake.api_key or bearer) and bool(
                        self.headers.get("anthropic-version")
                    )
                elif self.path == "/v1/chat/completions":
                    ok = bearer
                else:
                    self._send(404, {"error": {"type": "not_found", "message": self.path}})
                    return
                if not ok:
                    self._send(
                        401,
                        {
                            "type": "error",
                            "error": {"type": "authentication_error", "message": "bad key"},
                        },
                    )
                    return
                doc = json.loads(body)
                text = fake.answer(self.path, doc)
                if text is None:  # never answer: hold the connection until the test ends
                    fake._release.wait(60)
                    return
                if isinstance(text, Raw):
                    self._send_raw(text.status, text.content_type, text.body)
                    return
                if isinstance(text, Trickle):
                    self._trickle(text)
                    return
                if self.path == "/v1/messages":
                    self._send(200, _anthropic(doc, text))
                else:
                    self._send(200, _openai(doc, text))

            def _send(self, status: int, doc: dict[str, Any]) -> None:
                self._send_raw(status, "application/json", json.dumps(doc).encode())

            def _send_raw(self, status: int, content_type: str, raw: bytes) -> None:
                self.send_response(status)
                self.send_header("content-type", content_type)
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def _trickle(self, how: Trickle) -> None:
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(how.count))
                self.end_headers()
                self.wfile.flush()
                for _ in range(how.count):  # bounded: stops by itself, or when the test ends
                    if fake._release.wait(how.every_s):
                        return
                    try:
                        self.wfile.write(b" ")
                        self.wfile.flush()
                    except OSError:
                        return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": POLL}, daemon=True
        ).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def _anthropic(req: dict[str, Any], text: str) -> dict[str, Any]:
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": req.get("model", "fake"),
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


def _openai(req: dict[str, Any], text: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": req.get("model", "fake"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
