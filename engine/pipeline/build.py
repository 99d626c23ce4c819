"""The build stage, fresh or cached: the verify graph's run, every outcome read from the store
(engine.verify.trusted: the index is never evidence); then the judge stage (`judge_built`).

`build_fresh` builds what is dirty (`trace verify`, `trace fork`, `trace draft`); `build_cached`
builds nothing and refuses when any step is dirty (`trace decide`, `trace bundle`: see
engine.verify.cached for the refusals)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, Unpack

from engine.errors import InputError, TraceError
from engine.pipeline.values import Built, Judged

if TYPE_CHECKING:
    from collections.abc import Collection

    from engine.cache import Index, IndexView
    from engine.candidate import Candidate
    from engine.graphtypes import Graph
    from engine.hashing import StatCache
    from engine.otel import StepClock


def build_fresh(
    candidate: Candidate,
    graph: Graph,
    index: Index,
    *,
    jobs: int | None = None,
    progress: bool = False,
    recheck: bool = False,
    clock: StepClock | None = None,
    rebuild: Collection[str] = (),
    hasher: StatCache | None = None,
) -> Built:
    """Build the dirty steps of `graph` (a build's bad input blamed on the candidate), then check
    the steps the index answered against the store (`recheck`: their determinism too); `clock`
    notes when each step reached each state (`--otel`); `rebuild`: step ids rebuilt with Nix's
    --check (engine/rebuilds.py); `hasher`: the read-only stat cache the graph was loaded with
    (engine.verify.fork_graph.load_verify_graph), its new entries persisted once the graph
    evaluated."""
    from engine.otel import StepClock
    from engine.progress import Progress
    from engine.run import run_graph
    from engine.verify.candidate_blame import blame_candidate
    from engine.verify.trusted import from_store

    began = dt.datetime.now(dt.UTC)
    clock = clock or StepClock()  # the bundle's timings.json, whether or not --otel asked
    with Progress(enabled=progress) as progress_reporter:
        reporter = clock.wrapping(progress_reporter)
        try:
            run = run_graph(graph, index, jobs=jobs, reporter=reporter, rebuild=rebuild)
        except InputError as exc:
            raise blame_candidate(exc, candidate) from None
    if hasher is not None:
        hasher.flush(index.writable())
    run = from_store(graph, run, index, recheck=recheck)
    return Built(candidate, graph, run, (began, dt.datetime.now(dt.UTC)), clock=clock)


class CachedOptions(TypedDict, total=False):
    """`signing_policy`: the policy that decides (its thresholds are the gates'; None: the
    default by location, as `trace verify` has it); `wait`: for the state's lock."""

    signing_policy: Path | None
    wait: float


def build_cached(
    candidate: Candidate, fork: Path, state: Path, **options: Unpack[CachedOptions]
) -> Built:
    """The verify graph and its run answered from the index, checked against the store.

    Raises InputError when the candidate was not verified with its current inputs under the
    signing policy of `options`. `ran` is this check."""
    from engine.cache import Index, IndexView
    from engine.otel import StepClock
    from engine.run import run_graph
    from engine.verify.fork_graph import load_verify_graph
    from engine.verify.trusted import from_store

    signing_policy = options.get("signing_policy")
    began = dt.datetime.now(dt.UTC)
    graph, hasher = load_verify_graph(candidate, fork, state, signing_policy)
    with IndexView.open(state) as view:  # refused before the index is opened: nothing written
        _refuse_dirty(graph, candidate, view, state, signing_policy)
    with Index(state, wait=options.get("wait", 0)) as index:
        _refuse_dirty(graph, candidate, index, state, signing_policy)  # again, under the lock
        clock = StepClock()
        run = run_graph(graph, index, reporter=clock)
        if run.evaluated or run.nix_calls:
            raise TraceError(
                f"internal error: a clean plan made {run.nix_calls} nix call(s)",
                hint="report this: a clean plan builds nothing",
            )
        run = from_store(graph, run, index, recheck=True)
        hasher.flush(index.writable())
    return Built(candidate, graph, run, (began, dt.datetime.now(dt.UTC)), clock=clock)


def _refuse_dirty(
    graph: Graph, candidate: Candidate, index: IndexView, state: Path, policy: Path | None
) -> None:
    """Refuse (InputError) when a step of the graph has no result for its current key."""
    from engine.plan import plan
    from engine.verify.cached import policy_refusal, refusal

    planned, _ = plan(graph, index)
    if planned.dirty:
        raise policy_refusal(planned, candidate, index, policy) or refusal(
            planned, candidate, state
        )


def judge_built(built: Built) -> Judged:
    """The judge stage: the verdict from the build's run (engine.verify.verdict.judge)."""
    from engine.verify.verdict import judge

    verify = judge(built.candidate, built.graph, built.run)
    return Judged(built.candidate, built.graph, built.run, built.ran, verify, clock=built.clock)


def verified_cached(
    candidate: Candidate, fork: Path, state: Path, **options: Unpack[CachedOptions]
) -> Judged:
    """`build_cached`, judged: the one evidence source of `trace decide` and `trace bundle`."""
    return judge_built(build_cached(candidate, fork, state, **options))
