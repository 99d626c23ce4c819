"""trace vs raw nix, side by side on the same derivations (issue 2, "Performance").

    .venv/bin/python bench/run_bench.py [--sizes 10,100,1000] [--repeat 3] [--jobs 2]

Scenarios (medians of --repeat runs; every trace call is a real `trace run --quiet` subprocess):
  no-op       every N in --sizes: trace vs `nix-build --no-out-link` of the same expression
              (identical .drv paths asserted); the goal (<= 0.2) applies at N=1000
  leaf        N=max(--sizes): one sink's param changed; trace vs whole-expression `nix-build`
              (goal <= 1.0), and `nix-build -A <sink>` for context
  cold        N=--cold-size (100): a fresh salt per repetition, the same for both tools, and the
              outputs deleted between the tools so each really builds (goal <= 1.15)
Each scenario has its own trace state dir; everything lives in a temp dir removed at the end
(trace's GC roots of it included).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from graphgen import Project
from tools import (
    BenchError,
    Expression,
    delete_paths,
    drop_gcroots,
    instantiate,
    nix_build,
    output_of,
    render_all,
    trace_drvs,
    trace_run,
)

# (scenario, N) -> goal for trace / raw nix
GOALS = {("no-op", 1000): 0.2, ("leaf change", 1000): 1.0, ("cold build", 100): 1.15}
NOOP_SALT = "bench-noop-v1"  # shared by no-op/leaf graphs: their outputs may persist across runs


@dataclass
class Row:
    scenario: str
    n: int
    trace: list[float] = field(default_factory=list)
    raw: list[float] = field(default_factory=list)
    raw_label: str = "nix-build"
    context: bool = False  # a row for context (no trace column)

    @property
    def paired(self) -> float | None:
        """Median of per-repetition ratios (both sides ran back to back): robust to load drift."""
        if not self.trace or len(self.trace) != len(self.raw):
            return None
        return statistics.median(t / r for t, r in zip(self.trace, self.raw, strict=True))

    @property
    def ratio(self) -> float | None:
        if not self.trace or not self.raw:
            return None
        return statistics.median(self.trace) / statistics.median(self.raw)


def record(into: list[float], fn: Callable[..., float], *args: Any) -> None:
    into.append(fn(*args))


@dataclass
class LeafChange:
    """One sink edit, measured once per tool: each starts without the sink's .drv and output,
    and afterwards the (input-addressed) output path must exist: the same derivation was built."""

    bench: Bench
    proj: Project
    state: Path
    expr: Expression
    drv: str
    out: str

    def _fresh(self) -> None:
        delete_paths([self.out, self.drv], [self.state])

    def _check(self, label: str) -> None:
        if not Path(self.out).exists():
            raise BenchError(f"{label} did not produce {self.out} ({self.drv})")

    def trace(self) -> float:
        self._fresh()
        dt, counts = trace_run(self.proj, self.state, self.bench.jobs)
        self.bench.expect("trace leaf change: built steps", counts.get("built"), 1)
        self._check("trace")
        return dt

    def nix(self, attr: int | None) -> float:
        self._fresh()
        dt, builds = nix_build(self.expr, self.bench.jobs, attr)
        self.bench.expect(f"nix-build leaf change (-A {attr}): builds", builds, 1)
        self._check("nix-build")
        return dt


class Bench:
    def __init__(self, work: Path, jobs: int, repeat: int) -> None:
        self.work = work
        self.jobs = jobs
        self.repeat = repeat
        self.nonce = uuid.uuid4().hex[:10]
        self.states: list[Path] = []
        self.extra_rows: list[Row] = []  # context rows (e.g. the no-op without the fast path)

    def state(self, name: str) -> Path:
        path = self.work / "state" / name
        self.states.append(path)
        return path

    def project(self, name: str, n: int, salt: str) -> Project:
        proj = Project(self.work / name, n, salt)
        proj.write()
        return proj

    def log(self, msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    def expect(self, what: str, got: object, want: object) -> None:
        if got != want:
            raise BenchError(f"{what}: expected {want}, got {got}")

    def alternate(self, r: int, runs: list[Callable[[], None]]) -> None:
        """Run the sides in a rotated order per repetition, so neither always goes first."""
        k = r % len(runs)
        for fn in runs[k:] + runs[:k]:
            fn()

    # ---- scenarios ----

    def noop(self, n: int) -> Row:
        proj = self.project(f"noop-{n}", n, NOOP_SALT)
        state = self.state(f"noop-{n}")
        self.log(f"no-op N={n}: initial build")
        trace_run(proj, state, self.jobs)
        expr = render_all(proj)
        nix_build(expr, self.jobs)  # warm: nothing to build, .drv files exist
        # trace's stat-only no-op answer is recorded only for files older than the run that
        # records it (engine/fastpath.py): let the just-generated files age, then one full run.
        time.sleep(1.2)
        trace_run(proj, state, self.jobs, "--full")
        row = Row("no-op", n)
        full = Row("no-op, --full", n)
        for _ in range(self.repeat):
            dt, counts = trace_run(proj, state, self.jobs)
            self.expect(f"trace no-op N={n} cached steps", counts.get("cached"), n)
            self.expect(f"trace no-op N={n} built steps", counts.get("built", 0), 0)
            row.trace.append(dt)
            dt, counts = trace_run(proj, state, self.jobs, "--full")
            self.expect(f"trace --full no-op N={n} cached steps", counts.get("cached"), n)
            full.trace.append(dt)
            dt, builds = nix_build(expr, self.jobs)
            self.expect(f"nix-build no-op N={n} builds", builds, 0)
            row.raw.append(dt)
            full.raw.append(dt)
        self.extra_rows.append(full)
        ours = trace_drvs(proj, state, self.jobs)
        raw = instantiate(expr)
        self.expect(
            f"no-op N={n}: .drv paths of trace == nix-instantiate",
            [ours[s] for s in expr.order],
            raw,
        )
        self.log(f"no-op N={n}: {n} identical .drv paths")
        return row

    def leaf(self, n: int) -> tuple[Row, Row]:
        proj = self.project(f"leaf-{n}", n, NOOP_SALT)
        state = self.state(f"leaf-{n}")
        self.log(f"leaf change N={n}: initial build")
        trace_run(proj, state, self.jobs)
        sink = proj.sinks()[0]
        row = Row("leaf change", n)
        ctx = Row("leaf change", n, raw_label="nix-build -A <sink>", context=True)
        for r in range(self.repeat):
            proj.notes = {sink: f"leaf-{self.nonce}-{r}"}
            proj.write()
            expr = render_all(proj)
            idx = expr.index(sink)
            (drv,) = instantiate(expr, idx)
            change = LeafChange(self, proj, state, expr, drv, output_of(drv))
            sides: list[Callable[[], None]] = [
                partial(record, row.trace, change.trace),
                partial(record, row.raw, change.nix, None),
                partial(record, ctx.raw, change.nix, idx),
            ]
            self.alternate(r, sides)
        ctx.trace = row.trace
        self.log(f"leaf change N={n}: sink {sink} rebuilt {self.repeat}x by each tool")
        return row, ctx

    def cold(self, n: int) -> Row:
        row = Row("cold build", n)
        proj = self.project(f"cold-{n}", n, "")
        for r in range(self.repeat):
            proj.salt = f"cold-{self.nonce}-{r}"
            proj.write()
            expr = render_all(proj)
            state = self.state(f"cold-{n}-{r}")
            if r % 2 == 0:
                row.trace.append(self.cold_trace(proj, state))
                paths = self.store_paths(expr)
                delete_paths(paths, [state])  # so nix-build really builds all again
                row.raw.append(self.cold_nix(expr))
            else:
                row.raw.append(self.cold_nix(expr))
                paths = self.store_paths(expr)
                delete_paths(paths, [state])
                row.trace.append(self.cold_trace(proj, state))
            ours = trace_drvs(proj, state, self.jobs)
            self.expect(
                f"cold N={n}: .drv paths of trace == nix-instantiate",
                [ours[s] for s in expr.order],
                instantiate(expr),
            )
            delete_paths(paths, [state])  # leave no garbage behind
            self.log(f"cold N={n} rep {r + 1}: both built {n} identical derivations")
        return row

    def store_paths(self, expr: Expression) -> list[str]:
        drvs = instantiate(expr)
        return [output_of(d) for d in drvs] + drvs

    def cold_trace(self, proj: Project, state: Path) -> float:
        dt, counts = trace_run(proj, state, self.jobs)
        self.expect(f"trace cold N={proj.n} built steps", counts.get("built"), proj.n)
        return dt

    def cold_nix(self, expr: Expression) -> float:
        dt, builds = nix_build(expr, self.jobs)
        self.expect(f"nix-build cold N={len(expr.order)} builds", builds, len(expr.order))
        return dt

    def cleanup(self) -> None:
        for state in self.states:
            drop_gcroots(state)


def fmt(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:8.3f}"


def table(rows: list[Row]) -> str:
    head = f"{'scenario':<12} {'N':>5}  {'trace s':>8}  {'raw nix s':>9}  {'raw command':<19}"
    head += f"  {'ratio':>6}  {'goal':>6}  met  {'paired':>6}"
    lines = [head, "-" * len(head)]
    for row in rows:
        t = statistics.median(row.trace) if row.trace else None
        raw = statistics.median(row.raw) if row.raw else None
        ratio = row.ratio
        goal = None if row.context else GOALS.get((row.scenario, row.n))
        met = "-" if goal is None or ratio is None else ("yes" if ratio <= goal else "NO")
        lines.append(
            f"{row.scenario:<12} {row.n:>5}  {fmt(t)}  {fmt(raw):>9}  {row.raw_label:<19}"
            f"  {'-' if ratio is None else f'{ratio:6.3f}':>6}"
            f"  {'-' if goal is None else f'<={goal}':>6}  {met:<3}"
            f"  {'-' if row.paired is None else f'{row.paired:6.3f}':>6}"
        )
    lines.append("ratio = median(trace) / median(raw); paired = median of per-repetition ratios")
    lines.append("")
    lines.append("samples (s):")
    for row in rows:
        tr = ", ".join(f"{x:.3f}" for x in row.trace)
        rw = ", ".join(f"{x:.3f}" for x in row.raw)
        lines.append(f"  {row.scenario} N={row.n}: trace [{tr}]  {row.raw_label} [{rw}]")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", default="10,100,1000", help="no-op sizes; leaf uses the largest")
    ap.add_argument("--cold-size", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2, help="max parallel builds, same for both")
    ap.add_argument("--workdir", type=Path, default=None, help="default: a new temp dir")
    args = ap.parse_args(argv)
    sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    if args.repeat < 1 or not sizes:
        ap.error("need --repeat >= 1 and at least one size")

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="trace-bench-", dir=args.workdir) as tmp:
        bench = Bench(Path(tmp), args.jobs, args.repeat)
        rows: list[Row] = []
        try:
            rows.extend(bench.noop(n) for n in sizes)
            rows.extend(bench.extra_rows)
            rows.extend(bench.leaf(max(sizes)))
            rows.append(bench.cold(args.cold_size))
        except BenchError as exc:
            print(f"bench: FAILED: {exc}", file=sys.stderr)
            return 1
        finally:
            bench.cleanup()
    print(table(rows))
    print(f"\ntotal bench time {time.perf_counter() - started:.0f} s; jobs={args.jobs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
