"""One row of the bench table: a case, its samples, its goal and whether the goal is met.

Shared by every bench suite (run_bench.py's engine rows, scale.py, fork_bench.py), so the table
prints every row the same way: the goal is on the ratio trace/reference when the row has a
reference (both sides measured back to back in the same run), else on the median itself.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field


@dataclass
class Row:
    case: str
    n: int | None = None
    trace: list[float] = field(default_factory=list)  # samples: seconds, or MB with unit="MB"
    raw: list[float] = field(default_factory=list)  # the reference's samples, back to back
    raw_label: str = ""  # e.g. "nix-build", "nix-build -A <sink>"
    shape: str = ""  # graph shape: layered (width 10), wide, chain
    unit: str = "s"  # s | MB | x (a growth factor)
    goal: float | None = None  # on the ratio when there is a reference, else on the median
    note: str = ""
    load: float | None = None  # the 1-minute load average when the row was measured

    @property
    def median(self) -> float | None:
        return statistics.median(self.trace) if self.trace else None

    @property
    def ratio(self) -> float | None:
        if not self.trace or not self.raw:
            return None
        return statistics.median(self.trace) / statistics.median(self.raw)

    @property
    def paired(self) -> float | None:
        """Median of per-repetition ratios (both sides ran back to back): robust to load drift."""
        if not self.trace or len(self.trace) != len(self.raw):
            return None
        return statistics.median(t / r for t, r in zip(self.trace, self.raw, strict=True))

    @property
    def value(self) -> float | None:
        """What the goal applies to."""
        return self.ratio if self.raw else self.median

    @property
    def met(self) -> str:
        if self.goal is None or self.value is None:
            return "-"
        return "yes" if self.value <= self.goal else "NO"


def _num(x: float | None, unit: str) -> str:
    if x is None:
        return "-"
    if unit == "MB":
        return f"{x:.0f} MB"
    if unit == "x":
        return f"{x:.2f}x"
    return f"{x:.3f} s"


def table(rows: list[Row]) -> str:
    head = (
        f"{'case':<30} {'shape':<8} {'N':>6}  {'trace':>10}  {'reference':>10}  "
        f"{'ref. command':<20} {'ratio/value':>11}  {'goal':>9}  met  {'paired':>6}  {'load':>5}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        unit = "x" if r.raw else r.unit
        ref = statistics.median(r.raw) if r.raw else None
        goal = "-" if r.goal is None else f"<={_num(r.goal, unit).replace(' ', '')}"
        lines.append(
            f"{r.case:<30} {r.shape:<8} {r.n if r.n is not None else '-':>6}  "
            f"{_num(r.median, r.unit):>10}  {_num(ref, 's'):>10}  {r.raw_label:<20} "
            f"{_num(r.value, unit):>11}  {goal:>9}  {r.met:<3}  "
            f"{'-' if r.paired is None else f'{r.paired:6.3f}':>6}  "
            f"{'-' if r.load is None else f'{r.load:5.1f}':>5}" + (f"  {r.note}" if r.note else "")
        )
    lines.append(
        "ratio = median(trace) / median(reference), both measured back to back in this run; "
        "paired = median of per-repetition ratios; load = the 1-minute load average when the "
        "row was measured (a shared machine: compare ratios taken at a similar load only)"
    )
    lines.append("")
    lines.append("samples:")
    for r in rows:
        tr = ", ".join(f"{x:.3f}" for x in r.trace)
        rw = ", ".join(f"{x:.3f}" for x in r.raw)
        extra = f"  {r.raw_label} [{rw}]" if r.raw else ""
        lines.append(f"  {r.case} {r.shape} N={r.n}: trace [{tr}]{extra}")
    return "\n".join(lines)
