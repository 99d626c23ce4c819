"""The live backends: each asks with bounded retries under ONE deadline and returns the text.

`deadline_s` bounds the whole call: connecting, sending, every read and every retry together.
An SDK's own timeout bounds only the wait between two reads, so a server that sends a byte now
and then would hold a call for ever; the SDK call runs in a worker thread instead, and at the
deadline the client is closed and the call ends with `model-deadline`.

The SDKs are imported here, inside the call, so a run that only replays never loads them. Each
failure becomes a `ModelError` naming the endpoint or variable (exit 2, nothing recorded); a
reply that is not the API's JSON is `model-output-unparseable`, never a traceback.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from engine.errors import ModelError
from engine.models.model_spec import ModelSpec, Request


def _api_key(spec: ModelSpec) -> str:
    env = spec.key_env
    if env is None:
        return "unused"  # a local endpoint that takes no key (api_key_env = "")
    value = os.environ.get(env, "")
    if not value:
        raise ModelError(
            f"{spec.backend} backend for model '{spec.model}' needs an API key in ${env}, "
            "which is not set",
            reason="model-credentials-missing",
            hint=f"export {env}=..., or set api_key_env in the agent file's [models] table",
        )
    return value


_BASE_URL_ENV = {"anthropic": "ANTHROPIC_BASE_URL", "openai": "OPENAI_BASE_URL"}


def _endpoint(spec: ModelSpec) -> str:
    """The endpoint the SDK will call: base_url, else the SDK's own environment variable."""
    if spec.base_url:
        return spec.base_url
    env = _BASE_URL_ENV.get(spec.backend, "")
    if os.environ.get(env):
        return f"{os.environ[env]} (from ${env})"
    return f"the {spec.backend} SDK's default endpoint"


def _deadline_error(spec: ModelSpec) -> ModelError:
    return ModelError(
        f"{_endpoint(spec)} did not answer within {spec.deadline_s:g} s "
        f"(the whole call, up to {spec.retries + 1} attempt(s))",
        reason="model-deadline",
        hint="check the endpoint, or raise deadline_s in the agent file",
    )


def _unparseable(spec: ModelSpec, exc: Exception) -> ModelError:
    return ModelError(
        f"{_endpoint(spec)} answered, but not with the API's JSON for model '{spec.model}': "
        f"{type(exc).__name__}: {str(exc)[:200]}",
        reason="model-output-unparseable",
        hint="check that base_url points at the API itself (not a proxy's or gateway's page)",
    )


def _attempt_s(spec: ModelSpec) -> float:
    """Each attempt's wait for the server (connect, or between two reads): a share of the whole
    deadline, so a silent server still gets its retries before the deadline ends the call."""
    return spec.deadline_s / (spec.retries + 1)


