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
REALISE_CHUNK dirty steps that is the path taken, realising a chunk at a time.
Failures are reported with their log tail, never cached, and their downstream steps are skipped.
Steps of `check` kinds are rebuilt once with `--check`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

from engine import __version__, expression
from engine.cache import CachedResult, Index, IndexView
from engine.errors import NixError
from engine.files import write_atomic
from engine.hashing import digest_bytes, key_digest
from engine.model import Graph, InputRef, Step

TYPE_CHECKING = False
if TYPE_CHECKING:  # engine.nix is imported only when something builds
    from engine.nix import Nix, RealiseReport

# Generated Nix files kept in STATE/build (the newest); `trace gc` removes them all.
KEEP_BUILD_FILES = 8

# One Nix process that evaluates and builds thousands of steps slows down step by step (it holds
# every step's evaluation and goal to the end: a 2000-step chain took 1.75x as long in one
# nix-build as instantiated, then realised 500 at a time; bench/README.md). Past this many dirty
# steps a run instantiates them once, then realises them in chunks of this size, in graph order.
REALISE_CHUNK = 500

# substituted: fetched from a binary cache whose signature Nix checked (counts like a build)
Status = Literal["cached", "built", "substituted", "reused", "failed", "skipped"]


# Plain dataclasses: a run builds thousands of these from values it computed itself, and the
# hot path (`trace run` of one change) imports no pydantic at all (tests/test_hotpath.py).


@dataclass(kw_only=True)
class StepPlan:
    id: str
    key: str
    dirty: bool
    reasons: list[str] = field(default_factory=list)
    components: dict[str, Any]
    prev_key: str | None = None


@dataclass(kw_only=True)
class Plan:
    graph: str
    steps: dict[str, StepPlan]
    order: list[str]

    @property
    def dirty(self) -> list[str]:
        return [s for s in self.order if self.steps[s].dirty]


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
    # and realise, see REALISE_CHUNK), collect
    # (reading outcomes), check (--check rebuilds), record
    timings: dict[str, float] = field(default_factory=dict)

    def count(self, status: Status) -> int:
        return sum(1 for s in self.steps.values() if s.status == status)

    @property
    def ok(self) -> bool:
        return all(s.status not in ("failed", "skipped") for s in self.steps.values())

    def rebuild_findings(self) -> list[str]:
        """What `--rebuild` found, one line per rebuilt step that did not match the store."""
        lines = []
        for r in self.steps.values():
            if r.rebuilt == "differs":
                lines.append(
                    f"REBUILT DIFFERENTLY {r.id}: its rebuild differs from {r.out}, which the "
                    "store keeps (Nix never replaces a valid output): the step is not "
                    "deterministic, or what it saw changed without changing its derivation"
                )
            elif r.rebuilt == "failed":
                lines.append(
                    f"REBUILD FAILED {r.id}: rebuilding it failed now, though {r.out} was built "
                    "before: what it needs changed outside its derivation (a host tool?)"
                )
        return lines

    @property
    def rebuilt_differently(self) -> list[str]:
        """`--rebuild` steps whose rebuild differed from, or failed to remake, the store's."""
        return [s.id for s in self.steps.values() if s.rebuilt not in (None, "same")]

    def to_json(self, indent: int | None = None) -> str:
        """`trace run --json`: every field, as pydantic's model_dump_json wrote it."""
        return json.dumps(asdict(self), indent=indent, ensure_ascii=False)


def graph_id(graph: Graph) -> str:
    """The graph's name in the index: its absolute entry path (plus `#variant`), so `trace gc`
    finds it whatever directory it runs from."""
    name = str(graph.entry.resolve())
    return f"{name}#{graph.variant}" if graph.variant else name


def _input_key(ref: InputRef) -> dict[str, str]:
    return {"path": ref.rel, "digest": ref.digest}


_ENGINE_ID: str | None = None


def engine_id() -> str:
    """The engine's version plus a digest of the modules that shape keys and derivations."""
    global _ENGINE_ID
    if _ENGINE_ID is None:
        from engine.paths import key_source_paths

        code = b"".join(p.read_bytes() for p in key_source_paths())
        _ENGINE_ID = f"{__version__}+{digest_bytes(code)[:16]}"
    return _ENGINE_ID


