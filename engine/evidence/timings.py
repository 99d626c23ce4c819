"""A bundle's per-step timings: measured, informational, never part of the replayed claim.

`timings.json` sits beside `payload/` at the bundle root (docs/reports.md says why there). The
payload must be reproducible (`verify-bundle --replay` rebuilds every step and compares outcomes
bit for bit; two runs of one candidate bundle the same payload digests), and durations differ on
every run, so they are not a payload file. The statement still names the file's sha256 among its
`runDetails.byproducts` (`BYPRODUCT`), so a signed bundle vouches for the timings its run wrote,
and verify-bundle tells an intact timings file from a changed one without either touching the
verdict (engine.audit.timings).

Where the times come from: the run's `StepClock` (engine/otel.py, the source the OTel spans use),
which notes the first time each step reached each state. Nix announces when a step starts
building and when a build fails, not when one succeeds, so a built step's end is a bound: the
first start of a step that needs it (it cannot start before its input is done), else the time
the run read its result (after the Nix call ended). `ends` says which: `failed` (Nix's own
failure line), `bound`, or `instant` (nothing was built here: answered from the index, already in
the store, substituted or skipped; drawn as a mark at the time the run reported it).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from engine.otel import StepClock
    from engine.run import RunResult

TIMINGS_FILE: Final = "timings.json"
SCHEMA: Final = "trace.step-timings/v1"
BYPRODUCT: Final = "timings:" + TIMINGS_FILE  # its runDetails.byproducts entry's name
NOTE: Final = (
    "measured by the run that made this bundle; informational, not part of the signed claim "
    "(the statement holds this file's sha256 among its runDetails.byproducts)"
)
_BUILT = ("built", "failed")  # statuses a Nix build of this run ends in


def _seconds(ns: int, began: int) -> float:
    return round(max(ns - began, 0) / 1e9, 3)


def _dependents(needs: Mapping[str, Collection[str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for sid, wanted in needs.items():
        for need in wanted:
            out.setdefault(need, []).append(sid)
    return out


def _span(
    sid: str, status: str, clock: StepClock, after: list[str], now: int
) -> tuple[int, int, str]:
    """(start, end, how the end is known) of one step, in ns since the epoch."""
    states = clock.seen.get(sid, {})
    reported = min((t for s, t in states.items() if s not in ("queued", "building")), default=now)
    start = states.get("building")
    if status not in _BUILT or start is None:
        return reported, reported, "instant"
    if status == "failed" and "failed" in states:
        return start, max(states["failed"], start), "failed"
    starts = [clock.seen[d]["building"] for d in after if "building" in clock.seen.get(d, {})]
    return start, max(min([reported, *starts]), start), "bound"


def step_timings(
    run: RunResult, clock: StepClock, needs: Mapping[str, Collection[str]], now: int
) -> dict[str, Any]:
    """The trace.step-timings/v1 document of `run`, its steps sorted by start (then id);
    `needs`: each step's upstream steps; `now`: when the run ended (ns since the epoch)."""
    after = _dependents(needs)
    steps = []
    for sid, step in run.steps.items():
        start, end, ends = _span(sid, step.status, clock, after.get(sid, []), now)
        steps.append(
            {
                "step": sid,
                "status": step.status,
                "cached": step.status == "cached",
                "builder": step.built_on,
                "start": _seconds(start, clock.began),
                "end": _seconds(end, clock.began),
                "ends": ends,
            }
        )
    steps.sort(key=lambda s: (s["start"], s["step"]))
    return {
        "schema": SCHEMA,
        "note": NOTE,
        "unit": "seconds since the run began",
        "run_seconds": _seconds(now, clock.began),
        "steps": steps,
    }
