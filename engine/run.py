"""Plan and execute a graph: content keys, clean/dirty with reasons, one nix call for the rest.

Plan: each step's key is the digest of its components (kind, template digest, resolved params,
input digests, the keys of the steps it needs, package-set digest, Nix settings, engine version).
A step whose key has a result in the index and whose output still exists is clean: no Nix
evaluation at all. Execute: the dirty steps are rendered into one Nix file, their clean upstream
steps imported by their recorded `.drv` (only the dirty frontier is rendered; the `.drv` paths are
those of a from-scratch evaluation: engine/expression.py), then evaluated and built with
`--keep-going` by ONE `nix-build`, which traces each step's `.drv` as it evaluates it (Nix.build),
so builds are told apart by step as before. When that evaluation fails, `nix-instantiate` of the
same file blames the step (and the dirty derivations are built by `nix-store --realise`); past
REALISE_CHUNK dirty steps (a chunk at a time) or with the store's build lock taken, that path.
Failures: reported with their log tail, never cached, downstream skipped. `check` kinds: --check.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Collection, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from engine.cache import CachedResult, Index
from engine.evaluation import drop_expression, evaluate, keep_expression, write_expression
from engine.graphtypes import Graph
from engine.nixreport import RealiseReport
from engine.plan import Plan, known_drvs, plan
from engine.progress import PhaseClock
from engine.rebuilds import recheck
from engine.vanished import hold

TYPE_CHECKING = False
if TYPE_CHECKING:  # engine.nix is imported only when something builds
    from engine.evaluation import Evaluated, Preevaluated
    from engine.nix import Nix

# One Nix process building thousands of steps slows down step by step (it holds every step's
# evaluation and goal to the end: a 2000-step chain took 1.75x as long in one nix-build as
# instantiated, then realised 500 at a time; bench/README.md). Past this many dirty steps a run
# instantiates them once, then realises them in chunks of this size, in graph order.
REALISE_CHUNK = 500

# substituted: fetched from a binary cache whose signature Nix checked (counts like a build)
Status = Literal["cached", "built", "substituted", "reused", "failed", "skipped"]


# Plain dataclasses: a run builds thousands of these from values it computed itself, and the
# hot path (`trace run` of one change) imports no pydantic at all (tests/test_hotpath.py).
@dataclass(kw_only=True)
class StepResult:
    id: str
    key: str
    status: Status
    drv: str | None = None
    out: str | None = None
    outcome: Any = None
    deterministic: bool | None = None
    log_tail: str | None = None
    reasons: list[str] = field(default_factory=list)
    # where the result came from: 'local', a remote builder's URI, or 'cache:<url>'
    # (substituted); for a cached step, as recorded by the run that made it; None when no run of
    # this state directory made it (reused: already in the store)
    built_on: str | None = None
    # the machine that did the --check rebuild ('local' or a URI; a cached step: as recorded)
    checked_on: str | None = None
    # `--rebuild`: rebuilt with Nix's --check against the output in the store: 'same', 'differs'
    # (the store keeps its output; reported, never replaced) or 'failed' (the rebuild failed)
    rebuilt: Literal["same", "differs", "failed"] | None = None


@dataclass(kw_only=True)
class RunResult:
    graph: str
    steps: dict[str, StepResult]
    evaluated: bool = False
    nix_calls: int = 0
    rendered: int = 0  # templates rendered (clean upstream steps are imported by their .drv)
    # seconds per phase: plan, render, build (one nix-build: evaluate and realise; or instantiate
    # and realise, see REALISE_CHUNK), collect (reading outcomes), check (--check), record
    timings: dict[str, float] = field(default_factory=dict)

    def count(self, status: Status) -> int:
        return sum(1 for s in self.steps.values() if s.status == status)

    @property
    def ok(self) -> bool:
        return all(s.status not in ("failed", "skipped") for s in self.steps.values())

    def rebuild_findings(self) -> list[str]:
        """What `--rebuild` found: a line per rebuilt step that did not match the store."""
        from engine.rebuilds import findings

        return findings(self.steps.values())

    @property
    def rebuilt_differently(self) -> list[str]:
        """`--rebuild` steps whose rebuild differed from, or failed to remake, the store's."""
        return [s.id for s in self.steps.values() if s.rebuilt not in (None, "same")]

    def to_json(self, indent: int | None = None) -> str:
        """`trace run --json`: every field, as pydantic's model_dump_json wrote it."""
        return json.dumps(asdict(self), indent=indent, ensure_ascii=False)


