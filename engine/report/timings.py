"""The per-step timing bars of a report: timings.json (engine.evidence.timings) as inline SVG.

One bar per step, sorted by start, on one time axis: a built step's bar runs from when Nix
started building it to its end (a bound, see engine.evidence.timings), a failed one is red, a
step nothing was built for (cached, already in the store, substituted, skipped) is a narrow
mark at the time the run reported it. The file is read as untrusted JSON: a value of the wrong
type, a negative, infinite or NaN time drops that step (counted); every text is escaped; past
MAX_BARS steps the rest are counted, not drawn. Bars are drawn only for timings the statement
vouches for (`intact`, engine.audit.timings); the page says they are measured, not part
of the signed claim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from markupsafe import Markup, escape

from engine.audit.timings import TimingsState, timings_state
from engine.evidence.timings import TIMINGS_FILE

MAX_BARS = 300
MAX_LABEL = 34  # characters of a step name drawn (the full name is the bar's tooltip)
WIDTH, LEFT, RIGHT, ROW, TOP = 900, 240, 90, 20, 34
MIN_BAR = 3.0  # px: a zero-length step is still a visible mark


@dataclass(frozen=True)
class Bar:
    """One step's bar, in seconds since the run began."""

    step: str
    status: str
    builder: str
    start: float
    end: float

    @property
    def kind(self) -> str:
        """built, failed, or instant (nothing built here; cached steps say `cached`)."""
        if self.status in ("built", "failed"):
            return self.status
        return "cached" if self.status == "cached" else "instant"


@dataclass(frozen=True)
class TimingsView:
    """What the timings section shows: the file's state, its bars (intact only), what was
    dropped, and the SVG."""

    state: TimingsState
    bars: list[Bar]
    dropped: int
    svg: Markup


def _time(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    x = float(value)
    return x if math.isfinite(x) and x >= 0 else None


def bars_of(doc: Any) -> tuple[list[Bar], int]:
    """The readable steps of a timings document, sorted by start; and how many were not."""
    steps = doc.get("steps") if isinstance(doc, dict) else None
    bars: list[Bar] = []
    dropped = 0
    for s in steps if isinstance(steps, list) else []:
        start = _time(s.get("start")) if isinstance(s, dict) else None
        end = _time(s.get("end")) if isinstance(s, dict) else None
        if not isinstance(s, dict) or start is None or end is None:
            dropped += 1
            continue
        bars.append(
            Bar(
                step=str(s.get("step", "?")),
                status=str(s.get("status", "?")),
                builder=str(s.get("builder") or ""),
                start=start,
                end=max(end, start),
            )
        )
    bars.sort(key=lambda b: (b.start, b.step))
    return bars, dropped


def seconds(x: float) -> str:
    """A duration as the bars' labels write it."""
    if x < 10:
        return f"{x:.2f} s"
    if x < 100_000:
        return f"{x:.1f} s"
    return f"{x:.3g} s"


def _label(step: str) -> str:
    return step if len(step) <= MAX_LABEL else step[: MAX_LABEL - 1] + "…"


def _row(i: int, bar: Bar, scale: float) -> str:
    y = TOP + i * ROW
    x = LEFT + bar.start * scale
    width = max((bar.end - bar.start) * scale, MIN_BAR)
    took = bar.status if bar.kind in ("cached", "instant") else seconds(bar.end - bar.start)
    tip = f"{bar.step}: {bar.status}, {took}" + (f", on {bar.builder}" if bar.builder else "")
    return (
        f'<g class="tb-row tb-{bar.kind}" data-step="{escape(bar.step)}" '
        f'data-status="{escape(bar.status)}"><title>{escape(tip)}</title>'
        f'<text x="4" y="{y + 13}" class="tb-name">{escape(_label(bar.step))}</text>'
        f'<rect x="{x:.1f}" y="{y + 3}" width="{width:.1f}" height="{ROW - 6}" class="tb-bar"/>'
        f'<text x="{min(x + width + 4, WIDTH - RIGHT + 4):.1f}" y="{y + 13}" class="tb-took">'
        f"{escape(took)}</text></g>"
    )


def timing_svg(bars: list[Bar], run_seconds: float | None = None) -> Markup:
    """The bars as one inline SVG (no script, no style attribute: classes only)."""
    shown = bars[:MAX_BARS]
    span = max([run_seconds or 0.0, *(b.end for b in shown), 1e-9])
    scale = (WIDTH - LEFT - RIGHT) / span
    height = TOP + ROW * len(shown) + 6
    rows = "".join(_row(i, b, scale) for i, b in enumerate(shown))
    axis = (
        f'<text x="{LEFT}" y="14" class="tb-axis">0 s</text>'
        f'<text x="{WIDTH - RIGHT}" y="14" class="tb-axis" text-anchor="end">'
        f"{escape(seconds(span))}</text>"
        f'<line x1="{LEFT}" y1="22" x2="{WIDTH - RIGHT}" y2="22" class="tb-axis-line"/>'
    )
    return Markup(
        f'<svg class="timing-steps" role="img" aria-labelledby="timing-steps-title" '
        f'viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}">'
        f'<title id="timing-steps-title">one bar per step, by start: built (blue), failed '
        f"(red), cached or not built here (a narrow mark)</title>{axis}{rows}</svg>"
    )


def timings_view(directory: Path, statement: Any, doc: Any) -> TimingsView:
    """The timings section of the bundle at `directory` (`doc`: timings.json as parsed, or
    None); bars only when the statement vouches for the file."""
    state = timings_state(directory, statement)
    if state != "intact":
        return TimingsView(state, [], 0, Markup(""))
    bars, dropped = bars_of(doc)
    run = _time(doc.get("run_seconds")) if isinstance(doc, dict) else None
    return TimingsView(state, bars, dropped, timing_svg(bars, run) if bars else Markup(""))


def read_timings(directory: Path) -> Any:
    """timings.json parsed (None when absent, not a regular file, too large or not JSON)."""
    import json

    from engine.audit.safefs import Unsafe, read_regular
    from engine.audit.timings import MAX_TIMINGS

    try:
        return json.loads(read_regular(directory / TIMINGS_FILE, MAX_TIMINGS))
    except (Unsafe, ValueError, RecursionError):
        return None
