"""The gates' cold cost on the fixture fork, side by side in one run (issues 10, 25, 26).

For one candidate of tests/fixtures/fork (default: the C fix cparse-key-overflow), each
repetition salts a copy of the fork (a comment appended to the package's source, new every
time), so every derivation is new, and times three cold runs of the real verify graph:

* `base`: only the two package builds and the reproducer runs (pre-fix, post-fix,
  pre-fix-run@K, post-fix-run@K; post-fix with its --check rebuild): what any verification
  must pay;
* `no-fuzz`: the whole verify graph without the fuzzing gate's steps (expectation, scope,
  fault-site, detector, differential, mutation, coverage, variants, regression), another salt;
  `fuzz-plan` (the fuzzing build and its exploration) is in it: the mutation gate needs it;
* `whole`: the whole verify graph, the fuzzing gate included, another salt.

Two goals, each printed as `met` or `NO`: issue 25's `no-fuzz <= 3 x base` and issue 26's
`whole <= 4 x base`. `ratio` = median(row) / median(base); `per repetition` are the ratios of
runs made back to back. CPU seconds (this process and its reaped Nix processes) are less
sensitive to other load on the machine than wall time: their ratios are printed too, with the
load average at the start and the end. Each row also gives the derivations Nix built (package
builds, wrappers and test suites inside steps included), which is what each sandbox costs.
The order of the rows rotates between repetitions; medians are reported.

`--phases` then times one more salted fork phase by phase (each phase's steps added to the
ones before on one state dir): where the time goes. `--derivations` builds the whole row once
more on a salted fork, then rebuilds every derivation Nix built with `nix-store --realise
--check` (one at a time, trace's Nix options) and prints each one's CPU seconds (the Nix process
and its builder, from rusage; a `--check` also pays a Nix process start, printed
below): what each sandbox and what runs in it costs. `--repeat 0` skips the rows.

    .venv/bin/python bench/gates_cost.py [--candidate cparse-key-overflow] [--repeat 3] [--phases]
    .venv/bin/python bench/gates_cost.py --repeat 0 --derivations
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from engine.candidate import load_candidate  # noqa: E402
from engine.graph import load_graph, needed_by  # noqa: E402
from engine.graphtypes import Graph  # noqa: E402
from engine.run import run_graph  # noqa: E402
from engine.verify.fork_graph import verify_context  # noqa: E402

BASE_STEPS = ("pre-fix", "post-fix", "pre-fix-run", "post-fix-run")
GOAL = 3.0  # issues 10 and 25: the whole verify without fuzzing, cold, <= 3x the base
FUZZ_GOAL = 4.0  # issue 26: ... with the fuzzing gate at its default budget, <= 4x the base
FUZZ_STEPS = ("fuzz-plan", "fuzz-post", "fuzz-pre", "gate-fuzz")
# the rows of one repetition, what each runs, and the goal of its ratio to the base
ROWS: tuple[tuple[str, str, float | None, str], ...] = (
    ("base", "2 builds + reproducer runs", None, ""),
    ("no-fuzz", "every gate but fuzzing", GOAL, "issue 25"),
    ("whole", "every gate, fuzzing too", FUZZ_GOAL, "issue 26"),
)


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
    return needed_by(graph, BASE_STEPS)


def without_fuzzing(graph: Graph) -> Graph:
    """Every step but the fuzzing gate's own (fuzz-post, fuzz-pre, gate-fuzz). `fuzz-plan` (the
    fuzzing build and the exploration) stays: the mutation gate's `mutant-runs` needs it (a
    survivor replays its corpus, issue 26), so this row pays it."""
    return needed_by(graph, tuple({graph.steps[s].base_id for s in graph.order} - set(FUZZ_STEPS)))


def row_graph(graph: Graph, row: str) -> Graph:
    if row == "base":
        return base_only(graph)
    return without_fuzzing(graph) if row == "no-fuzz" else graph


# Every derivation Nix reports building (`building '...drv'`), whichever call built it: the
# package builds, wrappers and suites inside steps too (a local --check prints no such line).
BUILT_DRVS: set[str] = set()
SHARES: Counter[str] = Counter()  # steps per kind of the whole graph


def count_builds() -> None:
    """Make every Nix call of this process add what it built to BUILT_DRVS."""
    from engine import nix

    follow = nix.Nix._follow

    def counted(self: nix.Nix, *args: Any) -> nix.RealiseReport:
        rep = follow(self, *args)
        BUILT_DRVS.update(rep.built)
        return rep

    nix.Nix._follow = counted  # type: ignore[method-assign]


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# The phase split: each phase adds its steps to the ones before, built on the same state dir,
# so each phase's time is what its own derivations cost (cold: the fork is salted).
PHASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base (2 builds + reproducer runs)", BASE_STEPS),
    ("expectation, scope, fault-site", ("expectation", "gate-scope", "gate-fault-site")),
    ("variants (plan, 1 run step/side, gate)", ("variant-plan", "variant-post", "variant-pre")),
    ("", ("gate-variants",)),
    (  # mutant-run: a step per mutant, before issue 25's mutant-runs (the bench runs on both)
        "mutation (mutant builds, their runs, gate)",
        ("patched-source", "mutant-runs", "mutant-run", "gate-mutation"),
    ),
    ("coverage (build + run, gate)", ("coverage-run", "gate-coverage")),
    (
        "regression (test builds; the base tests' reuses post's when no test is touched)",
        ("tests-pre", "tests-post", "tests-post-base", "gate-regression"),
    ),
    ("fuzzing (coverage build, exploration, 1 run step/side, gate)", FUZZ_STEPS),
)


PhaseRow = tuple[str, float, int, int]  # name, wall seconds, steps built, derivations built


def phase_split(work: Path, candidate: str, package: str) -> list[PhaseRow]:
    fork = salted_fork(work, package)
    graph = graph_for(fork, candidate)
    state = work / f"state-{uuid.uuid4().hex[:8]}"
    rows: list[PhaseRow] = []
    bases: tuple[str, ...] = ()
    for name, more in PHASES:
        bases += more
        took, n, _, drvs = timed(needed_by(graph, bases), state)
        if name:
            rows.append((name, took, n, drvs))
        else:  # folded into the phase before (a gate step of it)
            last = rows[-1]
            rows[-1] = (last[0], last[1] + took, last[2] + n, last[3] + drvs)
    rest = tuple(s for s in {graph.steps[s].base_id for s in graph.order} if s not in bases)
    if rest:
        took, n, _, drvs = timed(graph, state)
        rows.append((f"other ({', '.join(sorted(rest))})", took, n, drvs))
    return rows


def cpu_seconds() -> float:
    """CPU seconds so far of this process and its reaped children (the Nix processes)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def timed(graph: Graph, state: Path) -> tuple[float, int, float, int]:
    """(wall seconds, steps built, CPU seconds, derivations built) of one run_graph."""
    BUILT_DRVS.clear()
    start, cpu = time.monotonic(), cpu_seconds()
    result = run_graph(graph, state)
    took, cpu = time.monotonic() - start, cpu_seconds() - cpu
    bad = {s: r.status for s, r in result.steps.items() if r.status in ("failed", "skipped")}
    if bad:
        raise SystemExit(f"steps failed: {bad}")
    return took, result.count("built"), cpu, len(BUILT_DRVS)