def components(graph: Graph, step: Step, keys: dict[str, str]) -> dict[str, Any]:
    kind = graph.kinds[step.kind]
    return {
        "engine": engine_id(),
        "id": step.id,
        "kind": step.kind,
        "template": kind.template_digest,
        "params": step.path_params,
        "inputs": {k: _input_key(v) for k, v in step.inputs.items()},
        "needs": {n: keys[n] for n in step.needs},
        "package_set": graph.package_set.digest if graph.package_set else None,
        "nix": {"extra_sandbox_paths": graph.nix.extra_sandbox_paths, "options": graph.nix.options},
        "sandbox": graph.nix.sandbox_identity,
        "repeat_index": step.repeat_index,
        "check": step.check,
    }


def _why(old: dict[str, Any] | None, new: dict[str, Any], changed_upstream: set[str]) -> list[str]:
    if old is None:
        return ["never built"]
    reasons: list[str] = []
    labels = {
        "engine": "engine version changed",
        "template": "template changed",
        "kind": "kind changed",
        "package_set": "package set changed",
        "nix": "nix settings changed",
        "sandbox": "the files behind [nix] extra_sandbox_paths changed",
        "check": "check setting changed",
    }
    for name, label in labels.items():
        if old.get(name) != new.get(name):
            reasons.append(label)
    for group, noun in (("params", "param"), ("inputs", "input")):
        o, n = old.get(group, {}), new.get(group, {})
        for name in sorted(set(o) | set(n)):
            if o.get(name) != n.get(name):
                reasons.append(f"{noun} '{name}' changed")
    o_needs, n_needs = old.get("needs", {}), new.get("needs", {})
    for name in sorted(set(o_needs) | set(n_needs)):
        if name not in o_needs:
            reasons.append(f"now needs '{name}'")
        elif name not in n_needs:
            reasons.append(f"no longer needs '{name}'")
        elif o_needs[name] != n_needs[name] or name in changed_upstream:
            reasons.append(f"upstream '{name}' changed")
    return reasons


def plan(
    graph: Graph, index: IndexView, known_keys: Mapping[str, str] | None = None
) -> tuple[Plan, dict[str, CachedResult]]:
    """`known_keys`: every step's key as a verified load cache recorded it for this very graph
    and engine (engine/loadcache.py), so hashing is skipped; components are still computed."""
    keys: dict[str, str] = {}
    comps: dict[str, dict[str, Any]] = {}
    for sid in graph.order:
        comp = components(graph, graph.steps[sid], keys)
        comps[sid] = comp
        keys[sid] = known_keys[sid] if known_keys is not None else key_digest(comp)
    cached = index.results(keys.values())
    gid = graph_id(graph)
    last = index.last_keys(gid)
    steps: dict[str, StepPlan] = {}
    for sid in graph.order:
        key = keys[sid]
        hit = cached.get(key)
        prev_key = last.get(sid)
        if hit is not None and os.path.exists(hit.out):
            steps[sid] = StepPlan(
                id=sid,
                key=key,
                dirty=False,
                reasons=[],
                components=comps[sid],
                prev_key=prev_key,
            )
            continue
        if hit is not None:
            reasons = ["output missing from the store"]
        elif prev_key == key:
            reasons = ["not built yet (the last run failed or was interrupted)"]
        else:
            dirty_up = {n for n in graph.steps[sid].needs if steps[n].dirty}
            old = index.last_components(gid, sid) if prev_key else None
            reasons = _why(old, comps[sid], dirty_up) or ["no cached result for this key"]
        steps[sid] = StepPlan(
            id=sid,
            key=key,
            dirty=True,
            reasons=reasons,
            components=comps[sid],
            prev_key=prev_key,
        )
    return Plan(graph=graph_id(graph), steps=steps, order=list(graph.order)), cached


