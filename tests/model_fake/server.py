"""The fake server. `answer(role_hint, body) -> str | None`: the text to return (None: hang)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answerer = Callable[[str, dict[str, Any]], str | None]


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
                if self.path == "/v1/messages":
                    self._send(200, _anthropic(doc, text))
                else:
                    self._send(200, _openai(doc, text))

            def _send(self, status: int, doc: dict[str, Any]) -> None:
                raw = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
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