def _within_deadline(spec: ModelSpec, call: Callable[[], str], close: Callable[[], None]) -> str:
    """`call()` in a daemon thread, waited for at most `deadline_s`; past it, `close()` the
    client (which ends the thread's I/O) and raise model-deadline. The call's own exception is
    raised here, in the caller's thread."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["text"] = call()
        except BaseException as exc:  # handed to the caller's thread below
            box["error"] = exc

    worker = threading.Thread(target=work, name="trace-model-call", daemon=True)
    worker.start()
    worker.join(spec.deadline_s)
    if worker.is_alive():
        close()
        raise _deadline_error(spec)
    if "error" in box:
        raise box["error"]
    return str(box["text"])


def _sdk_failure(spec: ModelSpec, exc: Exception) -> ModelError:
    """Map an SDK exception (anthropic and openai share the names) to a ModelError."""
    name = type(exc).__name__
    endpoint = _endpoint(spec)
    if name == "APITimeoutError":
        return _deadline_error(spec)
    if name == "APIResponseValidationError":
        return _unparseable(spec, exc)
    if name == "APIConnectionError":
        return ModelError(
            f"cannot reach {endpoint}: {exc}",
            reason="model-unreachable",
            hint="check base_url in the agent file and that the server is running",
        )
    if name in ("AuthenticationError", "PermissionDeniedError"):
        return ModelError(
            f"{endpoint} refused the key in ${spec.key_env}: {exc}",
            reason="model-credentials-refused",
            hint=f"check ${spec.key_env}",
        )
    return ModelError(
        f"{endpoint} failed for model '{spec.model}': {name}: {exc}",
        reason="model-call-failed",
        hint="read the message; the transcript store was not changed",
    )


def _anthropic(spec: ModelSpec, request: Request) -> str:
    import anthropic

    client = anthropic.Anthropic(
        api_key=_api_key(spec),
        base_url=spec.base_url,
        timeout=_attempt_s(spec),
        max_retries=spec.retries,
    )

    def create() -> str:
        msg = client.messages.create(
            model=spec.model,
            max_tokens=spec.parameters.max_tokens,
            system=request.system,
            messages=[{"role": "user", "content": request.prompt}],
            # in the body, not as a keyword: recent SDKs dropped the sampling keywords
            extra_body={"temperature": spec.parameters.temperature},
        )
        if not isinstance(getattr(msg, "content", None), list):
            raise TypeError(f"the reply has no content list: {str(msg)[:200]}")
        return "".join(getattr(block, "text", "") for block in msg.content)

    try:
        return _within_deadline(spec, create, client.close)
    except anthropic.APIError as exc:
        raise _sdk_failure(spec, exc) from None
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        raise _unparseable(spec, exc) from None


def _openai(spec: ModelSpec, request: Request) -> str:
    import openai

    client = openai.OpenAI(
        api_key=_api_key(spec),
        base_url=spec.base_url,
        timeout=_attempt_s(spec),
        max_retries=spec.retries,
    )
    extra: dict[str, Any] = {}
    if spec.parameters.seed is not None:
        extra["seed"] = spec.parameters.seed

    def create() -> str:
        resp = client.chat.completions.create(
            model=spec.model,
            max_tokens=spec.parameters.max_tokens,
            temperature=spec.parameters.temperature,
            messages=[
                {"role": "system", "content": request.system},
                {"role": "user", "content": request.prompt},
            ],
            **extra,
        )
        choices = getattr(resp, "choices", None)
        if not isinstance(choices, list):
            raise TypeError(f"the reply has no choices list: {str(resp)[:200]}")
        if not choices:
            raise ModelError(
                f"{_endpoint(spec)} answered with no choices", reason="model-call-failed"
            )
        return choices[0].message.content or ""

    try:
        return _within_deadline(spec, create, client.close)
    except openai.APIError as exc:
        raise _sdk_failure(spec, exc) from None
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        raise _unparseable(spec, exc) from None


def _command(spec: ModelSpec, request: Request) -> str:
    """argv from `command`; stdin: the system prompt, a blank line, the user prompt."""
    stdin = f"{request.system}\n\n{request.prompt}"
    env = {**os.environ, "TRACE_MODEL": spec.model, "TRACE_ROLE": request.role}
    last = ""
    end = time.monotonic() + spec.deadline_s
    for _attempt in range(spec.retries + 1):
        left = end - time.monotonic()
        if left <= 0:
            last = f"did not finish within {spec.deadline_s:g} s"
            break
        try:
            proc = subprocess.run(
                spec.command,
                input=stdin.encode(),
                capture_output=True,
                timeout=left,
                env=env,
                check=False,
            )
        except FileNotFoundError:
            raise ModelError(
                f"model command '{spec.command[0]}' not found",
                reason="model-unreachable",
                hint="fix `command` in the agent file's [models] table",
            ) from None
        except subprocess.TimeoutExpired:
            last = f"did not finish within {spec.deadline_s:g} s"
            break  # the deadline is the whole call's: no time is left for another attempt
        if proc.returncode == 0:
            return proc.stdout.decode("utf-8", "replace")
        last = f"exit {proc.returncode}: {proc.stderr.decode('utf-8', 'replace')[-300:]}"
    raise ModelError(
        f"model command {' '.join(spec.command)} failed {spec.retries + 1} time(s); last: {last}",
        reason="model-deadline" if "within" in last else "model-call-failed",
    )


def call(spec: ModelSpec, request: Request) -> str:
    if spec.backend == "anthropic":
        return _anthropic(spec, request)
    if spec.backend == "openai":
        return _openai(spec, request)
    if spec.backend == "command":
        return _command(spec, request)
    raise ModelError(  # replay never reaches here: ask() answers it from the store
        f"backend '{spec.backend}' cannot be called live", reason="model-call-failed"
    )