def render_expression(
    graph: Graph, p: Plan, targets: list[str], known: Mapping[str, tuple[str, str]] | None = None
) -> tuple[str, dict[int, str]]:
    """One Nix file evaluating to the list of target derivations; also line -> step id.

    From scratch (every step of the targets' closure rendered) unless `known` names clean steps'
    existing .drv files (engine/expression.py)."""
    keys = {sid: sp.key for sid, sp in p.steps.items()}
    expr = expression.build(graph, keys, targets, known)
    return expr.text, expr.owner


def evaluate_before_state(graph: Graph, state: Path) -> None:
    """A run that is to make the state directory `state` evaluates its graph first (every step
    is dirty then: nothing is cached), so a graph that does not evaluate is refused (exit 2)
    before the directory exists; once it exists, the run evaluates under the index's lock,
    which writes nothing before the graph evaluated. One more nix-instantiate, on first runs
    only."""
    if os.path.lexists(state):
        return
    from engine.loader import check_path
    from engine.nix import Nix

    check_path(state, "state directory", key="--state-dir")
    with IndexView.open(state) as empty:
        p, _ = plan(graph, empty)
    if p.dirty:  # nothing kept: whether the directory can be made, the index says next
        evaluate(graph, p, p.dirty, Nix(graph.nix), None)


def known_drvs(p: Plan, cached: Mapping[str, CachedResult]) -> dict[str, tuple[str, str]]:
    """Clean step -> (.drv, output) of its cached result: what the frontier may import."""
    known: dict[str, tuple[str, str]] = {}
    for sid, sp in p.steps.items():
        hit = cached.get(sp.key)
        if not sp.dirty and hit is not None:
            known[sid] = (hit.drv, hit.out)
    return known


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
) -> RunResult:
    """Build every dirty step of the graph; answer clean steps from the index.

    `state` is a state directory (locked for the duration) or an Index the caller already holds.
    `rebuild`: step ids rebuilt with `--check` after the run, cached or not (`rebuild_steps`).
    """
    from engine.machine import load_machine

    load_machine()  # a bad machine config is refused before anything is written
    report = reporter or _default_reporter(progress)
    if isinstance(state, Index):
        return _run(graph, state, jobs, report, known_keys, rebuild)
    with Index(state, wait=wait) as index:
        return _run(graph, index, jobs, report, known_keys, rebuild)


def _run(
    graph: Graph,
    index: Index,
    jobs: int | None,
    report: Reporter,
    known_keys: Mapping[str, str] | None = None,
    rebuild: Collection[str] = (),
) -> RunResult:
    """Plan; answer the clean steps from the index; build the dirty ones (`_build`), read their
    results (`_collect`), `--check` the check kinds (`_check`) and the `rebuild` steps
    (`_rebuild`); record."""
    from engine.nix import Nix

    clock = _Clock()
    p, cached = plan(graph, index, known_keys)
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
        built = _build(_Job(graph, p, dirty, nix, index, known_drvs(p, cached), run, clock, report))
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
        rebuilt = _rebuild(graph, rebuild, results, Nix(graph.nix, jobs), report)
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
    """What building the dirty steps gave: each step's .drv and output, Nix's report, and the
    outputs that are not valid (a failed build may leave an unregistered directory)."""

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
    clock: _Clock
    report: Reporter


def _build(job: _Job) -> _Built:
    """Render the dirty frontier and build it with ONE nix-build (engine/nix.py Nix.build); past
    REALISE_CHUNK dirty steps, or when that evaluation failed, `_instantiate_and_realise`."""
    from engine.nix import output_of

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

    rep = job.nix.build(expr_file, on_event=_step_events(step_of, job.report), on_traced=on_traced)
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
        # An evaluation error (or Nix failing before evaluation ended): the two-process path
        # decides, blaming an evaluation error on its step (and trying a from-scratch
        # evaluation when a recorded .drv cannot be read); what nix-build built is reused.
        built = _instantiate_and_realise(job)
        built.report.built |= rep.built  # what nix-build did build before it failed
        built.report.built_on = {**rep.built_on, **built.report.built_on}
        return built
    out_of = {s: output_of(d) for s, d in drv_of.items()}
    # exit 0: every output is valid; otherwise ask (a failed build may leave an unregistered dir)
    invalid = job.nix.invalid([out_of[s] for s in dirty]) if rep.returncode != 0 else set()
    if rep.returncode != 0:
        run.nix_calls += 1
    clock.mark("build")
    return _Built(drv_of, out_of, rep, invalid)


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
    from engine.nix import RealiseReport, output_of

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
        run.nix_calls += 1
        total.merge(part)
        if part.nix_failed:
            raise part.nix_error("nix-store --realise")
        if part.returncode != 0:
            invalid |= nix.invalid([out_of[s] for s in todo])
            run.nix_calls += 1
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