def read_outcome(out: str) -> Any:
    p = Path(out)
    target = p / "outcome.json" if p.is_dir() else p
    if target.is_file() and (target.name.endswith(".json") or target != p):
        try:
            return json.loads(target.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):
            return None
    return None


Reporter = Callable[[str, str], None]
Planned = tuple[Plan, Mapping[str, CachedResult]]


def _default_reporter(progress: bool) -> Reporter:
    def report(step_id: str, state: str) -> None:
        if progress:
            print(f"[{state:>8}] {step_id}", file=sys.stderr, flush=True)

    return report


def run_graph(
    graph: Graph,
    state: Path | Index,
    *,
    jobs: int | None = None,
    progress: bool = False,
    reporter: Reporter | None = None,
    wait: float = 0,
    known_keys: Mapping[str, str] | None = None,
    rebuild: Collection[str] = (),
    planned: Planned | None = None,
    evaluated: Preevaluated | None = None,
) -> RunResult:
    """Build every dirty step of the graph; answer clean steps from the index.

    `state` is a state directory (locked for the duration) or an Index the caller already holds.
    `rebuild`: step ids rebuilt with `--check` after the run, cached or not (`rebuild_steps`).
    `planned`: the plan of this graph against this index and the cached results of its clean
    steps, made by the caller (`trace watch`'s resident graph, engine/resident.py), instead of
    `engine.plan.plan`. `evaluated`: what evaluate_before_state evaluated, built from (not
    evaluated again) when it is this plan's dirty steps and keys; else the caller drops it.
    """
    from engine.machine import load_machine

    load_machine()  # a bad machine config is refused before anything is written
    report = reporter or _default_reporter(progress)
    if isinstance(state, Index):
        return _run(graph, state, jobs, report, known_keys, rebuild, planned, evaluated)
    with Index(state, wait=wait) as index:
        return _run(graph, index, jobs, report, known_keys, rebuild, planned, evaluated)


def _run(
    graph: Graph,
    index: Index,
    jobs: int | None,
    report: Reporter,
    known_keys: Mapping[str, str] | None = None,
    rebuild: Collection[str] = (),
    planned: Planned | None = None,
    evaluated: Preevaluated | None = None,
) -> RunResult:
    """Plan; answer the clean steps from the index; build the dirty ones (`_build`), read their
    results (`_collect`), `--check` the check kinds (`_check`) and the `rebuild` steps
    (`engine.rebuilds.recheck`); record."""
    from engine.nix import Nix

    clock = PhaseClock()
    p, cached = planned or plan(graph, index, known_keys)
    clock.mark("plan")
    results = _cached_results(p, cached, report)
    dirty = p.dirty
    run = RunResult(graph=p.graph, steps={})
    last = {
        sid: (sp.key, sid, sp.components) for sid, sp in p.steps.items() if sp.key != sp.prev_key
    }
    if dirty:
        nix = Nix(graph.nix, jobs)
        for sid in dirty:
            report(sid, "queued")
        job = _Job(graph, p, dirty, nix, index, known_drvs(p, cached), run, clock, report)
        pre = evaluated.of(p, dirty) if evaluated and len(dirty) <= REALISE_CHUNK else None
        built = _build(job) if pre is None else _build_evaluated(job, pre)  # past it: chunks
        results.update(_collect(graph, p, dirty, built, nix, report))
        clock.mark("collect")
        checked = _check(graph, dirty, results, built, nix, report)
        if checked is not None:
            run.nix_calls += 1
            if checked.nix_failed:
                index.record(new_results(results, dirty), last, p.graph)
                raise checked.nix_error("nix-store --realise --check")
        clock.mark("check")
    if rebuild:
        rebuilt = recheck(graph, rebuild, results, Nix(graph.nix, jobs), report)
        run.nix_calls += rebuilt is not None
        if rebuilt is not None and rebuilt.nix_failed:
            index.record(new_results(results, dirty), last, p.graph)
            raise rebuilt.nix_error("nix-store --realise --check")
        clock.mark("rebuild")
    index.record(new_results(results, dirty), last, p.graph)
    clock.mark("record")
    run.steps, run.timings = {sid: results[sid] for sid in p.order}, clock.laps
    return run


