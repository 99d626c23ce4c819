"""Model backends against the loopback fake server: both wire formats, the transcript key,
replay without the server, --refresh, deadlines, missing credentials and unreachable endpoints."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from engine.errors import ModelError
from engine.models.ask import ask
from engine.models.model_spec import ModelSpec, Parameters, Request
from engine.models.transcript import TranscriptStore, transcript_key
from tests.model_fake import FakeModelServer, Raw, Trickle

KEY = "test-key-not-secret"


def _spec(srv: FakeModelServer, backend: str, **kw: Any) -> ModelSpec:
    url = srv.anthropic_url if backend == "anthropic" else srv.openai_url
    return ModelSpec(
        backend=backend,  # type: ignore[arg-type]
        model=f"{backend}-model-1",
        base_url=url,
        api_key_env="FAKE_MODEL_KEY",
        **kw,
    )


REQ = Request(role="patcher", system="You fix bugs.", prompt="Fix it.", inputs={"a": "00"})


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_MODEL_KEY", KEY)


@pytest.mark.parametrize("backend", ["anthropic", "openai"])
def test_each_wire_format_is_asked_and_recorded(backend: str, tmp_path: Path) -> None:
    answers = iter(["first answer", "second answer"])
    with FakeModelServer(lambda path, doc: next(answers)) as srv:
        spec = _spec(srv, backend, parameters=Parameters(temperature=0.2, seed=7))
        store = TranscriptStore(tmp_path / "t")
        got = ask(spec, REQ, store)
        assert got.text == "first answer" and not got.replayed
        sent = srv.requests[0]
        if backend == "anthropic":
            assert sent.path == "/v1/messages"
            assert sent.json["system"] == "You fix bugs."
            auth = (sent.headers.get("x-api-key"), sent.headers.get("Authorization"))
            assert KEY in auth or f"Bearer {KEY}" in auth
            assert sent.headers["anthropic-version"]
        else:
            assert sent.path == "/v1/chat/completions"
            assert sent.json["messages"][0] == {"role": "system", "content": "You fix bugs."}
            assert sent.json["seed"] == 7
        assert sent.json["temperature"] == 0.2
        assert sent.user_text == "Fix it."
        # the same question replays: the server is not asked again
        again = ask(spec, REQ, store)
        assert again.replayed and again.text == "first answer" and len(srv.requests) == 1
        # --refresh asks again and records the new answer under the same key
        fresh = ask(spec, REQ, store, refresh=True)
        assert fresh.text == "second answer" and not fresh.replayed and len(srv.requests) == 2
    doc = json.loads(store.path(transcript_key(spec, REQ)).read_text())
    assert doc["response"] == "second answer"
    assert doc["model"] == f"{backend}-model-1" and doc["parameters"]["temperature"] == 0.2
    assert doc["parameters"]["seed"] == 7
    assert KEY not in json.dumps(doc)


def test_replay_without_the_server(tmp_path: Path) -> None:
    store = TranscriptStore(tmp_path / "t")
    with FakeModelServer(lambda p, d: "recorded") as srv:
        live = _spec(srv, "anthropic")
        ask(live, REQ, store)
    # the server is gone; the replay backend (and the live one) answer from the store
    replay = ModelSpec(backend="replay", model=live.model)
    assert ask(replay, REQ, store).text == "recorded"
    assert ask(live, REQ, store).replayed
    # a different question has no transcript: exit 2 with a recorded reason
    with pytest.raises(ModelError) as exc:
        ask(replay, REQ.model_copy(update={"prompt": "other"}), store)
    assert exc.value.reason == "model-no-transcript" and exc.value.exit_code == 2
    with pytest.raises(ModelError) as exc:
        ask(replay, REQ, store, refresh=True)
    assert exc.value.reason == "model-no-transcript"


def test_key_covers_prompt_model_parameters_and_inputs() -> None:
    spec = ModelSpec(backend="replay", model="m")
    base = transcript_key(spec, REQ)
    assert transcript_key(ModelSpec(backend="anthropic", model="m"), REQ) == base
    others = [
        transcript_key(spec, REQ.model_copy(update={"prompt": "Fix it!"})),
        transcript_key(spec, REQ.model_copy(update={"system": "x"})),
        transcript_key(spec, REQ.model_copy(update={"inputs": {"a": "01"}})),
        transcript_key(spec, REQ.model_copy(update={"role": "reviewer"})),
        transcript_key(ModelSpec(backend="replay", model="m2"), REQ),
        transcript_key(ModelSpec(backend="replay", model="m", parameters=Parameters(seed=1)), REQ),
    ]
    assert base not in others and len(set(others)) == len(others)


@pytest.mark.parametrize("backend", ["anthropic", "openai"])
def test_a_server_that_never_answers_hits_the_deadline(backend: str, tmp_path: Path) -> None:
    import time

    store = TranscriptStore(tmp_path / "t")
    with FakeModelServer(lambda p, d: None) as srv:
        # each attempt waits its share of the deadline (1.5 s), then the SDK retries once
        spec = _spec(srv, backend, deadline_s=3.0, retries=1)
        started = time.monotonic()
        with pytest.raises(ModelError) as exc:
            ask(spec, REQ, store)
        assert len(srv.requests) == 2  # one retry, then give up
        assert time.monotonic() - started < 3.0 + 1.0
    assert exc.value.reason == "model-deadline" and exc.value.exit_code == 2
    assert srv.anthropic_url in str(exc.value) or srv.openai_url in str(exc.value)
    assert not (tmp_path / "t").exists()  # nothing half-written


def test_missing_credentials_name_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("FAKE_MODEL_KEY")
    with FakeModelServer(lambda p, d: "x") as srv:
        with pytest.raises(ModelError) as exc:
            ask(_spec(srv, "anthropic"), REQ, TranscriptStore(tmp_path / "t"))
        assert srv.requests == []
    assert "$FAKE_MODEL_KEY" in str(exc.value) and exc.value.reason == "model-credentials-missing"


def test_unreachable_endpoint_is_named(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    spec = ModelSpec(
        backend="openai", model="m", base_url=url, api_key_env="", deadline_s=2, retries=0
    )
    with pytest.raises(ModelError) as exc:
        ask(spec, REQ, TranscriptStore(tmp_path / "t"))
    assert exc.value.reason == "model-unreachable" and url in str(exc.value)


def test_command_backend_gets_the_prompt_on_stdin(tmp_path: Path) -> None:
    prog = "import sys; data = sys.stdin.read(); print('echo:' + data.upper())"
    spec = ModelSpec(backend="command", model="local-echo", command=[sys.executable, "-c", prog])
    got = ask(spec, REQ, TranscriptStore(tmp_path / "t"))
    assert got.text == "echo:YOU FIX BUGS.\n\nFIX IT.\n"
    assert got.transcript.family == "local"
    slow = spec.model_copy(
        update={"command": [sys.executable, "-c", "import time; time.sleep(30)"], "deadline_s": 0.3}
    )
    with pytest.raises(ModelError) as exc:
        ask(slow, REQ, TranscriptStore(tmp_path / "u"))
    assert exc.value.reason == "model-deadline"


def test_replay_path_does_not_import_the_sdks(tmp_path: Path) -> None:
    store = TranscriptStore(tmp_path / "t")
    spec = ModelSpec(backend="command", model="m", command=[sys.executable, "-c", "print(1)"])
    ask(spec, REQ, store)
    code = (
        "import sys; from pathlib import Path\n"
        "from engine.models.ask import ask\n"
        "from engine.models.model_spec import ModelSpec, Request\n"
        "from engine.models.transcript import TranscriptStore\n"
        f"r = Request.model_validate_json({REQ.model_dump_json()!r})\n"
        f"store = TranscriptStore(Path({str(store.root)!r}))\n"
        "a = ask(ModelSpec(backend='replay', model='m'), r, store)\n"
        "assert a.replayed\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('anthropic', 'openai')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_transcripts_are_redacted_before_they_are_stored(tmp_path: Path) -> None:
    """A secret in the prompt or the answer never reaches the transcript store; the replayed
    answer is the redacted one (so a live run and its replay read the same text)."""
    token = "ghp_" + "a" * 36
    store = TranscriptStore(tmp_path / "t")
    req = REQ.model_copy(update={"prompt": f"the CI uses {token}; fix it"})
    with FakeModelServer(lambda p, d: f"patched; mail dev@example.org, key {token}") as srv:
        live = ask(_spec(srv, "openai"), req, store)
        assert token.encode() in srv.requests[0].body  # the model itself was asked as given
    raw = store.path(live.transcript.key).read_text()
    assert token not in raw and "dev@example.org" not in raw
    assert live.transcript.redactions == {"github-token": 2, "email": 1}
    assert token not in live.text
    replayed = ask(ModelSpec(backend="replay", model="openai-model-1"), req, store)
    assert replayed.text == live.text


@pytest.mark.parametrize("backend", ["anthropic", "openai"])
def test_a_trickling_server_ends_within_the_overall_deadline(backend: str, tmp_path: Path) -> None:
    """One byte every 0.5 s never lets a read wait long, so only an overall deadline (connect,
    send, every read and the retries together) ends the call: within it, with model-deadline."""
    import time

    with FakeModelServer(lambda p, d: Trickle(every_s=0.5, count=100)) as srv:
        spec = _spec(srv, backend, deadline_s=2.0, retries=2)
        started = time.monotonic()
        with pytest.raises(ModelError) as exc:
            ask(spec, REQ, TranscriptStore(tmp_path / "t"))
        took = time.monotonic() - started
    assert exc.value.reason == "model-deadline", exc.value
    assert took < 2.0 + 1.0, took  # the deadline plus the thread hand-over, not 50 s
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("backend", ["anthropic", "openai"])
@pytest.mark.parametrize(
    "reply",
    [
        Raw(b"<html>gateway says hello</html>", content_type="text/html"),
        Raw(b"{not json", content_type="application/json"),
        Raw(b'{"unexpected": "shape"}', content_type="application/json"),
    ],
)
def test_a_200_that_is_not_the_api_s_json_is_a_model_error(
    backend: str, reply: Raw, tmp_path: Path
) -> None:
    with FakeModelServer(lambda p, d: reply) as srv, pytest.raises(ModelError) as exc:
        ask(_spec(srv, backend, retries=0), REQ, TranscriptStore(tmp_path / "t"))
    assert exc.value.reason == "model-output-unparseable", exc.value
    assert exc.value.exit_code == 2
    assert not (tmp_path / "t").exists()
