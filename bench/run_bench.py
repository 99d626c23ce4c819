"""trace vs raw nix, side by side on the same derivations (issues 2 and 14, "Performance").

    .venv/bin/python bench/run_bench.py [--sizes 10,100,1000] [--repeat 3] [--jobs 2]
                                        [--scale 10000 [--scale-cold]]

Every row prints its goal and whether this run met it. Scenarios (medians of --repeat runs;
every trace call is a real `trace run --quiet` subprocess):
  no-op       every N in --sizes: trace vs `nix-build --no-out-link` of the same derivations
              (identical .drv paths asserted); goal <= 0.1 at N=1000 (issue 30)
  leaf        N=max(--sizes): one sink's param changed; trace vs `nix-build -A <sink>` and
              the whole-expression `nix-build` (context: <= 1.0x -A is the watch row's goal);
              the .drv trace builds is the one raw Nix instantiates (asserted)
  cold        each N of --cold-size (100; e.g. 100,1000): a fresh salt per repetition, the same
              for both tools, and the outputs deleted between the tools so each really builds
              (context); trace's split (load, plan, render, build or, past
              engine.run.REALISE_CHUNK steps, instantiate + realise, collect, check, record)
  scale       with --scale N (bench/scale.py): wide and chain graphs of 1000 and N steps: no-op
              (<= 0.3 s), `trace plan` (<= 1 s), one change, peak RSS (<= 300 MB) and the growth
              factor 1000 -> N of each (<= N/1000: nothing super-linear)
  floor       beside leaf and cold, in the same repetitions: what no fresh `trace` process can
              avoid on a changed graph: an interpreter of the same venv importing pydantic
              (validates the changed pipeline file) and jinja2 (renders the changed step) and
              parsing the graph file with tomli, plus the cheaper of trace's own Nix time (its
              --timings: build, or instantiate + realise) and the reference. A goal below its
              floor cannot be met by a fresh process, only by work not redone per process (a
              resident trace). Then `trace / floor`: trace against that floor, per repetition:
              goal <= 1.15 (leaf) and <= 1.05 (cold) (issue 30).
  suites      more rows from bench/fork_bench.py when it exists (see SUITES)
The raw-Nix side is the expression a Nix user would write (tools.render_all). Each scenario has
its own trace state dir; everything lives in a temp dir removed at the end (trace's GC roots of
it included).
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from graphgen import Project
from rows import Row, table
from tools import (
    ENV,
    BenchError,
    Expression,
    delete_paths,
    drop_gcroots,
    instantiate,
    nix_build,
    output_of,
    render_all,
    split,
    trace_call,
    trace_drvs,
    trace_run,
)

# goals on trace / raw nix (issue 14)
GOAL_NOOP = 0.1  # issue 30 (issue 14: 0.2)
# issue 30: the per-process goals are on trace against its floor measured in the same run
# (floor_row); going below `nix-build -A` is the resident `trace watch`'s (bench/watch_bench.py)
GOAL_LEAF_FLOOR, GOAL_COLD_FLOOR = 1.15, 1.05
NOOP_SALT = "bench-noop-v1"  # shared by no-op/leaf graphs: their outputs may persist across runs
# Other suites: modules in bench/ with `add_args(parser)` and `run(args, work: Path) -> list[Row]`
# (skipped when absent). bench/fork_bench.py: the fork no-op rows (`nix run .#verify`).
SUITES = ("scale", "fork_bench", "watch_bench", "warm_bench")


def nix_part(lap: dict[str, float]) -> float:
    """Seconds trace spent in Nix per its --timings: one nix-build (`build`), or, past
    engine.run.REALISE_CHUNK dirty steps, nix-instantiate then chunked realises."""
    return lap.get("build", 0.0) + lap.get("instantiate", 0.0) + lap.get("realise", 0.0)


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
        t, counts = trace_call(self.proj, self.state, self.bench.jobs, "--timings")
        self.bench.expect("trace leaf change: built steps", counts.get("built"), 1)
        self._check("trace")
        lap = split(t)
        self.bench.splits.setdefault(("leaf change", self.proj.n), []).append(lap)
        self.bench.floors.setdefault(("leaf change", self.proj.n), []).append(
            (self.bench.floor_python(self.proj), nix_part(lap))
        )
        return t.seconds

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
        self.splits: dict[tuple[str, int], list[dict[str, float]]] = {}  # trace --timings
        # per repetition: (floor_python, trace's Nix time: nix_part), see floor_row
        self.floors: dict[tuple[str, int], list[tuple[float, float]]] = {}

    def floor_python(self, proj: Project) -> float:
        """Seconds of the Python part no fresh `trace` process can skip on a changed graph:
        start an interpreter of this venv, import pydantic (validates the changed file) and
        jinja2 (renders the changed step), parse the graph file with tomli. The best of 3:
        a floor. trace's own imports, validation, hashing and bookkeeping come on top."""
        code = (
            "import pydantic, jinja2, tomli, sys\n"
            "with open(sys.argv[1], 'rb') as fh: tomli.load(fh)"
        )
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            subprocess.run(
                [sys.executable, "-c", code, str(proj.graph)],
                check=True,
                env={**ENV, "PYDANTIC_DISABLE_PLUGINS": "__all__"},
            )
            best = min(best, time.perf_counter() - start)
        return best

    def floor_rows(self, row: Row, goal: float) -> list[Row]:
        """The floor row, then trace against that floor, per repetition (issue 30's goal)."""
        floor = self.floor_row(row)
        own = Row(
            f"{row.case}: trace / floor",
            row.n,
            raw_label="its floor",
            shape=row.shape,
            goal=goal,
        )
        own.trace, own.raw = list(row.trace), list(floor.trace)
        return [floor, own]

    def floor_row(self, row: Row) -> Row:
        """The floor against the same reference samples as `row`, per repetition: floor_python
        plus the cheaper of trace's own Nix time (nix_part) and the reference (a Nix part no
        cheaper than both was seen); the note says whether `row`'s goal lies below it."""
        floor = Row(f"{row.case}: floor", row.n, raw_label=row.raw_label, shape=row.shape)
        laps = self.floors.get((row.case, row.n or 0), [])
        floor.trace = [py + min(build, ref) for (py, build), ref in zip(laps, row.raw, strict=True)]
        floor.raw = row.raw
        if row.goal is not None and floor.ratio is not None:
            below = floor.ratio > row.goal
            floor.note = (
                f"goal <={row.goal:g}x is below this floor: not reachable by a fresh process"
                if below
                else f"floor is within the goal <={row.goal:g}x"
            )
        return floor

    def state(self, name: str) -> Path:
        path = self.work / "state" / name
        self.states.append(path)
        return path

    def project(self, name: str, n: int, salt: str, width: int = 10) -> Project:
        proj = Project(self.work / name, n, salt, width=width)
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
        goal = GOAL_NOOP if n == 1000 else None
        row = Row("no-op", n, raw_label="nix-build", shape="layered", goal=goal)
        full = Row("no-op, --full (no fast path)", n, raw_label="nix-build", shape="layered")
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
        row = Row(
            "leaf change", n, raw_label="nix-build -A <sink>", shape="layered"
        )  # context since issue 30: the goal is on its floor
        whole = Row("leaf change", n, raw_label="nix-build", shape="layered")
        for r in range(self.repeat):
            proj.notes = {sink: f"leaf-{self.nonce}-{r}"}
            proj.write()
            expr = render_all(proj)
            idx = expr.index(sink)
            (drv,) = instantiate(expr, idx)
            change = LeafChange(self, proj, state, expr, drv, output_of(drv))
            sides: list[Callable[[], None]] = [
                partial(record, row.trace, change.trace),
                partial(record, whole.raw, change.nix, None),
                partial(record, row.raw, change.nix, idx),
            ]
            self.alternate(r, sides)
            # the frontier build's .drv paths are those raw Nix instantiates (every step)
            ours = trace_drvs(proj, state, self.jobs)
            self.expect(
                f"leaf change N={n}: .drv paths of trace == nix-instantiate",
                [ours[s] for s in expr.order],
                instantiate(expr),
            )
        whole.trace = row.trace
        self.log(f"leaf change N={n}: sink {sink} rebuilt {self.repeat}x by each tool")
        return row, whole

    def cold(self, n: int) -> Row:
        row = Row("cold build", n, raw_label="nix-build", shape="layered")  # goal: on its floor
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
        t, counts = trace_call(proj, state, self.jobs, "--timings")
        self.expect(f"trace cold N={proj.n} built steps", counts.get("built"), proj.n)
        lap = split(t)
        self.splits.setdefault(("cold build", proj.n), []).append(lap)
        self.floors.setdefault(("cold build", proj.n), []).append(
            (self.floor_python(proj), nix_part(lap))
        )
        return t.seconds

    def cold_nix(self, expr: Expression) -> float:
        dt, builds = nix_build(expr, self.jobs)
        self.expect(f"nix-build cold N={len(expr.order)} builds", builds, len(expr.order))
        return dt

    def cleanup(self) -> None:
        for state in self.states:
            drop_gcroots(state)