def _cached_results(
    p: Plan, cached: Mapping[str, CachedResult], report: Reporter
) -> dict[str, StepResult]:
    """The clean steps' results, as the index recorded them."""
    results: dict[str, StepResult] = {}
    for sid in p.order:
        sp = p.steps[sid]
        if not sp.dirty:
            hit = cached[sp.key]
            results[sid] = StepResult(
                id=sid,
                key=sp.key,
                status="cached",
                drv=hit.drv,
                out=hit.out,
                outcome=hit.outcome,
                deterministic=hit.deterministic,
                reasons=[],
                built_on=hit.built_on,
                checked_on=hit.checked_on,
            )
            report(sid, "cached")
    return results


@dataclass
class _Built:
    """Building's yield: each step's .drv and output, Nix's report, the outputs not valid."""

    drv_of: dict[str, str]
    out_of: dict[str, str]
    report: RealiseReport
    invalid: set[str]


@dataclass
class _Job:
    """What building a run's dirty steps works with (`_build`, `_instantiate_and_realise`)."""

    graph: Graph
    plan: Plan
    dirty: list[str]
    nix: Nix
    index: Index
    known: Mapping[str, tuple[str, str]]  # clean steps' (.drv, output): the frontier imports
    run: RunResult
    clock: PhaseClock
    report: Reporter


def _build(job: _Job) -> _Built:
    """Render the dirty frontier and build it with ONE nix-build (engine/nix.py Nix.build); past
    REALISE_CHUNK dirty steps, when that evaluation failed or the store's lock is taken (not to
    wait for it before bad input is found), `_instantiate_and_realise`."""
    dirty, run, clock = job.dirty, job.run, job.clock
    if len(dirty) > REALISE_CHUNK:
        return _instantiate_and_realise(job)
    expr, expr_file = write_expression(job.graph, job.plan, dirty, job.known)
    run.evaluated, run.rendered = True, len(expr.rendered)
    clock.mark("render")
    drv_of: dict[str, str] = {}
    step_of: dict[str, str] = {}

    def on_traced(i: int, drv: str) -> None:  # evaluated: known before any build starts
        if i < len(dirty):
            drv_of[dirty[i]] = drv
            step_of.setdefault(drv, dirty[i])

    events = _step_events(step_of, job.report)
    rep = job.nix.build(expr_file, on_event=events, on_traced=on_traced, wait=False)
    if rep is None:  # the lock is taken: evaluate now, unlocked; realise once it is free
        drop_expression(expr_file)
        return _instantiate_and_realise(job)
    run.nix_calls += 1
    traced = rep.traced
    evaluated = len(traced) == len(dirty) and all(traced.get(i) for i in range(len(dirty)))
    if evaluated:
        keep_expression(expr_file, job.index.state_dir, job.index)
    if evaluated and rep.nix_failed:  # whatever did build is kept: the next run reuses it
        raise rep.nix_error("nix-build")
    clock.mark("build")
    if not evaluated:
        drop_expression(expr_file)
        # An evaluation error (or Nix failing before it ended): the two-process path blames it
        # on its step (from scratch when a recorded .drv cannot be read); nix-build's builds kept
        built = _instantiate_and_realise(job)
        built.report.built |= rep.built  # what nix-build did build before it failed
        built.report.built_on = {**rep.built_on, **built.report.built_on}
        return built
    return _held(job, drv_of, rep, "build")


