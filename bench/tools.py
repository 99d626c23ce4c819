"""The two sides of the benchmark: the `trace` CLI and the raw nix commands, on the same graph.

`render_all` renders the whole graph with the engine's own `render_expression`, so `nix-build`
of that file instantiates exactly the derivations trace builds (the benchmark asserts it).
Store paths are deleted between the two sides of a measurement so each really builds.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from graphgen import Project

TRACE = str(Path(sys.executable).with_name("trace"))
# Subprocesses run as a user's would: with bytecode caching (an environment that turns it off
# makes every trace call compile the engine from source, ~1 s on a loaded 2-core machine).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
_SUMMARY = re.compile(r"^(\d+) steps: (.*)$", re.M)
_BUILDING = re.compile(r"^building '/nix/store/[^']+\.drv'", re.M)


class BenchError(RuntimeError):
    pass


@dataclass
class Timed:
    seconds: float
    stdout: str
    stderr: str
    rss_mb: float = 0.0  # peak RSS of the process and the children it waited for (Nix's)


def timed(cmd: list[str], cwd: Path) -> Timed:
    """Run a command as a real subprocess; wall-clock seconds and peak RSS (wait4); fail loudly
    on a non-zero exit."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=err, env=ENV)
        _, status, usage = os.wait4(proc.pid, 0)
        dt = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if proc.returncode != 0:
        raise BenchError(
            f"{' '.join(cmd)} exited {proc.returncode}\n{stderr[-3000:]}{stdout[-1000:]}"
        )
    return Timed(dt, stdout, stderr, usage.ru_maxrss / 1024)


# ---- trace ----


def trace_cmd(project: Project, state: Path, jobs: int, *extra: str) -> list[str]:
    return [
        TRACE,
        "run",
        str(project.graph),
        "--root",
        str(project.root),
        "--state-dir",
        str(state),
        "-j",
        str(jobs),
        *extra,
    ]


_TIMINGS = re.compile(r"^timings: (.*)$", re.M)


def trace_run(
    project: Project, state: Path, jobs: int, *extra: str
) -> tuple[float, dict[str, int]]:
    """`trace run --quiet`: seconds and the status counts of its summary line."""
    t, counts = trace_call(project, state, jobs, *extra)
    return t.seconds, counts


def split(t: Timed) -> dict[str, float]:
    """The phases `trace run --timings` printed: phase -> seconds."""
    m = _TIMINGS.search(t.stderr)
    if not m:
        raise BenchError(f"no timings line in trace's stderr:\n{t.stderr[-2000:]}")
    out: dict[str, float] = {}
    for part in m.group(1).split(", "):
        name, value, _ = part.split(" ")
        out[name] = float(value)
    return out


def trace_plan(project: Project, state: Path) -> Timed:
    """`trace plan` (evaluates the dirty steps, builds nothing)."""
    cmd = [TRACE, "plan", str(project.graph), "--root", str(project.root)]
    return timed([*cmd, "--state-dir", str(state)], project.root)


def trace_call(
    project: Project, state: Path, jobs: int, *extra: str
) -> tuple[Timed, dict[str, int]]:
    """`trace run --quiet`: the call and the status counts of its summary line."""
    t = timed(trace_cmd(project, state, jobs, "--quiet", *extra), project.root)
    m = _SUMMARY.search(t.stdout)
    if not m:
        raise BenchError(f"no summary line in trace's output:\n{t.stdout}")
    counts = {"steps": int(m.group(1))}
    for part in m.group(2).split(", "):
        num, _, status = part.partition(" ")
        if num.isdigit():
            counts[status] = int(num)
    return t, counts


def trace_drvs(project: Project, state: Path, jobs: int) -> dict[str, str]:
    """step id -> .drv path, from `trace run --json` (every step must have a result)."""
    t = timed(trace_cmd(project, state, jobs, "--json", "--quiet"), project.root)
    steps = json.loads(t.stdout)["steps"]
    return {sid: s["drv"] for sid, s in steps.items()}


def drop_gcroots(state: Path, outs: set[str] | None = None) -> None:
    """Remove trace's GC roots of a state dir (all, or those pointing at `outs`)."""
    link = state / "gcroots"
    if not link.is_symlink():
        return
    base = Path(os.readlink(link))
    if outs is None:
        shutil.rmtree(base, ignore_errors=True)
        return
    for entry in base.iterdir():
        if entry.is_symlink() and os.readlink(entry) in outs:
            entry.unlink()


# ---- raw nix ----


@dataclass
class Expression:
    file: Path
    order: list[str]  # list position in the expression -> step id

    def index(self, sid: str) -> int:
        return self.order.index(sid)


def render_all(project: Project) -> Expression:
    """Every step of the graph in one Nix file, as a Nix user would write it: each step bound to
    its rendered template (engine/expression.py with plain=True: no `view`, nothing imported)."""
    from engine import expression
    from engine.graph import load_graph
    from engine.hashing import key_digest
    from engine.plan import components

    graph = load_graph(project.graph, root=project.root)
    keys: dict[str, str] = {}
    for sid in graph.order:
        keys[sid] = key_digest(components(graph, graph.steps[sid], keys))
    order = list(graph.order)
    text = expression.build(graph, keys, order, plain=True).text
    path = project.root / "raw" / "all.nix"
    path.parent.mkdir(exist_ok=True)
    tmp = path.with_name(".all.nix.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return Expression(path, order)


def nix_build(expr: Expression, jobs: int, attr: int | None = None) -> tuple[float, int]:
    """`nix-build --no-out-link` of the expression (or one list element): seconds, builds."""
    cmd = ["nix-build", "--no-out-link", "--max-jobs", str(jobs), str(expr.file)]
    if attr is not None:
        cmd += ["-A", str(attr)]
    t = timed(cmd, expr.file.parent)
    return t.seconds, len(_BUILDING.findall(t.stderr))


def instantiate(expr: Expression, attr: int | None = None) -> list[str]:
    cmd = ["nix-instantiate", str(expr.file)] + (["-A", str(attr)] if attr is not None else [])
    return [ln for ln in timed(cmd, expr.file.parent).stdout.splitlines() if ln.strip()]


def output_of(drv: str) -> str:
    from engine.nix import output_of as out

    return out(drv)


def delete_paths(paths: list[str], states: list[Path]) -> None:
    """Delete store paths (outputs and .drv files) after dropping trace's roots of them."""
    outs = set(paths)
    for state in states:
        drop_gcroots(state, outs)
    present = [p for p in paths if os.path.lexists(p)]
    if present:
        timed(["nix-store", "--delete", *present], Path("/"))
    left = [p for p in paths if os.path.lexists(p)]
    if left:
        raise BenchError(f"could not delete {len(left)} store paths, e.g. {left[0]}")
