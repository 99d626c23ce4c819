"""The signing policy a gate applies: its name, version and this gate's thresholds.

They come from the gate's configuration (`cfg["policy"]`, JSON text made by
engine/gates/context.py from policy/signing.toml, or the same as an object) and go back out
unchanged as the record's `details.policy`, so `trace decide` can check that the record applied
the thresholds of the policy deciding. An absent threshold is no bound.
"""

from __future__ import annotations

import json

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def applied_policy(cfg: dict[str, Any]) -> dict[str, Any]:
    raw = cfg.get("policy")
    data = json.loads(raw) if isinstance(raw, str) else raw
    if not isinstance(data, dict) or not {"name", "version"} <= set(data):
        raise ValueError("the gate's configuration names no signing policy (name, version)")
    thresholds = data.get("thresholds") or {}
    if not isinstance(thresholds, dict):
        raise ValueError(f"the policy's thresholds are not an object: {thresholds!r}")
    return {"name": data["name"], "version": data["version"], "thresholds": dict(thresholds)}


def threshold(policy: dict[str, Any], key: str) -> float | None:
    value = policy["thresholds"].get(key)
    return None if value is None else float(value)


def bound(policy: dict[str, Any], key: str) -> int | None:
    value = policy["thresholds"].get(key)
    return None if value is None else int(value)
