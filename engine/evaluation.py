"""Evaluating a plan's dirty steps: render them (their frontier, given the clean steps' recorded
derivations) into one Nix file under STATE/build and instantiate it, one .drv per step; an
evaluation error is blamed on a step and its template (engine/blame.py). Building is
engine/run.py.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from engine import expression
from engine.cache import Index
from engine.errors import NixError
from engine.files import write_atomic
from engine.hashing import digest_bytes
from engine.model import Graph
from engine.plan import Plan

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
    state_dir: Path,
    index: Index | None = None,
    known: Mapping[str, tuple[str, str]] | None = None,
) -> tuple[expression.Expression, Path]:
    """Render the dirty steps (their frontier, given `known`) into STATE/build/<digest>.nix."""
    keys = {sid: sp.key for sid, sp in p.steps.items()}
    expr = expression.build(graph, keys, dirty, known)
    expr_file = state_dir / "build" / f"{digest_bytes(expr.text.encode())[:32]}.nix"
    write_atomic(expr_file, expr.text)
    if index is not None:
        index.prune_build_files(keep=KEEP_BUILD_FILES)  # the newest, to read after a failure
    return expr, expr_file


class Evaluated(NamedTuple):
    file: Path  # the generated Nix file
    drvs: list[str]  # one .drv per target step
    rendered: int  # templates rendered (the rest of the closure was imported by .drv)
    seconds: tuple[float, float]  # (render, instantiate)


def evaluate(
    graph: Graph,
    p: Plan,
    dirty: list[str],
    nix: Any,
    state_dir: Path,
    index: Index | None = None,
    known: Mapping[str, tuple[str, str]] | None = None,
) -> Evaluated:
    """Render the dirty steps into one file and instantiate it (one .drv per step).

    With `known` (clean steps' recorded derivations), only the frontier is rendered; should that
    evaluation fail, a from-scratch one decides. An evaluation error is bad input (exit 2) blamed
    on a step and its template; a failure of Nix itself is a NixError (exit 4)."""
    from engine import blame

    t0 = time.perf_counter()
    expr, expr_file = write_expression(graph, p, dirty, state_dir, index, known)
    t1 = time.perf_counter()
    rc, drvs, err = nix.instantiate(expr_file)
    seconds = (t1 - t0, time.perf_counter() - t1)
    if rc == 0 and len(drvs) == len(dirty):
        return Evaluated(expr_file, drvs, len(expr.rendered), seconds)
    failure = blame.nix_failure(rc, err, "nix-instantiate")
    if failure is not None:
        raise failure
    if expr.referenced:  # e.g. a recorded .drv Nix cannot read: evaluate from scratch
        full = evaluate(graph, p, dirty, nix, state_dir, index)
        return full._replace(seconds=(seconds[0] + full.seconds[0], seconds[1] + full.seconds[1]))
    if rc == 0:
        raise NixError(f"nix-instantiate printed {len(drvs)} derivations for {len(dirty)} steps")

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
