"""`trace verify` as a library: the load stage, then the build stage, fresh. The command line
(with `--bundle`) is engine/cli/verify.py; `trace draft` verifies its candidates with it too."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from engine.pipeline.build import build_fresh, judge_built
from engine.pipeline.load import locate
from engine.pipeline.models import Judged

if TYPE_CHECKING:
    from engine.otel import StepClock
    from engine.verify_result import VerifyResult


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
    ).verify


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
) -> Judged:
    """`run_verify`, also returning the graph and the run the verdict was judged from.

    `signing_policy`: whose thresholds the gates apply (None: the default by location). Steps
    answered from the index are checked against and re-read from the store (`from_store`);
    `recheck`: their determinism is measured again too (for a bundle); `clock` notes when each
    step reached each state (`--otel`)."""
    from engine.cache import Index, nothing_written_on_bad_input
    from engine.verify.pipeline import load_verify_graph

    located = locate(candidate_file, fork, state_dir)
    with nothing_written_on_bad_input(located.state), Index(located.state, wait=wait) as index:
        graph = load_verify_graph(located.candidate, located.fork, index, signing_policy)
        built = build_fresh(
            located.candidate,
            graph,
            index,
            jobs=jobs,
            progress=progress,
            recheck=recheck,
            clock=clock,
        )
    return judge_built(built)
