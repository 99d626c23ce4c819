"""The 10,000-step rows of the bench (issue 14): `run_bench.py --scale 10000 [--scale-cold]`.

Two shapes, each at 1000 steps and at --scale steps: `wide` (10 layers of N/10 steps) and
`chain` (every step needs the one before it: N layers of 1). For each:
  no-op        `trace run` with nothing changed (the stat-only fast path)        goal <= 0.3 s
  plan         `trace plan` with nothing changed (loads, hashes, plans all)     goal <= 1 s
  one change   one sink's param edited, `trace run` builds it; `nix-build -A <sink>` of the
               plain expression next to it (the sink's .drv and output deleted before each)
  peak RSS     the largest of trace and the Nix processes it ran, over those runs  <= 300 MB
  growth       median at N / median at 1000, per case                          <= N / 1000
The first build of each graph is cold the first time on a machine (the salt is fixed, so later
bench runs find the outputs); --scale-cold uses a new salt and reports that cold build's time.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from pathlib import Path

from graphgen import Project
from rows import Row
from tools import (
    delete_paths,
    drop_gcroots,
    instantiate,
    nix_build,
    output_of,
    render_all,
    trace_call,
    trace_plan,
)

SALT = "bench-scale-v1"
SHAPES = {"wide": lambda n: n // 10, "chain": lambda n: 1}
GOAL_NOOP, GOAL_PLAN, GOAL_RSS = 0.3, 1.0, 300.0


def add_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--scale", type=int, default=0, help="also run the scale rows at this N")
    ap.add_argument("--scale-cold", action="store_true", help="scale: a cold first build")
    ap.add_argument("--scale-shapes", default="wide,chain", help="scale: shapes to run")


def log(msg: str) -> None:
    import sys

    print(f"[{time.strftime('%H:%M:%S')}] scale: {msg}", file=sys.stderr, flush=True)


def measure(work: Path, shape: str, n: int, args: argparse.Namespace) -> dict[str, Row]:
    salt = f"scale-cold-{uuid.uuid4().hex[:8]}" if args.scale_cold else SALT
    proj = Project(work / f"{shape}-{n}", n, salt, width=SHAPES[shape](n))
    proj.write()
    state = work / "state" / f"{shape}-{n}"
    rows = {
        case: Row(case, n, shape=shape)
        for case in ("no-op", "plan", "one change", "peak RSS", "first build")
    }
    rows["peak RSS"].unit = "MB"
    try:
        log(f"{shape} N={n}: first build")
        t, counts = trace_call(proj, state, args.jobs)
        rows["first build"].trace.append(t.seconds)
        built, reused = counts.get("built", 0), counts.get("reused", 0)
        rows["first build"].note = f"built {built}, reused {reused}"
        rss = [t.rss_mb]
        time.sleep(1.2)  # let the files age so the fast path may stamp them (engine/fastpath.py)
        trace_call(proj, state, args.jobs, "--full")
        for _ in range(args.repeat):
            t, counts = trace_call(proj, state, args.jobs)
            assert counts.get("cached") == n, counts
            rows["no-op"].trace.append(t.seconds)
            rss.append(t.rss_mb)
            p = trace_plan(proj, state)
            assert f"0 of {n} steps would build" in p.stdout, p.stdout[-300:]
            rows["plan"].trace.append(p.seconds)
            rss.append(p.rss_mb)
        sink = proj.sinks()[0]
        change = rows["one change"]
        change.raw_label = "nix-build -A <sink>"
        for r in range(args.repeat):
            proj.notes = {sink: f"scale-{uuid.uuid4().hex[:8]}-{r}"}
            proj.write()
            expr = render_all(proj)
            idx = expr.index(sink)
            (drv,) = instantiate(expr, idx)
            out = output_of(drv)
            delete_paths([out, drv], [state])
            t, counts = trace_call(proj, state, args.jobs)
            assert counts.get("built") == 1, counts
            change.trace.append(t.seconds)
            rss.append(t.rss_mb)
            delete_paths([out, drv], [state])
            dt, builds = nix_build(expr, args.jobs, idx)
            assert builds == 1, builds
            change.raw.append(dt)
        rows["peak RSS"].trace.append(max(rss))
        for row in rows.values():  # as it goes: a long run stopped later keeps these
            log(f"{shape} N={n} {row.case}: trace {row.trace} reference {row.raw}")
    finally:
        drop_gcroots(state)
    return rows


def run(args: argparse.Namespace, work: Path) -> list[Row]:
    if not args.scale:
        return []
    out: list[Row] = []
    base = 1000 if args.scale > 1000 else max(10, args.scale // 10)  # small N: a quick try
    for shape in [s.strip() for s in args.scale_shapes.split(",") if s.strip()]:
        small = measure(work, shape, base, args)
        big = measure(work, shape, args.scale, args)
        big["no-op"].goal = GOAL_NOOP
        big["plan"].goal = GOAL_PLAN
        big["peak RSS"].goal = GOAL_RSS
        if not args.scale_cold:
            big["first build"].note += " (cold only the first time: --scale-cold)"
        for case in ("no-op", "plan", "one change", "peak RSS", "first build"):
            out += [small[case], big[case]]
        for case in ("no-op", "plan", "one change"):
            a, b = small[case].trace, big[case].trace
            growth = Row(f"growth {case} {base}->N", args.scale, shape=shape, unit="x")
            growth.trace = [statistics.median(b) / statistics.median(a)]
            growth.goal = args.scale / base
            out.append(growth)
    return out
