"""The live backends: each asks once-with-bounded-retries under a deadline and returns the text.

The SDKs are imported here, inside the call, so a run that only replays never loads them. Each
failure becomes a `ModelError` naming the endpoint or variable (exit 2, nothing recorded).
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

from engine.models.errors import ModelError
from engine.models.spec import ModelSpec, Request


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


def _endpoint(spec: ModelSpec) -> str:
    return spec.base_url or f"the {spec.backend} SDK's default endpoint"


def _sdk_failure(spec: ModelSpec, exc: Exception) -> ModelError:
    """Map an SDK exception (anthropic and openai share the names) to a ModelError."""
    name = type(exc).__name__
    endpoint = _endpoint(spec)
    if name == "APITimeoutError":
        return ModelError(
            f"{endpoint} did not answer within {spec.deadline_s:g} s "
            f"({spec.retries + 1} attempt(s))",
            reason="model-deadline",
            hint="check the endpoint, or raise deadline_s in the agent file",
        )
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
        timeout=spec.deadline_s,
        max_retries=spec.retries,
    )
    try:
        msg = client.messages.create(
            model=spec.model,
            max_tokens=spec.parameters.max_tokens,
            system=request.system,
            messages=[{"role": "user", "content": request.prompt}],
            # in the body, not as a keyword: recent SDKs dropped the sampling keywords
            extra_body={"temperature": spec.parameters.temperature},
        )
    except anthropic.APIError as exc:
        raise _sdk_failure(spec, exc) from None
    return "".join(getattr(block, "text", "") for block in msg.content)


def _openai(spec: ModelSpec, request: Request) -> str:
    import openai

    client = openai.OpenAI(
        api_key=_api_key(spec),
        base_url=spec.base_url,
        timeout=spec.deadline_s,
        max_retries=spec.retries,
    )
    extra: dict[str, Any] = {}
    if spec.parameters.seed is not None:
        extra["seed"] = spec.parameters.seed
    try:
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
    except openai.APIError as exc:
        raise _sdk_failure(spec, exc) from None
    if not resp.choices:
        raise ModelError(f"{_endpoint(spec)} answered with no choices", reason="model-call-failed")
    return resp.choices[0].message.content or ""


def _command(spec: ModelSpec, request: Request) -> str:
    """argv from `command`; stdin: the system prompt, a blank line, the user prompt."""
    stdin = f"{request.system}\n\n{request.prompt}"
    env = {**os.environ, "TRACE_MODEL": spec.model, "TRACE_ROLE": request.role}
    last = ""
    for _attempt in range(spec.retries + 1):
        try:
            proc = subprocess.run(
                spec.command,
                input=stdin.encode(),
                capture_output=True,
                timeout=spec.deadline_s,
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
            continue
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
