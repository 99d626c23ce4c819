"""One error hierarchy for the whole engine.

Every error says what went wrong, where (file, key, line when known) and what to do about it.
The CLI maps each class to a documented exit code: 2 for bad input or usage, 1 for a failed step,
3 for a busy state directory, 4 when Nix itself failed (not a step's build: interrupted, killed,
out of disk, a bad option).
"""

from __future__ import annotations

from pathlib import Path


class TraceError(Exception):
    """Base class: a message for a human, with an optional location and a hint."""

    exit_code = 2

    def __init__(
        self,
        message: str,
        *,
        file: Path | str | None = None,
        key: str | None = None,
        line: int | None = None,
        hint: str | None = None,
    ) -> None:
        self.message = message
        self.file = str(file) if file is not None else None
        self.key = key
        self.line = line
        self.hint = hint
        super().__init__(self.render())

    def where(self) -> str:
        parts: list[str] = []
        if self.file:
            parts.append(self.file + (f":{self.line}" if self.line else ""))
        if self.key:
            parts.append(f"key '{self.key}'")
        return ", ".join(parts)

    def render(self) -> str:
        where = self.where()
        text = f"{where}: {self.message}" if where else self.message
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text


class InputError(TraceError):
    """Bad input: a graph, candidate or policy file that cannot be used as written."""


class UsageError(TraceError):
    """The command line itself is wrong."""


class BusyError(TraceError):
    """Another trace process holds the state directory."""

    exit_code = 3


class NixError(TraceError):
    """The nix CLI failed in a way that is not a step's own build failure (interrupted, killed,
    out of disk space, not installed): exit 4, with what Nix said."""

    exit_code = 4


class StepFailed(TraceError):
    """At least one step failed to build."""

    exit_code = 1


class PolicyError(InputError):
    """A policy file is malformed or names something unknown."""


class SigningError(TraceError):
    """Signing could not be done (no identity, a service failed or timed out, a bad key)."""

    exit_code = 1


class ModelError(TraceError):
    """A model could not be asked: missing credentials, an unreachable endpoint, a deadline.

    Exit 2: nothing was recorded and nothing downstream was written; fix the setting named and
    run again. `reason` is a stable code from policy/reasons.toml."""

    def __init__(self, message: str, *, reason: str, hint: str | None = None) -> None:
        self.reason = reason
        super().__init__(f"{message} [{reason}]", hint=hint)
