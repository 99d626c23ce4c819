"""Errors of model calls: each names the endpoint or variable and carries a stable reason code."""

from __future__ import annotations

from engine.errors import TraceError


class ModelError(TraceError):
    """A model could not be asked: missing credentials, an unreachable endpoint, a deadline.

    Exit 2: nothing was recorded and nothing downstream was written; fix the setting named and
    run again. `reason` is a stable code from policy/reasons.toml."""

    def __init__(self, message: str, *, reason: str, hint: str | None = None) -> None:
        self.reason = reason
        super().__init__(f"{message} [{reason}]", hint=hint)
