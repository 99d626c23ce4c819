"""`trace run GRAPH`: build a graph; unchanged steps are answered from the cache."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from engine.cache import nothing_written_on_bad_input
from engine.cli.args import (
    add_otel_arg,
    add_rebuild_args,
    add_state_args,
    load_graph_of,
    otel_clock,
    otel_export,
    positive_int,
    rebuild_lines,
    root,
    state_dir,
)


def register(sub: Any) -> None:
    p = sub.add_parser("run", help="build a graph; unchanged steps are answered from the cache")
    p.add_argument("graph", type=Path, help="pipeline TOML file")
    add_state_args(p)
    p.add_argument(
        "-j", "--jobs", type=positive_int, default=None, help="parallel builds (nix -j), >= 1"
    )
    add_rebuild_args(p)
    p.add_argument("--json", action="store_true", help="print the run result as JSON")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress display")
    p.add_argument(
        "--full",
        action="store_true",
        help="skip the stat-only no-op check and the load cache: load, hash and plan the whole "
        "graph",
    )
    p.add_argument(
        "--timings",
        action="store_true",
        help="print seconds per phase (load, plan, render, instantiate, realise, collect, "
        "record) to stderr",
    )
    add_otel_arg(p)
    p.set_defaults(handler=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    import time

    from engine import fastpath, loadcache
    from engine.cache import Index
    from engine.evaluation import drop_expression, evaluate_before_state
    from engine.hashing import StatCache
    from engine.progress import Progress
    from engine.rebuilds import rebuild_steps
    from engine.run import run_graph

    # Files modified from (about) now on are never stamped for the fast path: the coarse file
    # system clock may lag the wall clock, hence the margin.
    since_ns = time.time_ns() - 1_000_000_000
    clock = otel_clock(args)
    state = state_dir(args)
    # Load and validate first: bad input exits 2 having written nothing, not even a state dir.
    hasher = StatCache.read_only(state / "state.db")
    started = time.perf_counter()
    cache_key = loadcache.name(args.graph, root(args), None, None)
    hit = None if args.full else loadcache.lookup_entry(state, root(args), cache_key, hasher)
    graph, known_keys = (hit.graph, hit.keys) if hit else (load_graph_of(args, hasher), None)
    loaded = time.perf_counter() - started
    rebuild = rebuild_steps(graph, args.rebuild, args.rebuild_all)  # unknown: exit 2, no work
    # The fast path's stamp is taken now, before the build: what the keys were computed from.
    try:
        before: list[fastpath.Entry] | None = fastpath.stamp(graph.reads)
    except OSError:
        before = None
    # a first run builds from this evaluation (run_graph `evaluated`), not evaluating twice
    pre = evaluate_before_state(graph, state, reuse=True)
    try:
        with nothing_written_on_bad_input(state), Index(state, wait=args.wait) as index:
            with Progress(enabled=not args.quiet and not args.json) as progress:
                reporter = progress if clock is None else clock.wrapping(progress)
                result = run_graph(
                    graph,
                    index,
                    jobs=args.jobs,
                    reporter=reporter,
                    known_keys=known_keys,
                    rebuild=rebuild,
                    evaluated=pre,
                )
            _remember(args, index, hasher, graph, hit, cache_key, result, rebuild, since_ns, before)
    finally:
        if pre is not None:  # kept in STATE/build when built from
            drop_expression(pre.evaluated.file)
    otel_export(args, clock, result, f"trace run {args.graph}")
    if args.timings:
        laps = {"load": loaded, **result.timings}
        print("timings: " + ", ".join(f"{k} {v:.3f} s" for k, v in laps.items()), file=sys.stderr)
    _print_result(args, result)
    for line in rebuild_lines(result):  # also under --json: stdout is the JSON
        print(line, file=sys.stderr)
    return 0 if result.ok and not result.rebuilt_differently else 1


def _remember(
    args: argparse.Namespace,
    index: Any,
    hasher: Any,
    graph: Any,
    hit: Any,
    cache_key: str,
    result: Any,
    rebuild: list[str],
    since_ns: int,
    before: Any,
) -> None:
    """After the run, under the lock: the stat cache, the load cache entry (a full load, or an
    edited step brought up to date) and the no-op fast path's stamp (or its removal)."""
    from engine import fastpath, loadcache

    state = index.state_dir
    db = index.writable()  # the graph evaluated: no longer bad input
    hasher.flush(db)
    if hit is None or hit.split is not None:  # loaded, or an edited step brought up to date
        keys = {sid: r.key for sid, r in result.steps.items()}
        split = None if hit is None else hit.split
        trees = None if hit is None or hit.graph is not graph else hit.trees
        loadcache.store(db, state, cache_key, graph, keys, split, trees)
    key = fastpath.name(args.graph, root(args))
    if result.ok and not rebuild:  # a --rebuild's findings are this run's, never stamped
        outs = {sid: r.out for sid, r in result.steps.items() if r.out}
        fastpath.record(
            db,
            key,
            graph.reads,
            outs,
            since_ns,
            before=before,
            warnings=warnings(result),
            sandbox=(graph.nix.extra_sandbox_paths, graph.nix.sandbox_identity),
        )
    else:
        fastpath.forget(db, key)


def _print_result(args: argparse.Namespace, result: Any) -> None:
    """The run's result: JSON, or the counts, the failed and skipped steps and the warnings."""
    if args.json:
        print(result.to_json(indent=2))
    else:
        counts = ", ".join(
            f"{result.count(s)} {s}"
            for s in ("built", "substituted", "reused", "cached", "failed", "skipped")
            if result.count(s)
        )
        print(f"{len(result.steps)} steps: {counts or 'nothing to do'}")
        for r in result.steps.values():
            if r.status == "failed":
                print(f"\nFAILED {r.id}  ({r.drv})", file=sys.stderr)
                if r.log_tail:
                    print("  " + r.log_tail.replace("\n", "\n  "), file=sys.stderr)
            elif r.status == "skipped":
                why = (r.log_tail or "a step it needs failed").removeprefix("skipped: ")
                print(f"skipped {r.id}: {why}", file=sys.stderr)
        for line in warnings(result):
            print(line, file=sys.stderr)


def warnings(result: Any) -> list[str]:
    """Lines every run of this result prints, cached or not (the fast path prints them again)."""
    return [
        f"NONDETERMINISTIC {r.id}: a --check rebuild differed"
        for r in result.steps.values()
        if r.deterministic is False and getattr(r, "rebuilt", None) is None
    ]
