"""`trace watch GRAPH`: build, then rebuild what an edit made dirty, until Ctrl-C (the library:
engine/watch.py)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from engine.cli.args import add_state_args, load_graph_of, positive_int, root, state_dir


def register(sub: Any) -> None:
    p = sub.add_parser(
        "watch",
        help="build a graph, then rebuild what each edit makes dirty, until Ctrl-C",
        description="Every round prints what changed and each step rebuilt with why. Exit 0 "
        "when stopped with Ctrl-C (SIGINT), 2 on bad input in the first round.",
    )
    p.add_argument("graph", type=Path, help="pipeline TOML file")
    add_state_args(p)
    p.add_argument(
        "-j", "--jobs", type=positive_int, default=None, help="parallel builds (nix -j), >= 1"
    )
    p.add_argument(
        "--interval", type=float, default=0.2, metavar="SECONDS", help="how often to look"
    )
    p.add_argument("--rounds", type=positive_int, default=None, help=argparse.SUPPRESS)
    p.set_defaults(handler=cmd_watch)


def _load_and_run(args: argparse.Namespace) -> Callable[[Callable[[Any], None]], Any]:
    from engine import loadcache
    from engine.cache import Index, nothing_written_on_bad_input
    from engine.errors import TraceError
    from engine.hashing import StatCache
    from engine.run import run_graph

    state = state_dir(args)
    first = [True]

    def once(loaded: Callable[[Sequence[tuple[Path, Sequence[str]]]], None]) -> Any:
        hasher = StatCache.read_only(state / "state.db")
        key = loadcache.name(args.graph, root(args), None, None)
        try:
            hit = loadcache.lookup(state, root(args), key, hasher)
            graph, known = hit or (load_graph_of(args, hasher), None)
            loaded(graph.reads)
            with nothing_written_on_bad_input(state), Index(state, wait=args.wait) as index:
                hasher.flush(index.db)
                result = run_graph(graph, index, jobs=args.jobs, known_keys=known)
                if known is None:
                    keys = {sid: r.key for sid, r in result.steps.items()}
                    loadcache.store(index.db, state, key, graph, keys)
        except TraceError as exc:
            if first[0]:
                raise
            print(f"trace: error: {exc.render()}", file=sys.stderr)
            return _Failed()
        first[0] = False
        return result

    return once


class _Failed:
    """A round whose load or run raised: nothing built, watching for the next edit."""

    ok = False
    steps: ClassVar[dict[str, Any]] = {}


def cmd_watch(args: argparse.Namespace) -> int:
    from engine.watch import Round, lines, watch

    def report(r: Round) -> None:
        print("\n".join(lines(r)), flush=True)

    from engine.cli import Terminated

    try:
        watch(_load_and_run(args), report, interval=args.interval, rounds=args.rounds)
    except Terminated:
        raise  # SIGTERM: exit 143 as every command
    except KeyboardInterrupt:  # Ctrl-C is how a watch ends: not an error
        print("trace watch: stopped", file=sys.stderr)
    return 0
