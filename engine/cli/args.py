"""Argument helpers shared by the commands: the state-directory options, a positive int, the
project root and state directory they name, and the rule that bad input writes nothing."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.graphtypes import Graph
    from engine.hashing import StatCache
    from engine.otel import StepClock
    from engine.run import RunResult


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


def root(args: argparse.Namespace) -> Path:
    return (args.root or Path.cwd()).resolve()


def state_dir(args: argparse.Namespace) -> Path:
    return (args.state_dir or root(args) / ".trace").resolve()


def load_graph_of(args: argparse.Namespace, hasher: StatCache) -> Graph:
    """The full load (engine/graph.py: TOML, validation, digests), when the load cache missed:
    imported only then, so a cache hit imports no pydantic (tests/test_hotpath.py)."""
    from engine.graph import load_graph

    return load_graph(args.graph, root=root(args), hasher=hasher)


def add_otel_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--otel",
        metavar="FILE|URL",
        default=None,
        help="also write the run's steps as OpenTelemetry spans: JSON lines to FILE, or OTLP/HTTP "
        "to an http(s):// endpoint such as http://127.0.0.1:4318/v1/traces (needs trace[otel])",
    )


def otel_clock(args: argparse.Namespace) -> StepClock | None:
    """A step clock when `--otel` was given (its target checked before any work), else None."""
    if args.otel is None:
        return None
    from engine.otel import StepClock, check_target

    check_target(args.otel)
    return StepClock()


def otel_export(
    args: argparse.Namespace, clock: StepClock | None, result: RunResult, name: str
) -> None:
    """Export the run's spans to `--otel` (nothing without it)."""
    if clock is None:
        return
    from engine.otel import export

    export(result, clock, args.otel, name=name, attributes={"trace.graph": result.graph})


def add_rebuild_args(p: Any) -> None:
    """`--rebuild STEP…` / `--rebuild-all`: rebuild with Nix's --check (docs/commands.md)."""
    p.add_argument(
        "--rebuild",
        nargs="+",
        action="extend",
        default=[],
        metavar="STEP",
        help="rebuild these steps (a repeated step's base id: all its repeats) even when cached, "
        "with Nix's --check: a rebuilt output that differs from the store's is reported (exit 1), "
        "never silently replaced",
    )
    p.add_argument("--rebuild-all", action="store_true", help="--rebuild every step of the graph")


def rebuild_lines(result: Any) -> list[str]:
    """What `--rebuild` found (engine/run.py RunResult.rebuild_findings)."""
    return list(result.rebuild_findings())
