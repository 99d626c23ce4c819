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
building and when a build fails, not when one succeeds, so a built step's end is an upper bound:
the earliest of the first start of a step that needs it (it cannot start before its input is
done), the second after its output's registration in the Nix store (`registrationTime`, whole
seconds: `registration_times`), and the time the run read its result (after the Nix call ended).
`ends` says how the end is known: `failed` (Nix's own failure line), `registered` (the output's
registration), `bound` (a dependent's start or the read), or `instant` (nothing was built here:
answered from the index, already in the store, substituted or skipped; drawn as a mark at the
time the run reported it).
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
S = 1_000_000_000  # ns per second


def _seconds(ns: int, began: int) -> float:
    return round(max(ns - began, 0) / S, 3)


def _dependents(needs: Mapping[str, Collection[str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for sid, wanted in needs.items():
        for need in wanted:
            out.setdefault(need, []).append(sid)
    return out


def _span(
    sid: str, status: str, clock: StepClock, after: list[str], now: int, registered: int | None
) -> tuple[int, int, str]:
    """(start, end, how the end is known) of one step, in ns since the epoch (`registered`:
    its output's registration time in the store, whole seconds since the epoch)."""
    states = clock.seen.get(sid, {})
    reported = min((t for s, t in states.items() if s not in ("queued", "building")), default=now)
    start = states.get("building")
    if status not in _BUILT or start is None:
        return reported, reported, "instant"
    if status == "failed" and "failed" in states:
        return start, max(states["failed"], start), "failed"
    starts = [clock.seen[d]["building"] for d in after if "building" in clock.seen.get(d, {})]
    end, ends = min([reported, *starts]), "bound"
    if registered is not None and start <= (registered + 1) * S < end:
        end, ends = (registered + 1) * S, "registered"
    return start, max(end, start), ends


def step_timings(
    run: RunResult,
    clock: StepClock,
    needs: Mapping[str, Collection[str]],
    now: int,
    registered: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """The trace.step-timings/v1 document of `run`, its steps sorted by start (then id);
    `needs`: each step's upstream steps; `now`: when the run ended (ns since the epoch);
    `registered`: output store path -> its registration time (`registration_times`)."""
    after = _dependents(needs)
    reg = registered or {}
    steps = []
    for sid, step in run.steps.items():
        when = reg.get(step.out) if step.out else None
        start, end, ends = _span(sid, step.status, clock, after.get(sid, []), now, when)
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


def registration_times(paths: Collection[str]) -> dict[str, int]:
    """Store path -> when Nix registered it (whole seconds since the epoch), by one
    `nix path-info --json`; {} when that cannot be asked (the timings are informational: they
    then keep the looser bound)."""
    import json
    import shutil
    import subprocess

    nix = shutil.which("nix")
    if nix is None or not paths:
        return {}
    args = [nix, "--extra-experimental-features", "nix-command", "path-info", "--json"]
    try:
        proc = subprocess.run(
            [*args, *sorted(paths)], capture_output=True, text=True, timeout=60, check=False
        )
        infos = json.loads(proc.stdout) if proc.returncode == 0 else []
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return {}
    found: dict[str, int] = {}
    for info in infos if isinstance(infos, list) else []:
        when = info.get("registrationTime") if isinstance(info, dict) else None
        if isinstance(when, int) and isinstance(info.get("path"), str):
            found[info["path"]] = when
    return found
