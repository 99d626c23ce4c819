"""What a role's answer became: a typed output, or a failure with a stable reason code."""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, ConfigDict


class RoleFailure(BaseModel):
    """The answer was recorded but cannot be used: `reason` is a code of policy/reasons.toml."""

    model_config = ConfigDict(frozen=True)

    reason: str
    detail: str


_FENCE = re.compile(r"^```([A-Za-z0-9_-]*)[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def fenced(text: str, *langs: str) -> str | None:
    """The body of the first ```lang fenced block whose language is one of `langs`."""
    for m in _FENCE.finditer(text):
        if m.group(1).lower() in langs:
            return m.group(2)
    return None


def json_object(text: str) -> dict[str, Any] | RoleFailure:
    """A JSON object: the first ```json block, else the whole answer."""
    body = fenced(text, "json")
    raw = body if body is not None else text.strip()
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as exc:
        return RoleFailure(
            reason="model-output-unparseable",
            detail=f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
        )
    if not isinstance(doc, dict):
        return RoleFailure(
            reason="model-output-unparseable", detail=f"a JSON {type(doc).__name__}, not an object"
        )
    return doc
