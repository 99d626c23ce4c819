"""Live progress for a run: a table on a terminal (rich), plain lines otherwise."""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import Any

STYLES = {
    "queued": "dim",
    "building": "yellow",
    "built": "green",
    "reused": "green",
    "substituted": "green",
    "cached": "cyan",
    "failed": "bold red",
    "skipped": "magenta",
    "checked": "green",
    "nondeterministic": "bold red",
}


class Progress:
    """Callable reporter: `progress(step_id, state)`."""

    def __init__(self, enabled: bool = True, *, tty: bool | None = None) -> None:
        self.enabled = enabled
        self.tty = sys.stderr.isatty() if tty is None else tty
        self.states: dict[str, str] = {}
        self._live: Any = None

    def __enter__(self) -> Progress:
        if self.enabled and self.tty:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(
                self._table(), console=Console(stderr=True), transient=False, refresh_per_second=8
            )
            self._live.__enter__()
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._live is not None:
            self._live.update(self._table())
            self._live.__exit__(t, e, tb)
            self._live = None

    def _table(self) -> Any:
        from rich.table import Table

        table = Table(show_header=True, header_style="bold", box=None)
        table.add_column("step")
        table.add_column("state")
        counts: dict[str, int] = {}
        for sid, state in self.states.items():
            counts[state] = counts.get(state, 0) + 1
            if state != "cached" or len(self.states) <= 40:
                table.add_row(sid, f"[{STYLES.get(state, '')}]{state}[/]")
        summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        table.caption = summary
        return table

    def __call__(self, step_id: str, state: str) -> None:
        self.states[step_id] = state
        if not self.enabled:
            return
        if self._live is not None:
            self._live.update(self._table())
        elif state not in ("queued", "cached", "failed", "skipped"):
            # failed and skipped steps are reported once, with their log, when the run ends
            print(f"{state:>16}  {step_id}", file=sys.stderr, flush=True)


class PhaseClock:
    """Seconds per phase of a run, for `trace run --timings` and the bench."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._t = time.perf_counter()

    def mark(self, phase: str | None) -> None:
        """The time since the last mark goes to `phase` (None: to nothing)."""
        now = time.perf_counter()
        if phase is not None:
            self.laps[phase] = self.laps.get(phase, 0.0) + now - self._t
        self._t = now
