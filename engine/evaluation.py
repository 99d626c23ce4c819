"""Evaluating a plan's dirty steps: render them (their frontier, given the clean steps' recorded
derivations) into one Nix file under STATE/build and instantiate it, one .drv per step; an
evaluation error is blamed on a step and its template (engine/blame.py). Building is
engine/run.py.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engine import expression
from engine.cache import Index, IndexView
from engine.errors import NixError
from engine.files import write_atomic
from engine.graphtypes import Graph
from engine.hashing import digest_bytes
from engine.plan import Plan, plan

# Generated Nix files kept in STATE/build (the newest); `trace gc` removes them all.
KEEP_BUILD_FILES = 8


def render_expression(
    graph: Graph, p: Plan, targets: list[str], known: Mapping[str, tuple[str, str]] | None = None
) -> tuple[str, dict[int, str]]:
    """One Nix file evaluating to the list of target derivations; also line -> step id.

    From scratch (every step of the targets' closure rendered) unless `known` names clean steps'
    existing .drv files (engine/expression.py)."""
    keys = {sid: sp.key for sid, sp in p.steps.items()}
    expr = expression.build(graph, keys, targets, known)
    return expr.text, expr.owner


def write_expression(
    graph: Graph,
    p: Plan,
    dirty: list[str],
    known: Mapping[str, tuple[str, str]] | None = None,
) -> tuple[expression.Expression, Path]:
    """Render the dirty steps (their frontier, given `known`) into a file of a new temporary
    folder outside the state directory: a graph that does not evaluate is bad input, which
    exits 2 having written nothing there (the file stays in the temporary folder, for its
    hint). `keep_expression` moves it to STATE/build/<digest>.nix once it evaluated."""
    import tempfile

    keys = {sid: sp.key for sid, sp in p.steps.items()}
    expr = expression.build(graph, keys, dirty, known)
    folder = Path(tempfile.mkdtemp(prefix="trace-build-"))
    expr_file = folder / f"{digest_bytes(expr.text.encode())[:32]}.nix"
    expr_file.write_text(expr.text, encoding="utf-8")
    return expr, expr_file


def keep_expression(expr_file: Path, state_dir: Path, index: Index | None = None) -> Path:
    """The evaluated expression at STATE/build/<digest>.nix (the newest KEEP_BUILD_FILES are
    kept, to read after a failed build); its temporary folder is removed."""
    import shutil

    kept = state_dir / "build" / expr_file.name
    write_atomic(kept, expr_file.read_bytes())
    shutil.rmtree(expr_file.parent, ignore_errors=True)
    if index is not None:
        index.prune_build_files(keep=KEEP_BUILD_FILES)
    return kept


def drop_expression(expr_file: Path) -> None:
    """Remove an expression's temporary folder (a fallback evaluates one of its own)."""
    import shutil

    shutil.rmtree(expr_file.parent, ignore_errors=True)


class Evaluated:
    """An evaluation: the generated Nix file, one .drv per target step, the templates rendered
    (the rest of the closure was imported by .drv) and the seconds (render, instantiate). Plain
    classes here: a NamedTuple costs millions of instructions to make at import (issue 30)."""

    __slots__ = ("drvs", "file", "rendered", "seconds")

    def __init__(
        self, file: Path, drvs: list[str], rendered: int, seconds: tuple[float, float]
    ) -> None:
        self.file, self.drvs, self.rendered, self.seconds = file, drvs, rendered, seconds


class Preevaluated:
    """A first run's graph, evaluated before its state directory was made
    (`evaluate_before_state`): each dirty step's key, in the plan's order, and its `.drv`
    (`evaluated.drvs`, same order); the Nix file is still in its temporary folder."""

    __slots__ = ("evaluated", "keys")

    def __init__(self, keys: dict[str, str], evaluated: Evaluated) -> None:
        self.keys, self.evaluated = keys, evaluated

    def of(self, p: Plan, dirty: list[str]) -> Evaluated | None:
        """The evaluation, when it is of exactly these dirty steps with these keys."""
        return self.evaluated if self.keys == {s: p.steps[s].key for s in dirty} else None


def evaluate(
    graph: Graph,
    p: Plan,
    dirty: list[str],
    nix: Any,
    state_dir: Path | None,
    index: Index | None = None,
    known: Mapping[str, tuple[str, str]] | None = None,
    keep_temporary: bool = False,
) -> Evaluated:
    """Render the dirty steps into one file and instantiate it (one .drv per step); the file
    is kept in STATE/build once it evaluated (`state_dir` None: not kept, unless
    `keep_temporary`: then left in its temporary folder, for the caller to keep or drop).

    With `known` (clean steps' recorded derivations), only the frontier is rendered; should that
    evaluation fail, a from-scratch one decides. An evaluation error is bad input (exit 2) blamed
    on a step and its template; a failure of Nix itself is a NixError (exit 4)."""
    from engine import blame

    t0 = time.perf_counter()
    expr, expr_file = write_expression(graph, p, dirty, known)
    t1 = time.perf_counter()
    rc, drvs, err = nix.instantiate(expr_file)
    seconds = (t1 - t0, time.perf_counter() - t1)
    if rc == 0 and len(drvs) == len(dirty):
        if state_dir is None:
            if not keep_temporary:
                drop_expression(expr_file)
            return Evaluated(expr_file, drvs, len(expr.rendered), seconds)
        kept = keep_expression(expr_file, state_dir, index)
        return Evaluated(kept, drvs, len(expr.rendered), seconds)
    failure = blame.nix_failure(rc, err, "nix-instantiate")
    if failure is not None:
        raise failure
    if expr.referenced:  # e.g. a recorded .drv Nix cannot read: evaluate from scratch
        drop_expression(expr_file)
        full = evaluate(graph, p, dirty, nix, state_dir, index)
        full.seconds = (seconds[0] + full.seconds[0], seconds[1] + full.seconds[1])
        return full
    if rc == 0:
        raise NixError(f"nix-instantiate printed {len(drvs)} derivations for {len(dirty)} steps")
    # before the graph is blamed: does Nix evaluate anything at all (its store opens)?
    failure = blame.nix_failure(rc, err, "nix-instantiate", nix.works)
    if failure is not None:
        raise failure

    def run_file(path: Path) -> tuple[int, str]:
        code, _, e = nix.instantiate(path)
        return code, e

    evaluator = blame.scratch_evaluator(
        lambda prefix: render_expression(graph, p, prefix)[0], run_file, expr_file.parent
    )
    starts: dict[str, int] = {}
    for line, sid in expr.owner.items():
        starts[sid] = min(line, starts.get(sid, line))
    raise blame.blame(graph, dirty, err, expr.owner, starts, expr_file, evaluator)


def evaluate_before_state(graph: Graph, state: Path, *, reuse: bool = False) -> Preevaluated | None:
    """A run that is to make the state directory `state` evaluates its graph first (every step
    is dirty then: nothing is cached), so a graph that does not evaluate is refused (exit 2)
    before the directory exists; once it exists, the run evaluates under the index's lock,
    which writes nothing before the graph evaluated. One more nix-instantiate, on first runs
    only. `reuse`: the evaluation is returned (its Nix file left in its temporary folder) for
    the run to build from (engine.run.run_graph `evaluated=`) instead of evaluating again; the
    caller drops its file when the run does not (`drop_expression`)."""
    if os.path.lexists(state):
        return None
    from engine.loader import check_path
    from engine.nix import Nix

    check_path(state, "state directory", key="--state-dir")
    with IndexView.open(state) as empty:
        p, _ = plan(graph, empty)
    if not p.dirty:  # nothing kept: whether the directory can be made, the index says next
        return None
    ev = evaluate(graph, p, p.dirty, Nix(graph.nix), None, keep_temporary=reuse)
    return Preevaluated({s: p.steps[s].key for s in p.dirty}, ev) if reuse else None
