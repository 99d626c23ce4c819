"""The one error signing raises (a TraceError: message, where, what to do)."""

from __future__ import annotations

from engine.errors import TraceError


class SigningError(TraceError):
    """Signing could not be done (no identity, a service failed or timed out, a bad key)."""

    exit_code = 1