def package_of(candidate: str) -> str:
    """The fixture package directory a candidate patches (its source is what a salt changes):
    `pkgs.<package>`, or the directory of a variant of it (`cparse-structured`: pkgs/cparse)."""
    fork = REPO / "tests" / "fixtures" / "fork"
    name = load_candidate(fork / "trace" / "candidates" / candidate / "candidate.toml").spec.package
    while not (fork / "pkgs" / name).is_dir() and "-" in name:
        name = name.rsplit("-", 1)[0]
    return name


def measure(args: argparse.Namespace, package: str) -> dict[str, list[tuple[float, ...]]]:
    """Every repetition's (wall, CPU, steps built, derivations built) per row, the rows in an
    order that rotates between repetitions."""
    samples: dict[str, list[tuple[float, ...]]] = {r[0]: [] for r in ROWS if r[0] in args.rows}
    SHARES.clear()
    with tempfile.TemporaryDirectory(prefix="trace-gates-bench-") as tmp:
        work = Path(tmp)
        for rep in range(args.repeat):
            names = list(samples)
            order = names[rep % len(names) :] + names[: rep % len(names)]
            if rep % 2:
                order.reverse()
            for what in order:
                graph = row_graph(graph_for(salted_fork(work, package), args.candidate), what)
                if what == "whole" or (what == "no-fuzz" and not SHARES):
                    SHARES.clear()
                    SHARES.update(s.split("@")[0] for s in graph.order)
                took, n, cpu, drvs = timed(graph, work / f"state-{uuid.uuid4().hex[:8]}")
                samples[what].append((took, cpu, n, drvs))
                print(
                    f"rep {rep + 1} {what:7s} {took:7.2f} s  cpu {cpu:6.2f} s  {n} steps, "
                    f"{drvs} derivations built  (load {load()})",
                    flush=True,
                )
    return samples


