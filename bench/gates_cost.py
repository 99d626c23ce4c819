"""The gates' cold cost on the fixture fork, side by side in one run (issue 10).

For one candidate of tests/fixtures/fork (default: the C fix cparse-key-overflow), each
repetition salts a copy of the fork (a comment appended to the package's source, new every
time), so every derivation is new, and times two cold runs of the real verify graph:

* `base`: only the two package builds and the reproducer runs (pre-fix, post-fix,
  pre-fix-run@K, post-fix-run@K): what any verification must pay;
* `whole`: the whole verify graph (expectation, scope, mutation, coverage, variants,
  regression), with another salt.

`ratio` = whole / base; the goal (whole <= 3 x base) is printed as `met` or `NO`. Each
gate's share is given as the number of derivations it adds. The order of the two alternates
between repetitions; medians are reported.

    .venv/bin/python bench/gates_cost.py [--candidate cparse-key-overflow] [--repeat 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engine.candidate import load_candidate  # noqa: E402
from engine.graph import load_graph  # noqa: E402
from engine.model import Graph  # noqa: E402
from engine.run import run_graph  # noqa: E402
from engine.verify.command import verify_context  # noqa: E402

BASE_STEPS = ("pre-fix", "post-fix", "pre-fix-run", "post-fix-run")
GOAL = 3.0  # issue 10: the whole verify of one C candidate, cold, <= 3x the base


def salted_fork(work: Path, package: str) -> Path:
    fork = work / f"fork-{uuid.uuid4().hex[:8]}"
    shutil.copytree(REPO / "tests" / "fixtures" / "fork", fork)
    src = fork / "pkgs" / package / "src"
    first = sorted(p for p in src.rglob("*") if p.is_file() and p.suffix in (".c", ".py", ".sh"))
    with first[0].open("a") as fh:
        comment = "#" if first[0].suffix in (".py", ".sh") else "//"
        fh.write(f"\n{comment} bench salt {uuid.uuid4().hex}\n")
    return fork


def graph_for(fork: Path, candidate: str) -> Graph:
    cand = load_candidate(fork / "trace" / "candidates" / candidate / "candidate.toml")
    return load_graph(fork / "trace.toml", root=fork, context=verify_context(cand, fork))


def base_only(graph: Graph) -> Graph:
    keep = [s for s in graph.order if s.split("@")[0] in BASE_STEPS]
    steps = {s: graph.steps[s] for s in keep}
    return graph.model_copy(update={"steps": steps, "order": tuple(keep)})


def timed(graph: Graph, state: Path) -> tuple[float, int]:
    start = time.monotonic()
    result = run_graph(graph, state)
    took = time.monotonic() - start
    bad = {s: r.status for s, r in result.steps.items() if r.status in ("failed", "skipped")}
    if bad:
        raise SystemExit(f"steps failed: {bad}")
    return took, result.count("built")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--candidate", default="cparse-key-overflow")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    times: dict[str, list[float]] = {"base": [], "whole": []}
    built: dict[str, int] = {}
    shares: Counter[str] = Counter()
    with tempfile.TemporaryDirectory(prefix="trace-gates-bench-") as tmp:
        work = Path(tmp)
        for rep in range(args.repeat):
            order = ("base", "whole") if rep % 2 == 0 else ("whole", "base")
            for what in order:
                fork = salted_fork(work, "cparse" if "cparse" in args.candidate else "pager")
                graph = graph_for(fork, args.candidate)
                if what == "base":
                    graph = base_only(graph)
                else:
                    shares = Counter(s.split("@")[0] for s in graph.order)
                took, n = timed(graph, work / f"state-{uuid.uuid4().hex[:8]}")
                times[what].append(took)
                built[what] = n
                print(f"rep {rep + 1} {what:5s} {took:7.2f} s  {n} steps built", flush=True)
    base, whole = statistics.median(times["base"]), statistics.median(times["whole"])
    print(f"\ncandidate {args.candidate}, medians of {args.repeat}, cold (salted source):")
    print(f"  base  (2 builds + reproducer runs) {base:7.2f} s  {built['base']} steps")
    print(f"  whole (every gate)                 {whole:7.2f} s  {built['whole']} steps")
    ratio = whole / base
    print(f"  ratio whole / base                 {ratio:7.2f}")
    print(f"  goal  whole <= {GOAL:g} x base            {'met' if ratio <= GOAL else 'NO'}")
    print("  steps per kind: " + ", ".join(f"{k} {v}" for k, v in sorted(shares.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
