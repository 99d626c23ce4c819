"""The `watch` row of bench/run_bench.py (issue 30): one step changed at N, `trace watch`
against `nix-build -A <sink>`, goal <= 1.0x.

A layered graph of N steps (bench/graphgen.py) is built once; then `trace watch` runs as a
resident process. Per repetition, the sink's note is edited (one dirty step) and trace's time is
from the edit to the end of the round it prints ("  ok"); the reference is `nix-build -A <sink>`
of the same derivation as a Nix user writes it (tools.render_all), each side starting without the
sink's .drv and output. The load average is printed with the table by run_bench.py.

`trace watch` is woken by inotify and answers the edit from its resident graph
(engine/resident.py): only the edited step's table is parsed and validated, only its key and
those below it are recomputed, the clean steps' results and `.drv` paths come from memory, and
one `nix-build` builds the frontier. The two sides alternate which goes first; after each, the
sink's output path (input-addressed: the same derivation) must exist. The graph's salt is fixed
(WATCH_SALT), so the first round reuses what an earlier bench run built.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import time
from functools import partial
from pathlib import Path
from typing import Any

GOAL_WATCH = 1.0
WATCH_SALT = "bench-watch-v1"


def add_args(ap: argparse.ArgumentParser) -> None:
    """bench/run_bench.py's suite interface."""
    ap.add_argument("--watch-size", type=int, default=1000, help="steps of the watch row's graph")


def _until_ok(proc: subprocess.Popen[str]) -> list[str]:
    """The lines of one round, up to its last ("  ok" or "  FAILED"): blocking reads (a select()
    on the pipe would not see lines already in the reader's buffer)."""
    assert proc.stdout is not None
    seen: list[str] = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith(("  ok", "  FAILED")):
            return seen
    from tools import BenchError

    raise BenchError("trace watch ended without a round end:\n" + "".join(seen[-20:]))


def run(args: argparse.Namespace, work: Path) -> list[Any]:
    """bench/run_bench.py's suite interface: the watch row."""
    import uuid

    from graphgen import Project
    from rows import Row
    from tools import (
        ENV,
        TRACE,
        BenchError,
        delete_paths,
        instantiate,
        output_of,
        render_all,
    )

    n = args.watch_size
    proj = Project(work / f"watch-{n}", n, WATCH_SALT)
    proj.write()
    state = work / "state"
    sink = proj.sinks()[0]
    cmd = [TRACE, "watch", str(proj.graph), "--root", str(proj.root), "--state-dir", str(state)]
    proc = subprocess.Popen(
        [*cmd, "-j", str(args.jobs)],
        cwd=proj.root,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    row = Row("watch: one step changed", n, raw_label="nix-build -A <sink>", goal=GOAL_WATCH)
    try:
        _until_ok(proc)  # the first round
        for r in range(args.repeat):
            proj.notes = {sink: f"watch-{uuid.uuid4().hex}-{r}"}
            expr = _expression(proj, render_all)
            idx = expr.index(sink)
            (drv,) = instantiate(expr, idx)
            out = output_of(drv)
            sides = [
                ("trace", partial(_trace_round, proc, proj, sink)),
                ("nix", partial(_nix_round, expr, args.jobs, idx)),
            ]
            for name, side in sides if r % 2 == 0 else sides[::-1]:
                delete_paths([out, drv], [state])
                (row.trace if name == "trace" else row.raw).append(side())
                if not Path(out).exists():
                    import glob

                    raise BenchError(
                        f"{name} did not build {out} ({drv}); present: "
                        + " ".join(glob.glob(f"/nix/store/*-{sink}.drv")[-3:])
                    )
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
    return [row]


def _expression(proj: Any, render_all: Any) -> Any:
    """The plain expression of the edited graph, rendered from a copy of the graph file beside
    it (the watched graph file is written by trace's side only: else the watch would start
    building while the reference does)."""
    from types import SimpleNamespace

    nxt = proj.graph.with_name(".graph-next.toml")
    nxt.write_text(proj.toml(), encoding="utf-8")
    try:
        return render_all(SimpleNamespace(graph=nxt, root=proj.root))
    finally:
        nxt.unlink()


def _nix_round(expr: Any, jobs: int, idx: int) -> float:
    from tools import nix_build

    return float(nix_build(expr, jobs, idx)[0])


def _trace_round(proc: subprocess.Popen[str], proj: Any, sink: str) -> float:
    """Write the edited graph file; seconds until trace's round ends. It must build the sink
    only."""
    from tools import BenchError

    began = time.perf_counter()
    proj.write()
    seen = _until_ok(proc)
    took = time.perf_counter() - began
    if not seen[0].rstrip().endswith("[resident]"):
        raise BenchError("trace watch ran a full plan for a one-step edit:\n" + "".join(seen))
    built = [line for line in seen if line.startswith(("  built ", "  reused "))]
    if len(built) != 1 or not built[0].startswith(f"  built {sink} "):
        raise BenchError(f"trace watch did not build exactly {sink}:\n" + "".join(seen))
    return took