def _held(job: _Job, drv_of: dict[str, str], rep: RealiseReport, phase: str) -> _Built:
    """Root what Nix built at once: another Nix process may delete it (engine/vanished.py)."""
    from engine.nix import output_of

    out_of = {s: output_of(d) for s, d in drv_of.items()}
    keys = {s: job.plan.steps[s].key for s in job.dirty}
    invalid, calls = hold(job.nix, job.index, keys, drv_of, out_of, rep)
    job.run.nix_calls += calls
    job.clock.mark(phase)
    return _Built(drv_of, out_of, rep, invalid)


def _build_evaluated(job: _Job, ev: Evaluated) -> _Built:
    """`nix-store --realise` of the dirty steps' `.drv` files from their evaluation before the
    state directory (`ev`, in order), not evaluated again; then as `_build` after nix-build."""
    job.run.evaluated, job.run.rendered = True, ev.rendered
    job.clock.laps.update(render=ev.seconds[0], instantiate=ev.seconds[1])
    job.clock.mark(None)
    drv_of = dict(zip(job.dirty, ev.drvs, strict=True))
    on_event = _step_events({d: s for s, d in drv_of.items()}, job.report)
    rep, job.run.nix_calls = job.nix.realise(ev.drvs, on_event=on_event), job.run.nix_calls + 1
    keep_expression(ev.file, job.index.state_dir, job.index)
    if rep.nix_failed:
        raise rep.nix_error("nix-store --realise")
    return _held(job, drv_of, rep, "realise")


def _step_events(step_of: Mapping[str, str], report: Reporter) -> Callable[[str, str], None]:
    """Nix's events about a .drv, reported for the step it is (other derivations: not)."""

    def on_event(event: str, drv: str) -> None:
        sid = step_of.get(drv)
        if sid is not None:
            report(sid, event)

    return on_event


def _instantiate_and_realise(job: _Job) -> _Built:
    """One nix-instantiate (an evaluation error is blamed on its step: `evaluate`), then
    `nix-store --realise` of REALISE_CHUNK steps at a time in graph order, so a chunk's upstream
    steps are built before it. A step that needs one that did not build is left out of later
    chunks (it is skipped, and its failed upstream is not built again)."""
    from engine.nix import output_of

    graph, dirty, nix, run, clock = job.graph, job.dirty, job.nix, job.run, job.clock
    ev = evaluate(graph, job.plan, dirty, nix, job.index.state_dir, job.index, job.known)
    run.evaluated, run.rendered = True, ev.rendered
    run.nix_calls += 1
    clock.laps["render"] = clock.laps.get("render", 0.0) + ev.seconds[0]
    clock.laps["instantiate"] = ev.seconds[1]
    clock.mark(None)
    drv_of = dict(zip(dirty, ev.drvs, strict=True))
    out_of = {s: output_of(d) for s, d in drv_of.items()}
    on_event = _step_events({d: s for s, d in drv_of.items()}, job.report)
    total = RealiseReport(returncode=0)
    invalid: set[str] = set()  # outputs of steps that did not build, or were left out
    for start in range(0, len(dirty), REALISE_CHUNK):
        todo: list[str] = []
        for sid in dirty[start : start + REALISE_CHUNK]:
            if any(out_of.get(n) in invalid for n in graph.steps[sid].needs):
                invalid.add(out_of[sid])
            else:
                todo.append(sid)
        if not todo:
            continue
        part = nix.realise([drv_of[s] for s in todo], on_event=on_event)
        if part.nix_failed:
            raise part.nix_error("nix-store --realise")
        keys, sub = {s: job.plan.steps[s].key for s in todo}, {s: drv_of[s] for s in todo}
        # rooted at once, as after nix-build (`_held`): another Nix process may delete it
        bad, calls = hold(nix, job.index, keys, sub, {s: out_of[s] for s in todo}, part)
        invalid, run.nix_calls = invalid | bad, run.nix_calls + 1 + calls
        total.merge(part)
    clock.mark("realise")
    return _Built(drv_of, out_of, total, invalid)


