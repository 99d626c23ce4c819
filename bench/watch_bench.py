"""The `watch` row of bench/run_bench.py (issue 30): one step changed at N, `trace watch`
against `nix-build -A <sink>`, goal <= 1.0x.

A layered graph of N steps (bench/graphgen.py) is built once; then `trace watch` runs as a
resident process. Per repetition, the sink's note is edited (one dirty step) and trace's time is
from the edit to the end of the round it prints ("  ok"); the reference is `nix-build -A <sink>`
of the same derivation as a Nix user writes it (tools.render_all), each side starting without the
sink's .drv and output. The load average is printed with the table by run_bench.py.

What this measures today: `trace watch` notices the edit by polling (interval 0.05 s here) and
then runs a full plan (load through the load cache, plan, build the frontier) in its resident
process: it saves the interpreter start and the imports, not the load and plan
(docs/performance.md).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

GOAL_WATCH = 1.0


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
    from tools import ENV, TRACE, delete_paths, instantiate, nix_build, output_of, render_all

    n = args.watch_size
    proj = Project(work / f"watch-{n}", n, f"bench-watch-{uuid.uuid4().hex[:8]}")
    proj.write()
    state = work / "state"
    sink = proj.sinks()[0]
    cmd = [TRACE, "watch", str(proj.graph), "--root", str(proj.root), "--state-dir", str(state)]
    proc = subprocess.Popen(
        [*cmd, "-j", str(args.jobs), "--interval", "0.05"],
        cwd=proj.root,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    row = Row("watch: one step changed", n, raw_label="nix-build -A <sink>", goal=GOAL_WATCH)
    try:
        _until_ok(proc)  # the first, cold round
        for r in range(args.repeat):
            proj.notes = {sink: f"watch-{uuid.uuid4().hex}-{r}"}
            expr = render_all(proj)
            idx = expr.index(sink)
            (drv,) = instantiate(expr, idx)
            out = output_of(drv)
            delete_paths([out, drv], [state])
            began = time.perf_counter()
            proj.write()
            seen = _until_ok(proc)
            row.trace.append(time.perf_counter() - began)
            if not any(f"built {sink}" in line for line in seen):
                from tools import BenchError

                raise BenchError(f"trace watch did not rebuild {sink}:\n" + "".join(seen))
            delete_paths([out, drv], [state])
            row.raw.append(nix_build(expr, args.jobs, idx)[0])
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
    return [row]
