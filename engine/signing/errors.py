"""SigningError lives in the one hierarchy (engine/errors.py); this import path stays valid."""

from __future__ import annotations

from engine.errors import SigningError

__all__ = ["SigningError"]
