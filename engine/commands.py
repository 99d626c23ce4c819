"""Engine subcommands: run, plan, graph, schema, gc."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.policy.registry import SCHEMAS as POLICY_SCHEMAS

if TYPE_CHECKING:
    from engine.hashing import StatCache
    from engine.model import Graph

# name -> "module:attribute" of a pydantic model whose JSON Schema `trace schema NAME` prints.
SCHEMAS: dict[str, str] = {
    "pipeline": "engine.spec:PipelineFile",
    "candidate": "engine.candidate:CandidateFile",
    "machine": "engine.remote.machinefile:MachineConfig",
    **POLICY_SCHEMAS,
    # model-drafted fixes (engine/roles, engine/models, engine/agent)
    "agent": "engine.roles.agentfile:AgentFileSpec",
    "eligibility": "engine.roles.eligibility:EligibilityFile",
    "transcript": "engine.models.transcript:Transcript",
    "draft": "engine.agent.record:DraftRecord",
    "accuracy": "engine.roles.compare:Comparison",
}


def add_state_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--root",
        type=Path,
        default=None,
        help="project root: inputs must stay inside it (default: current directory)",
    )
    p.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="cache index and GC roots (default: ROOT/.trace)",
    )
    p.add_argument(
        "--wait",
        type=float,
        default=0,
        metavar="SECONDS",
        help="wait this long for another trace using the state dir (default: fail)",
    )


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def register(sub: Any) -> None:
    p = sub.add_parser("run", help="build a graph; unchanged steps are answered from the cache")
    p.add_argument("graph", type=Path, help="pipeline TOML file")
    add_state_args(p)
    p.add_argument(
        "-j", "--jobs", type=positive_int, default=None, help="parallel builds (nix -j), >= 1"
    )
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
    p.set_defaults(handler=cmd_run)

    p = sub.add_parser("plan", help="show every step's key and whether (and why) it would build")
    p.add_argument("graph", type=Path)
    add_state_args(p)
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--no-eval",
        action="store_true",
        help="do not evaluate the dirty steps with nix-instantiate (by default plan does, so a "
        "graph that does not evaluate exits 2 with the step and template to blame)",
    )
    p.set_defaults(handler=cmd_plan)

    p = sub.add_parser(
        "graph", help="print the step graph as Graphviz dot, Mermaid, an SVG or an HTML page"
    )
    p.add_argument("graph", type=Path)
    p.add_argument("--root", type=Path, default=None)
    p.add_argument("--format", choices=["dot", "mermaid", "svg", "html"], default="dot")
    p.set_defaults(handler=cmd_graph)

    p = sub.add_parser("schema", help="print the JSON Schema of a file format")
    p.add_argument("name", nargs="?", default="pipeline", choices=sorted(SCHEMAS))
    p.set_defaults(handler=cmd_schema)

    p = sub.add_parser("gc", help="drop GC roots of results no graph references any more")
    add_state_args(p)
    p.add_argument(
        "--all",
        action="store_true",
        help="also collect every other state directory of this user that exists now",
    )
    p.add_argument(
        "--prune-missing",
        action="store_true",
        help="remove the GC-root folders of state directories that do not exist now (a deleted "
        "project; also one only unmounted now: its cached outputs become collectable)",
    )
    p.set_defaults(handler=cmd_gc)


def _root(args: argparse.Namespace) -> Path:
    return (args.root or Path.cwd()).resolve()


def _state_dir(args: argparse.Namespace) -> Path:
    return (args.state_dir or _root(args) / ".trace").resolve()


def _load(args: argparse.Namespace, hasher: StatCache) -> Graph:
    """The full load (engine/graph.py: TOML, validation, digests), when the load cache missed:
    imported only then, so a cache hit imports no pydantic (tests/test_hotpath.py)."""
    from engine.graph import load_graph

    return load_graph(args.graph, root=_root(args), hasher=hasher)


def cmd_run(args: argparse.Namespace) -> int:
    import time

    from engine import fastpath, loadcache
    from engine.cache import Index, nothing_written_on_bad_input
    from engine.hashing import StatCache
    from engine.progress import Progress
    from engine.run import run_graph

    # Files modified from (about) now on are never stamped for the fast path: the coarse file
    # system clock may lag the wall clock, hence the margin.
    since_ns = time.time_ns() - 1_000_000_000
    state = _state_dir(args)
    # Load and validate first: bad input exits 2 having written nothing, not even a state dir.
    hasher = StatCache.read_only(state / "state.db")
    started = time.perf_counter()
    cache_key = loadcache.name(args.graph, _root(args), None, None)
    hit = None if args.full else loadcache.lookup(state, _root(args), cache_key, hasher)
    graph, known_keys = hit or (_load(args, hasher), None)
    loaded = time.perf_counter() - started
    # The fast path's stamp is taken now, before the build: what the keys were computed from.
    try:
        before: list[fastpath.Entry] | None = fastpath.stamp(graph.reads)
    except OSError:
        before = None
    with nothing_written_on_bad_input(state), Index(state, wait=args.wait) as index:
        hasher.flush(index.db)
        with Progress(enabled=not args.quiet and not args.json) as progress:
            result = run_graph(
                graph, index, jobs=args.jobs, reporter=progress, known_keys=known_keys
            )
        if known_keys is None:
            keys = {sid: r.key for sid, r in result.steps.items()}
            loadcache.store(index.db, state, cache_key, graph, keys)
        key = fastpath.name(args.graph, _root(args))
        if result.ok:
            outs = {sid: r.out for sid, r in result.steps.items() if r.out}
            fastpath.record(
                index.db, key, graph.reads, outs, since_ns, before=before, warnings=warnings(result)
            )
        else:
            fastpath.forget(index.db, key)
    if args.timings:
        laps = {"load": loaded, **result.timings}
        print("timings: " + ", ".join(f"{k} {v:.3f} s" for k, v in laps.items()), file=sys.stderr)
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
    return 0 if result.ok else 1


def warnings(result: Any) -> list[str]:
    """Lines every run of this result prints, cached or not (the fast path prints them again)."""
    return [
        f"NONDETERMINISTIC {r.id}: a --check rebuild differed"
        for r in result.steps.values()
        if r.deterministic is False
    ]


def cmd_plan(args: argparse.Namespace) -> int:
    from engine import loadcache
    from engine.cache import Index, nothing_written_on_bad_input
    from engine.hashing import StatCache
    from engine.run import evaluate, known_drvs, plan, render_expression

    state = _state_dir(args)
    hasher = StatCache.read_only(state / "state.db")
    cache_key = loadcache.name(args.graph, _root(args), None, None)
    hit = loadcache.lookup(state, _root(args), cache_key, hasher)
    graph, known_keys = hit or (_load(args, hasher), None)
    with nothing_written_on_bad_input(state), Index(state, wait=args.wait) as index:
        hasher.flush(index.db)
        p, cached = plan(graph, index, known_keys)
        if known_keys is None:
            keys = {s: sp.key for s, sp in p.steps.items()}
            loadcache.store(index.db, state, cache_key, graph, keys)
        # clean upstream steps: imported, not rendered again
        known = known_drvs(p, cached) if p.dirty else {}
        if p.dirty and args.no_eval:  # a template that does not render is bad input
            render_expression(graph, p, p.dirty, known)
        elif p.dirty:  # ... and so is a graph that does not evaluate
            from engine.nix import Nix

            evaluate(graph, p, p.dirty, Nix(graph.nix), state, index, known)
    if args.json:
        print(
            json.dumps(
                {
                    "graph": p.graph,
                    "steps": [
                        {"id": s.id, "key": s.key, "dirty": s.dirty, "reasons": s.reasons}
                        for s in (p.steps[i] for i in p.order)
                    ],
                },
                indent=2,
            )
        )
        return 0
    width = max((len(s) for s in p.order), default=4)
    for sid in p.order:
        sp = p.steps[sid]
        status = "dirty" if sp.dirty else "clean"
        why = "; ".join(sp.reasons)
        print(f"{sid:<{width}}  {sp.key[:12]}  {status}" + (f"  {why}" if why else ""))
    n = len(p.dirty)
    print(f"{n} of {len(p.order)} steps would build")
    return 0


def cmd_graph(args: argparse.Namespace) -> int:
    import networkx as nx

    from engine.graph import load_graph

    graph = load_graph(args.graph, root=_root(args))
    if args.format in ("svg", "html"):
        from engine.report.graph import graph_picture

        print(graph_picture(graph, args.format))
        return 0
    g = nx.DiGraph()
    for sid, step in graph.steps.items():
        g.add_node(sid, kind=step.kind)
        g.add_edges_from((n, sid) for n in step.needs)
    ids = {sid: f"n{i}" for i, sid in enumerate(graph.order)}
    out: list[str] = []
    if args.format == "dot":
        out.append("digraph trace {\n  rankdir=LR;")
        for layer, nodes in enumerate(nx.topological_generations(g)):
            out.append(f"  {{ rank=same; // layer {layer}")
            for sid in sorted(nodes):
                label = json.dumps(f"{sid}\n({g.nodes[sid]['kind']})")  # JSON's \n = DOT's
                out.append(f"    {ids[sid]} [label={label}];")
            out.append("  }")
        out.extend(f"  {ids[a]} -> {ids[b]};" for a, b in sorted(g.edges))
        out.append("}")
    else:
        out.append("flowchart LR")
        for sid in graph.order:
            out.append(f'  {ids[sid]}["{sid} ({g.nodes[sid]["kind"]})"]')
        out.extend(f"  {ids[a]} --> {ids[b]}" for a, b in sorted(g.edges))
    print("\n".join(out))
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    import importlib

    module, attr = SCHEMAS[args.name].split(":")
    model = getattr(importlib.import_module(module), attr)
    print(json.dumps(model.model_json_schema(), indent=2))
    return 0


def _gc_one(index: Any) -> tuple[list[str], set[str], list[str], list[str], int]:
    forgotten, unsure = index.forget_graphs()
    keep = {row[0] for row in index.db.execute("SELECT key FROM last_keys")}
    dropped = index.gc(keep)
    pruned = index.prune_build_files(keep=0)
    return dropped, keep, forgotten, unsure, pruned


def cmd_gc(args: argparse.Namespace) -> int:
    from engine.cache import Index, remove_root_folder, root_folders
    from engine.errors import BusyError

    state = _state_dir(args)
    if not (state / "state.db").is_file():
        print(f"no state directory at {state}: nothing of its own to collect")
        index_folder = None
    else:
        with Index(state, wait=args.wait) as index:
            dropped, keep, forgotten, unsure, pruned = _gc_one(index)
            index_folder = index.gcroots
        print(f"dropped {len(dropped)} GC roots; kept {len(keep)}")
        if forgotten:
            print(f"forgot {len(forgotten)} graph(s) whose file is gone: {', '.join(forgotten)}")
        if unsure:
            print(
                f"kept {len(unsure)} graph(s) whose file cannot be checked from here: "
                + ", ".join(unsure)
            )
        if pruned:
            print(f"removed {pruned} generated Nix file(s) from {state / 'build'}")
    missing: list[Path] = []
    for rf in root_folders():
        if rf.folder == index_folder or rf.state_dir is None:
            continue
        if rf.seen is False:
            missing.append(rf.folder)
            if args.prune_missing:
                remove_root_folder(rf.folder)
        elif rf.seen and args.all:
            try:
                with Index(rf.state_dir, wait=0) as other:
                    dropped, keep, *_ = _gc_one(other)
                print(f"{rf.state_dir}: dropped {len(dropped)} GC roots; kept {len(keep)}")
            except BusyError:
                print(f"{rf.state_dir}: busy (another trace is using it); left alone")
    if missing and args.prune_missing:
        print(f"removed {len(missing)} root folder(s) of state directories that do not exist now")
    elif missing:
        print(
            f"kept {len(missing)} root folder(s) of state directories that cannot be seen now "
            "(deleted, or on a file system not mounted now):",
        )
        for folder in missing:
            print(f"  {folder}")
        print("  if they are gone for good: `trace gc --prune-missing` removes their roots")
    print("run `nix-collect-garbage` to free the store paths no root holds any more")
    return 0
