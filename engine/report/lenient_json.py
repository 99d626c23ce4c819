"""Plain JSON read defensively: a report shows a forged or older bundle rather than refuse it, so
every record is read as dicts and lists, and a value of the wrong type reads as empty."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def as_dict(v: Any) -> dict[str, Any]:
    return dict(v) if isinstance(v, Mapping) else {}


def as_list(v: Any) -> list[Any]:
    return list(v) if isinstance(v, list) else []


def as_str(v: Any) -> str:
    return "" if v is None else str(v)
