"""The gates' cold cost on the fixture fork, side by side in one run (issue 10).

For one candidate of tests/fixtures/fork (default: the C fix cparse-key-overflow), each
repetition salts a copy of the fork (a comment appended to the package's source, new every
time), so every derivation is new, and times two cold runs of the real verify graph:

* `base`: only the two package builds and the reproducer runs (pre-fix, post-fix,
  pre-fix-run@K, post-fix-run@K; post-fix with its --check rebuild): what any verification
  must pay;
* `whole`: the whole verify graph (expectation, scope, mutation, coverage, variants,
  regression), with another salt.

`ratio` = whole / base; the goal (whole <= 3 x base) is printed as `met` or `NO`. Each
gate's share is given as the number of derivations it adds. The order of the two alternates
between repetitions; medians are reported.

`--phases` then times one more salted fork phase by phase (each phase's steps added to the
ones before on one state dir): where the time goes.

    .venv/bin/python bench/gates_cost.py [--candidate cparse-key-overflow] [--repeat 3] [--phases]
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
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
from engine.graphtypes import Graph  # noqa: E402
from engine.run import run_graph  # noqa: E402
from engine.verify.fork_graph import verify_context  # noqa: E402

BASE_STEPS = ("pre-fix", "post-fix", "pre-fix-run", "post-fix-run")
GOAL = 3.0  # issue 10: the whole verify of one C candidate, cold, <= 3x the base
FUZZ_GOAL = 4.0  # issue 26: ... with the fuzzing gate at its default budget, <= 4x the base
FUZZ_STEPS = ("fuzz-plan", "fuzz-post", "fuzz-pre", "gate-fuzz")


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


def only(graph: Graph, bases: tuple[str, ...]) -> Graph:
    """The steps whose base id is in `bases`, with everything they need."""
    want = {s for s in graph.order if graph.steps[s].base_id in bases}
    todo = list(want)
    while todo:
        for need in graph.steps[todo.pop()].needs:
            if need not in want:
                want.add(need)
                todo.append(need)
    keep = [s for s in graph.order if s in want]
    steps = {s: graph.steps[s] for s in keep}
    return dataclasses.replace(graph, steps=steps, order=tuple(keep))


def base_only(graph: Graph) -> Graph:
    return only(graph, BASE_STEPS)


# The phase split: each phase adds its steps to the ones before, built on the same state dir,
# so each phase's time is what its own derivations cost (cold: the fork is salted).
PHASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base (2 builds + reproducer runs)", BASE_STEPS),
    ("expectation, scope, fault-site", ("expectation", "gate-scope", "gate-fault-site")),
    ("variants (plan, 1 run step/side, gate)", ("variant-plan", "variant-post", "variant-pre")),
    ("", ("gate-variants",)),
    ("mutation (mutant builds + runs, gate)", ("patched-source", "mutant-run", "gate-mutation")),
    ("coverage (build + run, gate)", ("coverage-run", "gate-coverage")),
    (
        "regression (test builds; the base tests' reuses post's when no test is touched)",
        ("tests-pre", "tests-post", "tests-post-base", "gate-regression"),
    ),
    ("fuzzing (coverage build, exploration, 1 run step/side, gate)", FUZZ_STEPS),
)


def phase_split(work: Path, candidate: str, package: str) -> list[tuple[str, float, int]]:
    fork = salted_fork(work, package)
    graph = graph_for(fork, candidate)
    state = work / f"state-{uuid.uuid4().hex[:8]}"
    rows: list[tuple[str, float, int]] = []
    bases: tuple[str, ...] = ()
    for name, more in PHASES:
        bases += more
        took, n, _ = timed(only(graph, bases), state)
        if name:
            rows.append((name, took, n))
        else:  # folded into the phase before (a gate step of it)
            last = rows[-1]
            rows[-1] = (last[0], last[1] + took, last[2] + n)
    rest = tuple(s for s in {graph.steps[s].base_id for s in graph.order} if s not in bases)
    if rest:
        took, n, _ = timed(graph, state)
        rows.append((f"other ({', '.join(sorted(rest))})", took, n))
    return rows


def cpu_seconds() -> float:
    """CPU seconds so far of this process and its reaped children (the Nix processes)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def timed(graph: Graph, state: Path) -> tuple[float, int, float]:
    """(wall seconds, steps built, CPU seconds) of one run_graph."""
    start, cpu = time.monotonic(), cpu_seconds()
    result = run_graph(graph, state)
    took, cpu = time.monotonic() - start, cpu_seconds() - cpu
    bad = {s: r.status for s, r in result.steps.items() if r.status in ("failed", "skipped")}
    if bad:
        raise SystemExit(f"steps failed: {bad}")
    return took, result.count("built"), cpu