def rebuild_steps(graph: Graph, names: Sequence[str], every: bool) -> list[str]:
    """The steps `--rebuild NAME…` / `--rebuild-all` name, in graph order: a repeated step's
    base id names all its repeats. An unknown name is a usage error (exit 2, before any work)."""
    from engine.errors import UsageError

    if every:
        return list(graph.order)
    chosen: set[str] = set()
    for name in names:
        found = [s for s in graph.order if s == name or graph.steps[s].base_id == name]
        if not found:
            known = ", ".join(sorted({graph.steps[s].base_id for s in graph.order}))
            raise UsageError(
                f"--rebuild {name}: the graph has no step of that name",
                hint=f"its steps: {known}",
            )
        chosen.update(found)
    return [s for s in graph.order if s in chosen]


def _rebuild(
    graph: Graph,
    targets: Collection[str],
    results: dict[str, StepResult],
    nix: Nix,
    report: Reporter,
) -> RealiseReport | None:
    """Rebuild the `targets` that have an output with `nix-store --realise --check`: Nix builds
    each again and compares the result with the output in the store, which it never replaces. A
    rebuild that differs (or fails) is reported on the step (`rebuilt`) and makes it count as
    not deterministic; one that matches confirms it. Returns Nix's report (None: none ran)."""
    todo = [
        sid
        for sid in graph.order
        if sid in targets and results[sid].drv and results[sid].status not in ("failed", "skipped")
    ]
    if not todo:
        return None
    rep = nix.realise([str(results[s].drv) for s in todo], check=True)
    if rep.nix_failed:
        return rep
    unexplained = rep.returncode != 0 and not rep.failed
    for sid in todo:
        r, drv = results[sid], str(results[sid].drv)
        if drv in rep.differs:
            r.rebuilt = "differs"
        elif drv in rep.failed or unexplained:
            r.rebuilt = "failed"
        else:
            r.rebuilt = "same"
        r.deterministic = r.rebuilt == "same"
        r.checked_on = rep.built_on.get(drv, r.checked_on)
        report(sid, "rebuilt" if r.rebuilt == "same" else f"rebuild {r.rebuilt}")
    return rep


class _Clock:
    """Seconds per phase of a run, for `trace run --timings` and the bench."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._t = time.perf_counter()

    def mark(self, phase: str | None) -> None:
        """The time since the last mark goes to `phase` (None: to nothing)."""
        now = time.perf_counter()
        if phase is not None:
            self.laps[phase] = self.laps.get(phase, 0.0) + now - self._t
        self._t = now


def new_results(results: dict[str, StepResult], dirty: list[str]) -> list[CachedResult]:
    """The results of this run's builds worth caching (built or reused, with an output)."""
    new: list[CachedResult] = []
    for sid in dirty:
        r = results[sid]
        if r.status in ("built", "substituted", "reused") and r.out and r.drv:
            new.append(
                CachedResult(
                    key=r.key,
                    step_id=sid,
                    drv=r.drv,
                    out=r.out,
                    outcome=r.outcome,
                    deterministic=r.deterministic,
                    built_on=r.built_on,
                    checked_on=r.checked_on,
                )
            )
    return new


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
    state_dir: Path | None,
    index: Index | None = None,
    known: Mapping[str, tuple[str, str]] | None = None,
) -> Evaluated:
    """Render the dirty steps into one file and instantiate it (one .drv per step); the file
    is kept in STATE/build once it evaluated (`state_dir` None: not kept).

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
        return full._replace(seconds=(seconds[0] + full.seconds[0], seconds[1] + full.seconds[1]))
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
