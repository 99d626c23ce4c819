"""The verify pipeline for one candidate, as a library: find the fork, load its verify graph
with the candidate's context, build what is dirty, check what the index answered against the
store, judge. The `trace verify` command line (with `--bundle`) is engine/cli/verify.py:
dependencies point from the command line and the bundles to verify, never back."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.candidate import Candidate
    from engine.hashing import StatCache
    from engine.model import Graph
    from engine.otel import StepClock
    from engine.run import RunResult
    from engine.verify_result import VerifyResult

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


def run_verify(
    candidate_file: Path,
    *,
    fork: Path | None = None,
    state_dir: Path | None = None,
    jobs: int | None = None,
    progress: bool = False,
    wait: float = 0,
    signing_policy: Path | None = None,
) -> VerifyResult:
    """Load the candidate and the fork's graph, build what is dirty, judge. The Python API."""
    return build_verify(
        candidate_file,
        fork=fork,
        state_dir=state_dir,
        jobs=jobs,
        progress=progress,
        wait=wait,
        signing_policy=signing_policy,
    )[2]


def build_verify(
    candidate_file: Path,
    *,
    fork: Path | None = None,
    state_dir: Path | None = None,
    jobs: int | None = None,
    progress: bool = False,
    wait: float = 0,
    signing_policy: Path | None = None,
    recheck: bool = False,
    clock: StepClock | None = None,
    rebuild: tuple[Sequence[str], bool] = ((), False),
) -> tuple[Graph, RunResult, VerifyResult]:
    """`run_verify`, also returning the graph and the run the verdict was judged from.

    `signing_policy`: whose thresholds the gates apply (None: the default by location). Steps
    answered from the index are checked against and re-read from the store (`from_store`);
    `recheck`: their determinism is measured again too (for a bundle); `clock` notes when each
    step reached each state (`--otel`); `rebuild`: (step names, every step): rebuilt with Nix's
    --check (engine/run.py rebuild_steps)."""
    from engine.cache import Index, nothing_written_on_bad_input
    from engine.candidate import load_candidate
    from engine.errors import InputError, UsageError
    from engine.progress import Progress
    from engine.run import evaluate_before_state, rebuild_steps, run_graph
    from engine.verify.blame import blame_candidate
    from engine.verify.trusted import from_store
    from engine.verify.verdict import judge

    candidate = load_candidate(candidate_file)
    if fork is None:
        fork = find_fork(candidate.path) or Path.cwd()
    fork = fork.resolve()
    if not fork.is_dir():
        raise UsageError(f"--fork {fork} is not a directory", hint="pass the package set's root")
    state = (state_dir or fork / ".trace").resolve()
    graph, hasher = load_verify_graph(candidate, fork, state, signing_policy)
    chosen = rebuild_steps(graph, *rebuild)  # an unknown step: exit 2, nothing written
    try:
        evaluate_before_state(graph, state)
    except InputError as exc:
        raise blame_candidate(exc, candidate) from None
    with nothing_written_on_bad_input(state), Index(state, wait=wait) as index:
        with Progress(enabled=progress) as progress_reporter:
            reporter = progress_reporter if clock is None else clock.wrapping(progress_reporter)
            try:
                result = run_graph(graph, index, jobs=jobs, reporter=reporter, rebuild=chosen)
            except InputError as exc:
                raise blame_candidate(exc, candidate) from None
        hasher.flush(index.writable())
        result = from_store(graph, result, index, recheck=recheck)
    return graph, result, judge(candidate, graph, result)
