"""`trace verify` as a library: the load stage, then the build stage, fresh. The command line
(with `--bundle`) is engine/cli/verify.py; `trace draft` verifies its candidates with it too."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, Unpack

from engine.pipeline.build import build_fresh, judge_built
from engine.pipeline.load import locate
from engine.pipeline.values import Judged

if TYPE_CHECKING:
    from collections.abc import Sequence

    from engine.otel import StepClock
    from engine.verify_result import VerifyResult


class VerifyOptions(TypedDict, total=False):
    """How `trace verify` runs: the fork (default: found upward from the candidate, else the
    working directory), the state directory (default FORK/.trace), `-j`, the progress display,
    how long to wait for the state's lock, and the signing policy whose thresholds the gates
    apply (default: by location)."""

    fork: Path | None
    state_dir: Path | None
    jobs: int | None
    progress: bool
    wait: float
    signing_policy: Path | None
    clock: StepClock | None  # notes when each step reached each state (`--otel`)
    # `--rebuild STEP…`/`--rebuild-all`: (step names, every step), rebuilt with Nix's --check
    rebuild: tuple[Sequence[str], bool]


def run_verify(candidate_file: Path, **options: Unpack[VerifyOptions]) -> VerifyResult:
    """Load the candidate and the fork's graph, build what is dirty, judge. The Python API."""
    return build_verify(candidate_file, **options).verify


def build_verify(
    candidate_file: Path, *, recheck: bool = False, **options: Unpack[VerifyOptions]
) -> Judged:
    """`run_verify`, also returning the graph and the run the verdict was judged from.

    Steps answered from the index are checked against and re-read from the store
    (`from_store`); `recheck`: their determinism is measured again too (for a bundle)."""
    from engine.cache import Index, nothing_written_on_bad_input
    from engine.errors import InputError
    from engine.evaluation import evaluate_before_state
    from engine.rebuilds import rebuild_steps
    from engine.verify.candidate_blame import blame_candidate
    from engine.verify.fork_graph import load_verify_graph

    located = locate(candidate_file, options.get("fork"), options.get("state_dir"))
    wait, policy = options.get("wait", 0), options.get("signing_policy")
    graph, hasher = load_verify_graph(located.candidate, located.fork, located.state, policy)
    chosen = rebuild_steps(graph, *options.get("rebuild", ((), False)))  # unknown: exit 2
    try:
        evaluate_before_state(graph, located.state)  # bad input: exit 2, nothing written
    except InputError as exc:
        raise blame_candidate(exc, located.candidate) from None
    with nothing_written_on_bad_input(located.state), Index(located.state, wait=wait) as index:
        built = build_fresh(
            located.candidate,
            graph,
            index,
            jobs=options.get("jobs"),
            progress=options.get("progress", False),
            recheck=recheck,
            clock=options.get("clock"),
            rebuild=chosen,
            hasher=hasher,
        )
    return judge_built(built)
