"""`trace plan GRAPH`: every step's key and whether (and why) it would build."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from engine.cache import nothing_written_on_bad_input
from engine.cli.args import (
    add_state_args,
    load_graph_of,
    root,
    state_dir,
)


def register(sub: Any) -> None:
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


def cmd_plan(args: argparse.Namespace) -> int:
    from engine import loadcache
    from engine.cache import Index, IndexView
    from engine.evaluation import evaluate, render_expression
    from engine.hashing import StatCache
    from engine.plan import known_drvs, plan

    state = state_dir(args)
    hasher = StatCache.read_only(state / "state.db")
    cache_key = loadcache.name(args.graph, root(args), None, None)
    hit = loadcache.lookup_entry(state, root(args), cache_key, hasher)
    graph, known_keys = (hit.graph, hit.keys) if hit else (load_graph_of(args, hasher), None)
    # Planned and evaluated on a read-only view: a graph that does not render or evaluate is
    # bad input, refused (exit 2) before the index is opened, with nothing written.
    with IndexView.open(state) as view:
        p, cached = plan(graph, view, known_keys)
    # clean upstream steps: imported, not rendered again
    known = known_drvs(p, cached) if p.dirty else {}
    if p.dirty and args.no_eval:  # a template that does not render is bad input
        render_expression(graph, p, p.dirty, known)
    elif p.dirty:  # ... and so is a graph that does not evaluate
        from engine.nix import Nix

        evaluate(graph, p, p.dirty, Nix(graph.nix), state, None, known)
    with nothing_written_on_bad_input(state), Index(state, wait=args.wait) as index:
        hasher.flush(index.writable())
        if hit is None or hit.split is not None:  # loaded, or an edited step brought up to date
            keys = {s: sp.key for s, sp in p.steps.items()}
            split = None if hit is None else hit.split
            trees = None if hit is None or hit.graph is not graph else hit.trees
            loadcache.store(index.writable(), state, cache_key, graph, keys, split, trees)
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