def summary(samples: dict[str, list[tuple[float, ...]]]) -> None:
    med = {k: [statistics.median(x[i] for x in v) for i in range(4)] for k, v in samples.items()}
    for name, what, _, _ in ROWS:
        if name not in med:
            continue
        wall, cpu, n, drvs = med[name]
        print(
            f"  {name:7s} {'(' + what + ')':29s} {wall:7.2f} s  cpu {cpu:6.2f} s  {n:3.0f} steps  "
            f"{drvs:3.0f} derivations"
        )
    base = samples["base"]
    for name, _, goal, issue in ROWS:
        if goal is None or name not in samples:
            continue
        rows = samples[name]
        ratio, cpu_ratio = med[name][0] / med["base"][0], med[name][1] / med["base"][1]
        pairs = [r[0] / b[0] for r, b in zip(rows, base, strict=True)]
        print(
            f"  goal {name} <= {goal:g} x base ({issue}): ratio {ratio:.2f}  "
            f"per repetition {' '.join(f'{r:.2f}' for r in pairs)} "
            f"(median {statistics.median(pairs):.2f})  cpu ratio {cpu_ratio:.2f}  "
            f"{'met' if ratio <= goal else 'NO'}"
        )


def child_cpu() -> float:
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return kids.ru_utime + kids.ru_stime


def check_cpu(drv: str, options: list[str]) -> float:
    """CPU seconds of `nix-store --realise --check` of one derivation (its inputs all valid)."""
    import subprocess

    before = child_cpu()
    cmd = ["nix-store", "--realise", "--check", "--max-jobs", "1", *options, drv]
    subprocess.run(cmd, capture_output=True, check=False)
    return child_cpu() - before


def derivation_split(work: Path, candidate: str, package: str) -> None:
    """Every derivation the whole row builds, each rebuilt alone: its CPU seconds."""
    from engine.nix import Nix

    graph = graph_for(salted_fork(work, package), candidate)
    took, _, cpu, drvs = timed(graph, work / f"state-{uuid.uuid4().hex[:8]}")
    print(f"\nderivations of the whole row (built: {took:.2f} s, cpu {cpu:.2f} s, {drvs} built)")
    options = Nix(graph.nix, 1).option_args()
    rows = sorted(((check_cpu(d, options), d) for d in sorted(BUILT_DRVS)), reverse=True)
    for cpu_s, drv in rows:
        print(f"  cpu {cpu_s:5.2f} s  {os.path.basename(drv)[33:]}")
    noop = _noop_cpu(rows[-1][1])
    total = sum(r[0] for r in rows)
    print(f"  sum {total:.2f} s; a nix-store that builds nothing: {noop:.3f} s (load {load()})")


def _noop_cpu(drv: str) -> float:
    """A Nix process that finds the output valid: what each --check above paid to start."""
    import subprocess

    before = child_cpu()
    subprocess.run(["nix-store", "--realise", drv], capture_output=True, check=False)
    return child_cpu() - before


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--candidate", default="cparse-key-overflow")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--phases", action="store_true", help="then one more salted fork, phase by phase"
    )
    ap.add_argument(
        "--rows",
        type=lambda v: v.split(","),
        default=[r[0] for r in ROWS],
        help="which rows to run, comma-separated (base always): base,no-fuzz,whole",
    )
    ap.add_argument(
        "--derivations",
        action="store_true",
        help="then the whole row once more, each derivation's CPU (rebuilt alone with --check)",
    )
    args = ap.parse_args(argv)
    args.rows = ["base", *[r for r in args.rows if r != "base"]]
    package = package_of(args.candidate)
    count_builds()
    if args.repeat < 1:
        return derivations(args, package)
    start = load()
    samples = measure(args, package)
    print(
        f"\ncandidate {args.candidate}, medians of {args.repeat}, cold (salted source); load "
        f"average (1, 5, 15 min) at start {start}, at end {load()}:"
    )
    summary(samples)
    print("  (cpu: this process and its Nix processes, less sensitive to load than wall time)")
    print(
        "  steps per kind (whole, else no-fuzz): "
        + ", ".join(f"{k} {v}" for k, v in sorted(SHARES.items()))
    )
    if args.phases:
        with tempfile.TemporaryDirectory(prefix="trace-gates-bench-") as tmp:
            rows = phase_split(Path(tmp), args.candidate, package)
        total = sum(r[1] for r in rows)
        print("\nphase split (one more salted fork, each phase on top of the ones before):")
        for name, took, n, drvs in rows:
            print(
                f"  {name:42s} {took:7.2f} s  {100 * took / total:4.0f} %  {n} steps, "
                f"{drvs} derivations"
            )
        print(f"  {'sum':42s} {total:7.2f} s  (load {load()})")
    return derivations(args, package)


def derivations(args: argparse.Namespace, package: str) -> int:
    if args.derivations:
        with tempfile.TemporaryDirectory(prefix="trace-gates-bench-") as tmp:
            derivation_split(Path(tmp), args.candidate, package)
    return 0


if __name__ == "__main__":
    sys.exit(main())
