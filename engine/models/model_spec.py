"""What a model step asks (the typed request) and of whom (the model spec from agent.toml)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Backend = Literal["anthropic", "openai", "command", "replay"]

DEFAULT_KEY_ENV: dict[str, str] = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}


class _Strict(BaseModel):
    """Unknown keys are errors; types strict (`max_tokens = "10"` is refused, not converted)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Parameters(_Strict):
    """Sampling parameters; all of them enter the transcript key."""

    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    seed: int | None = Field(default=None, description="sent where the API takes one (OpenAI)")
    max_tokens: int = Field(default=4096, ge=1, le=200_000)


class ModelSpec(_Strict):
    """One model a role may ask (`[models.NAME]` in agent.toml)."""

    backend: Backend
    model: str = Field(min_length=1, description="model id sent to the API")
    family: str | None = Field(
        default=None,
        description="vendor family for the cross-family review rule (default: from the backend "
        "for anthropic, else the model id's first word)",
    )
    base_url: str | None = Field(default=None, description="endpoint; default: the SDK's own")
    api_key_env: str | None = Field(
        default=None,
        description="environment variable holding the key (default ANTHROPIC_API_KEY / "
        "OPENAI_API_KEY); '' for a local endpoint that needs none",
    )
    command: list[str] = Field(default_factory=list, description="argv for backend 'command'")
    parameters: Parameters = Field(default_factory=Parameters)
    deadline_s: float = Field(
        default=120.0,
        gt=0,
        le=3600,
        description="the whole call: connect, send, every read and every retry together",
    )
    retries: int = Field(default=2, ge=0, le=5, description="further attempts after a failure")

    @model_validator(mode="after")
    def _command(self) -> ModelSpec:
        if self.backend == "command" and not self.command:
            raise ValueError("backend 'command' needs `command = [\"prog\", ...]`")
        if self.backend != "command" and self.command:
            raise ValueError(f"`command` is only for backend 'command', not '{self.backend}'")
        return self

    @property
    def model_family(self) -> str:
        if self.family:
            return self.family
        if self.backend == "anthropic":
            return "anthropic"
        return re.split(r"[-:/_. ]", self.model.lower(), maxsplit=1)[0]

    @property
    def key_env(self) -> str | None:
        if self.api_key_env is not None:
            return self.api_key_env or None
        return DEFAULT_KEY_ENV.get(self.backend)

    def identity(self) -> dict[str, object]:
        """What of the spec enters a transcript key: the model and its parameters. The backend,
        endpoint and deadline do not: the same model behind another URL answers the same
        question, and `replay` must find what a live backend recorded."""
        return {
            "model": self.model,
            "parameters": self.parameters.model_dump(),
        }


class Request(_Strict):
    """One question to a model: a role, a system prompt, a user prompt, and the digests of the
    inputs the prompts were rendered from (they enter the key)."""

    role: str = Field(pattern=r"^[a-z][a-z0-9-]*$")
    system: str
    prompt: str
    inputs: dict[str, str] = Field(default_factory=dict, description="name -> sha256")
