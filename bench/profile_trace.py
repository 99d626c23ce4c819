"""Where does `trace run` spend its time? No-op and leaf change on the N=1000 bench graph,
and a cold build of N=100 (a new salt before every measured run).

    .venv/bin/python bench/profile_trace.py [--n 1000] [--cold-n 100] [--top 25]

Prints, for each case:
  1. the wall time of the real CLI subprocess next to a bare `python -c pass`;
  2. `python -X importtime` of that CLI call: the costliest top-level imports (cumulative);
  3. phases timed in-process without a profiler (open index, load_graph, plan, run_graph);
  4. a cProfile of `engine.cli.main([...])`: selected engine/library functions (cumulative)
     and the top functions by own time.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from graphgen import Project
from run_bench import NOOP_SALT
from tools import ENV, TRACE, drop_gcroots, timed, trace_cmd, trace_run

# (file suffix, function name) -> label, for the cumulative-time table
FOCUS = [
    ("engine/cli/__init__.py", "main", "cli.main (everything)"),
    ("engine/cli/__init__.py", "build_parser", "cli.build_parser"),
    ("engine/cache.py", "__init__", "Index() (lock + sqlite + gcroots dir)"),
    ("engine/hashing.py", "__init__", "StatCache() (loads stat_cache table)"),
    ("engine/graph.py", "load_graph", "load_graph"),
    ("engine/graphfile.py", "read_file", "  tomli + PipelineFile validation"),
    ("engine/graphfile.py", "find_line", "  find_line (regex line lookup)"),
    ("engine/graphparams.py", "resolve_params", "  _resolve_params"),
    ("engine/graphparams.py", "path", "  Resolver.path (input digests)"),
    ("engine/hashing.py", "git_tree_digest", "  git_tree_digest (package set)"),
    ("engine/hashing.py", "tree_digest", "  tree_digest"),
    ("engine/run.py", "run_graph", "run_graph"),
    ("engine/plan.py", "plan", "  plan"),
    ("engine/plan.py", "components", "    components"),
    ("engine/hashing.py", "digest_json", "    digest_json (rfc8785 + sha256)"),
    ("rfc8785/_impl.py", "dumps", "      rfc8785.dumps"),
    ("engine/cache.py", "results", "    Index.results"),
    ("engine/cache.py", "last_keys", "    Index.last_keys (json.loads of components)"),
    ("engine/plan.py", "_why", "    _why"),
    ("engine/evaluation.py", "render_expression", "  render_expression"),
    ("engine/render.py", "render", "    render (jinja2)"),
    ("engine/nix.py", "build", "  Nix.build (one nix-build: evaluate and build)"),
    ("engine/nix.py", "instantiate", "  Nix.instantiate (nix-instantiate)"),
    ("engine/nix.py", "realise", "  Nix.realise (nix-store --realise)"),
    ("engine/cache.py", "record", "  Index.record (roots + sqlite writes)"),
    ("engine/cache.py", "add_root", "    Index.add_root"),
    ("engine/progress.py", "__call__", "  Progress reporter calls"),
    ("json/__init__.py", "dumps", "json.dumps"),
    ("json/__init__.py", "loads", "json.loads"),
    ("pydantic/main.py", "__init__", "pydantic BaseModel.__init__"),
    ("pydantic/main.py", "model_construct", "pydantic model_construct"),
    ("genericpath.py", "exists", "os.path.exists"),
]


def importtime(cmd: list[str], cwd: Path, top: int) -> str:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *cmd], cwd=cwd, capture_output=True, text=True, env=ENV
    )
    rows: list[tuple[int, str]] = []
    for line in proc.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
        if m and len(m.group(3)) == 1:  # top-level imports only
            rows.append((int(m.group(2)), m.group(4)))
    total = sum(us for us, _ in rows)
    rows.sort(reverse=True)
    out = [f"  all top-level imports: {total / 1000:.0f} ms"]
    out += [f"  {us / 1000:7.1f} ms  {name}" for us, name in rows[:top]]
    return "\n".join(out)


def phases(proj: Project, state: Path, jobs: int) -> str:
    """The steps of `trace run` (as engine/cli/run.py does them), timed without a profiler."""
    marks: list[tuple[str, float]] = []
    t = time.perf_counter()

    def mark(label: str) -> None:
        nonlocal t
        now = time.perf_counter()
        marks.append((label, now - t))
        t = now

    from engine.cache import Index
    from engine.graph import load_graph
    from engine.hashing import StatCache
    from engine.run import plan, run_graph

    mark("imports (engine.cache/graph/hashing/run), if not yet imported")
    hasher = StatCache.read_only(state / "state.db")  # as `trace run` does (engine/cli/run.py)
    mark("StatCache.read_only")
    graph = load_graph(proj.graph, root=proj.root, hasher=hasher)
    mark("load_graph")
    with Index(state) as index:
        mark("Index(state)")
        hasher.flush(index.writable())
        plan(graph, index)
        mark("plan (alone; run_graph plans again)")
        result = run_graph(graph, index, jobs=jobs)
        mark("run_graph (plan + build + record)")
    mark("Index close")
    lines = [f"  {dt * 1000:8.1f} ms  {label}" for label, dt in marks]
    counts = {s: result.count(s) for s in ("built", "cached")}
    return "\n".join(lines) + f"\n  (result: {counts})"


def cprofile(argv: list[str], top: int) -> str:
    import engine.cli

    prof = cProfile.Profile()
    rc = prof.runcall(engine.cli.main, argv)
    if rc != 0:
        raise RuntimeError(f"trace {' '.join(argv)} exited {rc}")
    stats = pstats.Stats(prof)
    raw = stats.stats  # type: ignore[attr-defined]
    found: dict[str, tuple[int, float, float]] = {}
    for (file, _, func), (_, ncalls, tt, ct, _) in raw.items():
        for suffix, name, label in FOCUS:
            if func == name and file.endswith(suffix):
                old = found.get(label, (0, 0.0, 0.0))
                found[label] = (old[0] + ncalls, old[1] + tt, old[2] + ct)
    out = ["  cumulative (profiled, so inflated):"]
    for _, _, label in FOCUS:
        if label in found:
            n, _, ct = found[label]
            out.append(f"  {ct * 1000:8.1f} ms  {n:>7} calls  {label}")
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(top)
    body = buf.getvalue()
    body = body[body.find("   ncalls") :]
    out.append("  top by own time:")
    out += ["  " + ln for ln in body.rstrip().splitlines()]
    return "\n".join(out)


def report(
    title: str, proj: Project, state: Path, jobs: int, top: int, prepare: Callable[[], None]
) -> None:
    print(f"\n===== {title} =====")
    prepare()
    base = min(timed([sys.executable, "-c", "pass"], proj.root).seconds for _ in range(3))
    dt, counts = trace_run(proj, state, jobs)
    print(f"trace run --quiet subprocess: {dt * 1000:.0f} ms {counts}")
    print(f"bare `python -c pass`: {base * 1000:.0f} ms")
    prepare()
    args = trace_cmd(proj, state, jobs, "--quiet")
    print("-X importtime of that CLI call (top-level imports, cumulative):")
    print(importtime(args, proj.root, top=12))
    prepare()
    print("phases in-process, no profiler:")
    print(phases(proj, state, jobs))
    prepare()
    print("cProfile of engine.cli.main:")
    print(cprofile(args[1:], top))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--cold-n", type=int, default=100)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    nonce = uuid.uuid4().hex[:10]
    with tempfile.TemporaryDirectory(prefix="trace-profile-") as tmp:
        proj = Project(Path(tmp) / "proj", args.n, NOOP_SALT)
        proj.write()
        state = Path(tmp) / "state"
        cold_state = Path(tmp) / "cold-state"
        try:
            trace_run(proj, state, args.jobs)  # initial build (outputs may already exist)
            report("no-op", proj, state, args.jobs, args.top, lambda: None)
            sink = proj.sinks()[0]
            edits = iter(range(100))

            def change() -> None:
                proj.notes = {sink: f"profile-{nonce}-{next(edits)}"}
                proj.write()

            report(f"leaf change ({sink})", proj, state, args.jobs, args.top, change)

            cold = Project(Path(tmp) / "cold", args.cold_n, "")
            salts = iter(range(100))

            def resalt() -> None:
                cold.salt = f"profile-cold-{nonce}-{next(salts)}"
                cold.write()

            report(f"cold build N={args.cold_n}", cold, cold_state, args.jobs, args.top, resalt)
        finally:
            drop_gcroots(state)
            drop_gcroots(cold_state)
    print(f"\n(trace = {TRACE})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