def package_of(candidate: str) -> str:
    """The fixture package directory a candidate patches (its source is what a salt changes):
    `pkgs.<package>`, or the directory of a variant of it (`cparse-structured`: pkgs/cparse)."""
    fork = REPO / "tests" / "fixtures" / "fork"
    name = load_candidate(fork / "trace" / "candidates" / candidate / "candidate.toml").spec.package
    while not (fork / "pkgs" / name).is_dir() and "-" in name:
        name = name.rsplit("-", 1)[0]
    return name


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--candidate", default="cparse-key-overflow")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--phases", action="store_true", help="then one more salted fork, phase by phase"
    )
    args = ap.parse_args(argv)
    package = package_of(args.candidate)
    times: dict[str, list[float]] = {"base": [], "whole": []}
    cpus: dict[str, list[float]] = {"base": [], "whole": []}
    built: dict[str, int] = {}
    shares: Counter[str] = Counter()
    with tempfile.TemporaryDirectory(prefix="trace-gates-bench-") as tmp:
        work = Path(tmp)
        for rep in range(args.repeat):
            order = ("base", "whole") if rep % 2 == 0 else ("whole", "base")
            for what in order:
                fork = salted_fork(work, package)
                graph = graph_for(fork, args.candidate)
                if what == "base":
                    graph = base_only(graph)
                else:
                    shares = Counter(s.split("@")[0] for s in graph.order)
                took, n, cpu = timed(graph, work / f"state-{uuid.uuid4().hex[:8]}")
                times[what].append(took)
                cpus[what].append(cpu)
                built[what] = n
                print(
                    f"rep {rep + 1} {what:5s} {took:7.2f} s  {n} steps built  cpu {cpu:.2f} s",
                    flush=True,
                )
    base, whole = statistics.median(times["base"]), statistics.median(times["whole"])
    print(f"\ncandidate {args.candidate}, medians of {args.repeat}, cold (salted source):")
    print(f"  base  (2 builds + reproducer runs) {base:7.2f} s  {built['base']} steps")
    print(f"  whole (every gate)                 {whole:7.2f} s  {built['whole']} steps")
    ratio = whole / base
    pairs = [w / b for w, b in zip(times["whole"], times["base"], strict=True)]
    print(f"  ratio whole / base                 {ratio:7.2f}")
    print(
        f"  ratio per repetition               {' '.join(f'{r:.2f}' for r in pairs)}"
        f"  (median {statistics.median(pairs):.2f})"
    )
    print(f"  goal  whole <= {GOAL:g} x base            {'met' if ratio <= GOAL else 'NO'}")
    if any(k in shares for k in FUZZ_STEPS):  # issue 26: the whole includes the fuzzing gate
        met = "met" if ratio <= FUZZ_GOAL else "NO"
        print(f"  goal  whole (with fuzzing) <= {FUZZ_GOAL:g} x base  {met}")
    cb, cw = statistics.median(cpus["base"]), statistics.median(cpus["whole"])
    print(
        f"  cpu   base {cb:.2f} s, whole {cw:.2f} s, ratio {cw / cb:.2f}"
        "  (this process and its Nix processes, medians: less sensitive to load)"
    )
    print("  steps per kind: " + ", ".join(f"{k} {v}" for k, v in sorted(shares.items())))
    if args.phases:
        with tempfile.TemporaryDirectory(prefix="trace-gates-bench-") as tmp:
            rows = phase_split(Path(tmp), args.candidate, package)
        total = sum(t for _, t, _ in rows)
        print("\nphase split (one more salted fork, each phase on top of the ones before):")
        for name, took, n in rows:
            print(f"  {name:42s} {took:7.2f} s  {100 * took / total:4.0f} %  {n} steps")
        print(f"  {'sum':42s} {total:7.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