def _collect(
    graph: Graph, p: Plan, dirty: list[str], built: _Built, nix: Nix, report: Reporter
) -> dict[str, StepResult]:
    """Each dirty step's result: built, substituted or reused with its outcome; else failed with
    its log tail, or skipped when a step it needs did not build."""
    rep = built.report
    results: dict[str, StepResult] = {}
    failed_steps: set[str] = set()
    for sid in dirty:
        sp = p.steps[sid]
        drv, out = built.drv_of[sid], built.out_of[sid]
        if out not in built.invalid:
            status: Status = "built" if drv in rep.built else "reused"
            origin = rep.built_on.get(drv)
            if drv not in rep.built and out in rep.substituted:
                status, origin = "substituted", f"cache:{rep.substituted[out]}"
            res = StepResult(
                id=sid,
                key=sp.key,
                status=status,
                drv=drv,
                out=out,
                outcome=read_outcome(out),
                reasons=sp.reasons,
                built_on=origin,
            )
            report(sid, status)
        else:
            upstream_failed = [n for n in graph.steps[sid].needs if n in failed_steps]
            if upstream_failed and drv not in rep.failed:
                res = StepResult(
                    id=sid,
                    key=sp.key,
                    status="skipped",
                    drv=drv,
                    reasons=sp.reasons,
                    log_tail=f"skipped: needs {', '.join(upstream_failed)}, which did not build",
                )
                report(sid, "skipped")
            else:
                log = nix.read_log(drv) if drv in rep.failed else ""
                if drv in rep.no_output:
                    log += "\n(the builder exited 0 without creating its output $out)"
                if not log:
                    inner = sorted(rep.failed - set(built.drv_of.values()))
                    log = "\n".join(nix.read_log(d) for d in inner[:1]) if inner else ""
                res = StepResult(
                    id=sid, key=sp.key, status="failed", drv=drv, reasons=sp.reasons, log_tail=log
                )
                report(sid, "failed")
            failed_steps.add(sid)
        results[sid] = res
    return results


def _check(
    graph: Graph,
    dirty: list[str],
    results: dict[str, StepResult],
    built: _Built,
    nix: Nix,
    report: Reporter,
) -> RealiseReport | None:
    """`--check` the dirty steps of check kinds that have an output, setting `deterministic` and
    `checked_on`; an output made elsewhere may come with that machine's signed claim that it
    passed its --check (engine/remote/attest.py), taken instead of rebuilding it here. Returns
    the --check call's report (None when none ran)."""
    checks = [
        sid
        for sid in dirty
        if results[sid].status in ("built", "substituted", "reused") and graph.steps[sid].check
    ]
    if not checks:
        return None
    from engine.remote import attest

    verdicts, checked = attest.check(
        nix,
        {
            s: (
                built.drv_of[s],
                built.out_of[s],
                results[s].built_on,
                results[s].status == "built",
            )
            for s in checks
        },
    )
    if checked is not None and checked.nix_failed:
        return checked
    for sid in checks:
        results[sid].deterministic, results[sid].checked_on = verdicts[sid]
        report(sid, "checked" if results[sid].deterministic else "nondeterministic")
    return checked


def as_cached(r: StepResult) -> CachedResult:
    """A step's result as the index keeps it (the caller checked it has a `.drv` and an output)."""
    assert r.drv and r.out
    return CachedResult(
        key=r.key,
        step_id=r.id,
        drv=r.drv,
        out=r.out,
        outcome=r.outcome,
        deterministic=r.deterministic,
        built_on=r.built_on,
        checked_on=r.checked_on,
    )


def new_results(results: dict[str, StepResult], dirty: list[str]) -> list[CachedResult]:
    """The results of this run's builds worth caching (built or reused, with an output)."""
    worth = ("built", "substituted", "reused")
    kept = [results[sid] for sid in dirty]
    return [as_cached(r) for r in kept if r.status in worth and r.out and r.drv]