def splits(bench: Bench, rows: list[Row]) -> str:
    """trace's own phases (medians of `trace run --timings`); `startup` = the rest of the wall
    time: interpreter start, imports, argument parsing, the lock, printing."""
    lines = ["trace's time by phase (medians, s):"]
    for (case, n), laps in bench.splits.items():
        total = next((r.median for r in rows if r.case == case and r.n == n and r.trace), None)
        names = list(dict.fromkeys(k for lap in laps for k in lap))
        med = {k: statistics.median(lap.get(k, 0.0) for lap in laps) for k in names}
        parts = [f"{k} {v:.3f}" for k, v in med.items()]
        if total is not None:
            parts.append(f"startup+other {total - sum(med.values()):.3f}")
        lines.append(f"  {case} N={n}: " + ", ".join(parts))
    return "\n".join(lines)


def stamp_load(rows: list[Row]) -> list[Row]:
    """Set the load average on the rows just measured (those without one)."""
    now = os.getloadavg()[0]
    for r in rows:
        if r.load is None:
            r.load = now
    return rows


def fmt_load(load: tuple[float, float, float] | None = None) -> str:
    return " ".join(f"{x:.2f}" for x in (load or os.getloadavg()))


def suites() -> list[Any]:
    """The other bench modules that exist (see SUITES)."""
    found = []
    for name in SUITES:
        try:
            found.append(importlib.import_module(name))
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", default="10,100,1000", help="no-op sizes; leaf uses the largest")
    ap.add_argument(
        "--cold-size", default="100", help="comma-separated sizes of the cold rows (goal at each)"
    )
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2, help="max parallel builds, same for both")
    ap.add_argument("--workdir", type=Path, default=None, help="default: a new temp dir")
    ap.add_argument("--only", default="", help="comma-separated suites to run (engine, scale, …)")
    mods = suites()
    for mod in mods:
        mod.add_args(ap)
    args = ap.parse_args(argv)
    sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    if args.repeat < 1 or not sizes:
        ap.error("need --repeat >= 1 and at least one size")
    only = {s.strip() for s in args.only.split(",") if s.strip()}

    started = time.perf_counter()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="trace-bench-", dir=args.workdir) as tmp:
        bench = Bench(Path(tmp), args.jobs, args.repeat)
        rows: list[Row] = []
        try:
            if not only or "engine" in only:
                rows.extend(stamp_load([bench.noop(n)])[0] for n in sizes)
                rows.extend(bench.extra_rows)
                leaf, whole = bench.leaf(max(sizes))
                rows += stamp_load([leaf, *bench.floor_rows(leaf, GOAL_LEAF_FLOOR), whole])
                for n in sorted({int(c) for c in args.cold_size.split(",") if c.strip()}):
                    cold = bench.cold(n)
                    rows += stamp_load([cold, *bench.floor_rows(cold, GOAL_COLD_FLOOR)])
            for mod in mods:
                if not only or mod.__name__ in only:
                    rows.extend(mod.run(args, Path(tmp) / mod.__name__))
                stamp_load(rows)
        except BenchError as exc:
            print(f"bench: FAILED: {exc}", file=sys.stderr)
            return 1
        finally:
            bench.cleanup()
    print(table(rows))
    if bench.splits:
        print("\n" + splits(bench, rows))
    met = [r for r in rows if r.goal is not None]
    missed = [r for r in met if r.met != "yes"]
    print(f"\ngoals met: {len(met) - len(missed)} of {len(met)}")
    print(f"total bench time {time.perf_counter() - started:.0f} s; jobs={args.jobs}")
    # the machine is shared: absolute times are only as good as the load they were taken at
    print(f"load average (1, 5, 15 min) at start {fmt_load(load_before)}, at end {fmt_load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
