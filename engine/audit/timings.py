"""verify-bundle's look at timings.json: informational, reported, never a reason to fail.

The file is not part of the claim (engine.evidence.timings): a bundle verifies or not by its
payload and statement alone. What this check adds is whether the timings are the ones the run
wrote: `intact` (their sha256 is the one the statement's byproducts name), `changed` (it is not),
`unvouched` (a file the statement names no digest for), `missing` (named, not there) or `none`
(neither). The report draws the bars only for `intact` timings.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Literal

from engine.audit.safefs import Unsafe, read_regular
from engine.audit.signature import Check
from engine.evidence.statement import Statement
from engine.evidence.timings import BYPRODUCT, TIMINGS_FILE

TimingsState = Literal["intact", "changed", "unvouched", "missing", "none"]
CHECK_NAME = "step timings (informational)"
MAX_TIMINGS = 4 << 20  # bytes read of timings.json
_DETAIL: dict[TimingsState, str] = {
    "intact": "timings.json is the one the run wrote (its sha256 is in the statement); "
    "measured, not part of the signed claim",
    "changed": "timings.json differs from the sha256 the statement names: ignored (the timings "
    "are not part of the claim, so the verdict does not rest on them)",
    "unvouched": "timings.json has no sha256 in the statement: ignored",
    "missing": "the statement names a timings.json that is not there",
    "none": "the bundle records no step timings",
}


def vouched_digest(statement: Statement | Any) -> str | None:
    """The sha256 the statement's byproducts name for timings.json, if any (`statement`: the
    model, or the statement as plain JSON: a report reads forged ones too)."""
    if isinstance(statement, Statement):
        statement = statement.model_dump(mode="json", by_alias=True)
    run = _get(_get(statement, "predicate"), "runDetails")
    products = run.get("byproducts") if isinstance(run, dict) else None
    for product in products if isinstance(products, list) else []:
        if isinstance(product, dict) and product.get("name") == BYPRODUCT:
            sha = _get(product, "digest").get("sha256")
            return sha if isinstance(sha, str) else ""
    return None


def _get(doc: Any, key: str) -> dict[str, Any]:
    value = doc.get(key) if isinstance(doc, dict) else None
    return value if isinstance(value, dict) else {}


def timings_state(directory: Path, statement: Statement | Any) -> TimingsState:
    """How timings.json at `directory` stands against the statement's digest for it."""
    expected = vouched_digest(statement)
    path = directory / TIMINGS_FILE
    if not os.path.lexists(path):
        return "missing" if expected is not None else "none"
    if expected is None:
        return "unvouched"
    try:  # a link, a FIFO or an oversized file is not the file the run wrote
        data = read_regular(path, MAX_TIMINGS)
    except Unsafe:
        return "changed"
    return "intact" if hashlib.sha256(data).hexdigest() == expected else "changed"


def timings_check(directory: Path, statement: Statement | None) -> Check:
    """Always ok (informational); the detail says how the timings stand."""
    state = timings_state(directory, statement)
    return Check(name=CHECK_NAME, ok=True, detail=f"{state}: {_DETAIL[state]}")
