"""The verify graph of one candidate: find the fork, load the fork's verify graph with the
candidate's context. The stages that build and judge it, and `run_verify`/`build_verify`, are
engine/pipeline/; the `trace verify` command line (with `--bundle`) is engine/cli/verify.py:
dependencies point from the command line and the bundles to verify, never back."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.candidate import Candidate
    from engine.graphtypes import Graph
    from engine.hashing import StatCache

STANDARD_GRAPH = "graphs/verify.toml"
FORK_FILE = "trace.toml"


def find_fork(candidate: Path) -> Path | None:
    """The nearest directory at or above the candidate's that holds a trace.toml."""
    for d in [candidate.resolve().parent, *candidate.resolve().parents]:
        if (d / FORK_FILE).is_file():
            return d
    return None


def verify_context(
    candidate: Candidate, fork: Path, signing_policy: Path | None = None
) -> dict[str, Any]:
    """The context the verify graph is loaded with (replays must use the same).

    `signing_policy`: the policy whose thresholds the gate steps apply (they enter the gate
    steps' keys); None is the default by location (`engine.gates.context.signing_policy_path`).
    `trace decide`/`trace bundle` must load the graph with the very policy they decide with."""
    from engine.gates.context import gate_context

    return {
        "candidate": candidate.context(),
        "fork": {"root": str(fork)},
        "gates": gate_context(candidate, signing_policy, fork=fork),
    }


def graph_entry(fork: Path) -> Path:
    from engine.paths import data_dir

    own = fork / FORK_FILE
    return own if own.is_file() else data_dir() / STANDARD_GRAPH


def project_root(fork: Path) -> Path:
    """The fork is the project: its inputs stay inside it; trace's own files are `trace:` refs."""
    return fork


def load_verify_graph(
    candidate: Candidate, fork: Path, state: Path, signing_policy: Path | None = None
) -> tuple[Graph, StatCache]:
    """The fork's verify graph instantiated for one candidate (its gates applying
    `signing_policy`'s thresholds), inputs hashed with the state directory's stat cache, read
    without opening the index (bad input is refused before anything is written); the caller
    persists the cache's new entries (`flush(index.writable())`) once the graph evaluated. The
    one way `trace verify`, `trace decide` and `trace bundle` load it."""
    from engine.graph import load_graph
    from engine.hashing import StatCache

    hasher = StatCache.read_only(state / "state.db")
    graph = load_graph(
        graph_entry(fork),
        root=project_root(fork),
        context=verify_context(candidate, fork, signing_policy),
        hasher=hasher,
        variant=candidate.spec.id,
    )
    return graph, hasher
