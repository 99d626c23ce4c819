"""`trace watch GRAPH`: build, then rebuild what an edit made dirty, until Ctrl-C (the library:
engine/watch.py)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from engine.cli.args import add_state_args, load_graph_of, positive_int, root, state_dir

Reads = Sequence[tuple[Path, Sequence[str]]]


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
        "--interval",
        type=float,
        default=0.2,
        metavar="SECONDS",
        help="how often to look without an inotify event (inotify wakes it at once)",
    )
    p.add_argument("--rounds", type=positive_int, default=None, help=argparse.SUPPRESS)
    p.set_defaults(handler=cmd_watch)


class _Rounds:
    """The rounds of one `trace watch`: a full plan the first time and whenever the resident
    graph (engine/resident.py) cannot take the change; otherwise the resident's update."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.state = state_dir(args)
        self.resident: Any = None  # engine.resident.Resident once a round succeeded
        # what makes the next resident from the last round, run once it was reported (`settle`)
        self.pending: Callable[[], Any] | None = None
        self.first = True
        self.keeper: Any = None  # an idle connection to the index (`_keep_open`)
        self.how = ""  # the last round's: 'resident' (from memory) or 'full plan'

    def __call__(self, loaded: Callable[[Reads], None], why: list[str]) -> Any:
        from engine.errors import TraceError
        from engine.hashing import StatCache

        hasher = StatCache.read_only(self.state / "state.db")
        try:
            nxt = self._update(why, hasher)
            self.how = "full plan" if nxt is None else "resident"
            result = self._full(loaded, hasher) if nxt is None else self._resident(nxt, loaded)
        except TraceError as exc:
            self.resident = self.pending = None
            if self.first:
                raise
            print(f"trace: error: {exc.render()}", file=sys.stderr)
            return _Failed()
        except BaseException:
            self.resident = self.pending = None
            raise
        self.first = False
        self._keep_open()
        return result

    def _keep_open(self) -> None:
        """Once the index exists: one idle connection to it, held until the watch ends (no
        transaction, no lock: other trace processes read and write as ever). A round's close
        of the index is then not the last connection's, which SQLite ends with a checkpoint of
        the WAL (two fsyncs) and deletes the WAL (recreated, with a directory fsync, next round):
        the WAL is checkpointed as SQLite's auto-checkpoint decides, as in any long-lived
        process. Commits are what they were (WAL, synchronous=NORMAL: engine/cache.py)."""
        import sqlite3

        db_path = self.state / "state.db"
        if self.keeper is not None or not db_path.is_file():
            return
        db = sqlite3.connect(db_path)
        db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()  # opens the WAL, ends
        self.keeper = db

    def settle(self) -> None:
        """The resident graph after the last round (its results taken in, or made from a full
        load): work left until the round was reported, so it is not between an edit and its
        result; done before the next round looks at the resident."""
        if self.pending is not None:
            make, self.pending = self.pending, None
            try:
                self.resident = make()
            except Exception:  # the next round is a full plan, which is always right
                self.resident = None

    def close(self) -> None:
        if self.keeper is not None:
            self.keeper.close()  # the last connection: checkpoints and removes the WAL
            self.keeper = None

    def _update(self, why: list[str], hasher: Any) -> Any:
        """The resident graph after `why`, or None: a full plan (also on any surprise: the full
        plan is always right, the resident only faster)."""
        self.settle()
        if self.resident is None:
            return None
        try:
            return self.resident.update(why, hasher)
        except Exception:
            return None

    def _full(self, loaded: Callable[[Reads], None], hasher: Any) -> Any:
        from engine import loadcache
        from engine.cache import Index, nothing_written_on_bad_input
        from engine.resident import Resident
        from engine.run import run_graph

        args, state = self.args, self.state
        self.resident = None
        key = loadcache.name(args.graph, root(args), None, None)
        hit = loadcache.lookup(state, root(args), key, hasher)
        graph, known = hit or (load_graph_of(args, hasher), None)
        loaded(graph.reads)
        with nothing_written_on_bad_input(state), Index(state, wait=args.wait) as index:
            hasher.flush(index.writable())
            result = run_graph(graph, index, jobs=args.jobs, known_keys=known)
            if known is None:
                keys = {sid: r.key for sid, r in result.steps.items()}
                loadcache.store(index.writable(), state, key, graph, keys)
        self.pending = lambda: Resident.make(graph, result)
        return result

    def _resident(self, nxt: Any, loaded: Callable[[Reads], None]) -> Any:
        from engine.cache import Index
        from engine.run import run_graph

        self.resident = None
        loaded(nxt.graph.reads)
        with Index(self.state, wait=self.args.wait) as index:
            result = run_graph(nxt.graph, index, jobs=self.args.jobs, planned=nxt.plan(index))
        self.pending = lambda: nxt.absorb(result)
        return result


def _changes(reads: Reads) -> Any:
    from engine.inotify import Changes

    return Changes(reads)


class _Failed:
    """A round whose load or run raised: nothing built, watching for the next edit."""

    ok = False
    steps: ClassVar[dict[str, Any]] = {}


def cmd_watch(args: argparse.Namespace) -> int:
    from engine.watch import Round, lines, watch

    rounds = _Rounds(args)

    def report(r: Round) -> None:
        print("\n".join(lines(r, rounds.how)), flush=True)
        rounds.settle()  # after the round's result is out

    from engine.cli import Terminated

    try:
        watch(rounds, report, interval=args.interval, rounds=args.rounds, changes=_changes)
    except Terminated:
        raise  # SIGTERM: exit 143 as every command
    except KeyboardInterrupt:  # Ctrl-C is how a watch ends: not an error
        print("trace watch: stopped", file=sys.stderr)
    finally:
        rounds.close()
    return 0
