"""A target invocation's own OpenTelemetry spans (the run record's `spans`, recorded by the
harness: docs/telemetry.md) as rows for the report: each with its depth in the tree, its
attributes and events as `key=value` text. Read as untrusted JSON: a parent index that does not
point at an earlier span makes the span a root; depth is capped at MAX_DEPTH."""

from __future__ import annotations

import json
from typing import Any

from engine.report.lenient_json import as_dict, as_list, as_str

MAX_DEPTH = 12
MAX_ROWS = 200


def _pairs(attributes: Any) -> str:
    return ", ".join(
        f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in as_dict(attributes).items()
    )


def span_rows(invocation: Any) -> list[dict[str, Any]]:
    """The invocation's spans in record order, each with `depth`, `attrs` and `events` text."""
    rows: list[dict[str, Any]] = []
    for i, span in enumerate(map(as_dict, as_list(as_dict(invocation).get("spans"))[:MAX_ROWS])):
        parent = span.get("parent")
        depth = 0
        if isinstance(parent, int) and not isinstance(parent, bool) and 0 <= parent < i:
            depth = min(rows[parent]["depth"] + 1, MAX_DEPTH)
        events = [as_dict(e) for e in as_list(span.get("events"))]
        named = [f"{as_str(e.get('name'))} {_pairs(e.get('attributes'))}" for e in events]
        rows.append(
            {
                "depth": depth,
                "name": as_str(span.get("name")),
                "kind": as_str(span.get("kind")),
                "scope": as_str(span.get("scope")),
                "status": as_str(span.get("status")) or "unset",
                "message": as_str(span.get("status_message")),
                "attrs": _pairs(span.get("attributes")),
                "events": named,
            }
        )
    return rows
