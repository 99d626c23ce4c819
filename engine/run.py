"""Plan and execute a graph: content keys, clean/dirty with reasons, one nix call for the rest.

Plan: each step's key is the digest of its components (kind, template digest, resolved params,
input digests, the keys of the steps it needs, package-set digest, Nix settings, engine version).
A step whose key has a result in the index and whose output still exists is clean: no Nix
evaluation at all. Execute: the dirty steps and their upstream closure are rendered into one Nix
file, evaluated by one `nix-instantiate`, and the dirty derivations built by one
`nix-store --realise --keep-going`. Failures are reported with their log tail, never cached, and
their downstream steps are skipped. Steps of `check` kinds are rebuilt once with `--check`.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from engine import __version__
from engine.cache import CachedResult, Index
from engine.errors import InputError, NixError
from engine.hashing import digest_bytes, key_digest
from engine.model import Graph, InputRef, Step
from engine.render import NixExpr, nix_path, nix_string, render

# Generated Nix files kept in STATE/build (the newest); `trace gc` removes them all.
KEEP_BUILD_FILES = 8

# substituted: fetched from a binary cache whose signature Nix checked (counts like a build)
Status = Literal["cached", "built", "substituted", "reused", "failed", "skipped"]


class StepPlan(BaseModel):
    id: str
    key: str
    dirty: bool
    reasons: list[str] = Field(default_factory=list)
    components: dict[str, Any]
    prev_key: str | None = None


class Plan(BaseModel):
    graph: str
    steps: dict[str, StepPlan]
    order: list[str]

    @property
    def dirty(self) -> list[str]:
        return [s for s in self.order if self.steps[s].dirty]


class StepResult(BaseModel):
    id: str
    key: str
    status: Status
    drv: str | None = None
    out: str | None = None
    outcome: Any = None
    deterministic: bool | None = None
    log_tail: str | None = None
    reasons: list[str] = Field(default_factory=list)
    built_on: str | None = Field(
        default=None,
        description="where this run's result came from: 'local', a remote builder's URI, or "
        "'cache:<url>' (substituted); None when it was not made by this run",
    )
    checked_on: str | None = Field(
        default=None, description="the machine that did the --check rebuild ('local' or a URI)"
    )


class RunResult(BaseModel):
    graph: str
    steps: dict[str, StepResult]
    evaluated: bool = False
    nix_calls: int = 0

    def count(self, status: Status) -> int:
        return sum(1 for s in self.steps.values() if s.status == status)

    @property
    def ok(self) -> bool:
        return all(s.status not in ("failed", "skipped") for s in self.steps.values())


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
        "check": "check setting changed",
    }
    for field, label in labels.items():
        if old.get(field) != new.get(field):
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


def plan(graph: Graph, index: Index) -> tuple[Plan, dict[str, CachedResult]]:
    keys: dict[str, str] = {}
    comps: dict[str, dict[str, Any]] = {}
    for sid in graph.order:
        comp = components(graph, graph.steps[sid], keys)
        comps[sid] = comp
        keys[sid] = key_digest(comp)
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
                id=sid, key=key, dirty=False, components=comps[sid], prev_key=prev_key
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
            id=sid, key=key, dirty=True, reasons=reasons, components=comps[sid], prev_key=prev_key
        )
    return Plan(graph=graph_id(graph), steps=steps, order=list(graph.order)), cached


def _context(graph: Graph, step: Step, keys: dict[str, str]) -> dict[str, Any]:
    def ref(sid: str) -> NixExpr:
        return NixExpr(f"steps.{nix_string(sid)}")

    params: dict[str, Any] = {}
    for name, value in step.params.items():
        if isinstance(value, InputRef):
            params[name] = nix_path(str(value.path))
        elif isinstance(value, list) and value and isinstance(value[0], InputRef):
            params[name] = [nix_path(str(v.path)) for v in value]
        else:
            params[name] = value
    needs: dict[str, Any] = {}
    for base, ids in step.needs_base.items():
        repeated = graph.steps[ids[0]].repeat_index is not None
        needs[base] = [ref(i) for i in ids] if repeated else ref(ids[0])
    return {
        "params": params,
        "inputs": {k: nix_path(str(v.path)) for k, v in step.inputs.items()},
        "needs": needs,
        "step": {"id": step.id, "key": keys[step.id], "base_id": step.base_id},
        "repeat_index": step.repeat_index,
    }


def _closure(graph: Graph, targets: list[str]) -> list[str]:
    seen: set[str] = set()
    stack = list(targets)
    while stack:
        sid = stack.pop()
        if sid in seen:
            continue
        seen.add(sid)
        stack.extend(graph.steps[sid].needs)
    return [s for s in graph.order if s in seen]


def render_expression(graph: Graph, p: Plan, targets: list[str]) -> tuple[str, dict[int, str]]:
    """One Nix file evaluating to the list of target derivations; also line -> step id."""
    keys = {sid: sp.key for sid, sp in p.steps.items()}
    if graph.package_set is not None:
        pkgs = f"import (/. + {nix_string(str(graph.package_set.path))}) {{ }}"
    else:
        pkgs = 'throw "this pipeline declares no [nix] package_set"'
    lines = ["# generated by trace; do not edit", "let", f"  pkgs = {pkgs};", "  steps = {"]
    owner: dict[int, str] = {}
    for sid in _closure(graph, targets):
        step = graph.steps[sid]
        kind = graph.kinds[step.kind]
        try:
            body = render(kind.template_text, str(kind.template_path), _context(graph, step, keys))
        except Exception as exc:  # jinja2: syntax errors, undefined names, filters, types
            what = (
                "does not compile"
                if type(exc).__name__ == "TemplateSyntaxError"
                else (f"does not render for step '{sid}'")
            )
            raise InputError(
                f"template {what}: {getattr(exc, 'message', None) or exc}",
                file=kind.template_path,
                line=getattr(exc, "lineno", None) or _template_line(exc),
                key=f"steps.{step.base_id}",
                hint=f"fix the template or the step's params (step declared in {step.source})",
            ) from None
        start = len(lines) + 1
        lines.append(f"    {nix_string(sid)} = (")
        # The body goes in byte for byte: split on "\n" only (as Nix counts lines), never
        # re-indented (str.splitlines() would also break at U+2028, \v, \x1c, \x85 ... inside a
        # rendered string and so change a value's bytes).
        lines.extend(body.rstrip("\n").split("\n"))
        lines.append("    );")
        for n in range(start, len(lines) + 1):
            owner[n] = sid
    lines.append("  };")
    lines.append("in [")
    lines.extend(f"  steps.{nix_string(t)}" for t in targets)
    lines.append("]")
    return "\n".join(lines) + "\n", owner


def _template_line(exc: BaseException) -> int | None:
    """The template line a jinja2 runtime error happened on (jinja maps its frames to it)."""
    line = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


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
) -> RunResult:
    """Build every dirty step of the graph; answer clean steps from the index.

    `state` is a state directory (locked for the duration) or an Index the caller already holds.
    """
    from engine.remote.machine import load_machine

    load_machine()  # a bad machine config is refused before anything is written
    if isinstance(state, Index):
        return _run(graph, state, jobs, reporter or _default_reporter(progress))
    with Index(state, wait=wait) as index:
        return _run(graph, index, jobs, reporter or _default_reporter(progress))


def _run(graph: Graph, index: Index, jobs: int | None, report: Reporter) -> RunResult:
    from engine.nix import Nix, output_of

    state_dir = index.state_dir
    p, cached = plan(graph, index)
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
            )
            report(sid, "cached")
    dirty = p.dirty
    run = RunResult(graph=p.graph, steps={})
    last = {
        sid: (sp.key, sid, sp.components) for sid, sp in p.steps.items() if sp.key != sp.prev_key
    }
    if not dirty:
        index.record([], last, p.graph)
        run.steps = results
        return run

    nix = Nix(graph.nix, jobs)
    for sid in dirty:
        report(sid, "queued")
    _, drvs = evaluate(graph, p, dirty, nix, state_dir, index)
    run.evaluated = True
    run.nix_calls += 1
    drv_of = dict(zip(dirty, drvs, strict=True))
    step_of = {d: s for s, d in drv_of.items()}
    out_of = {s: output_of(d) for s, d in drv_of.items()}

    def on_event(event: str, drv: str) -> None:
        sid = step_of.get(drv)
        if sid is not None:
            report(sid, event)

    rep = nix.realise([drv_of[s] for s in dirty], on_event=on_event)
    run.nix_calls += 1
    if rep.nix_failed:  # whatever did build is kept in the store: the next run reuses it
        raise rep.nix_error("nix-store --realise")
    built, failed_drvs = rep.built, rep.failed
    invalid = nix.invalid([out_of[s] for s in dirty])

    failed_steps: set[str] = set()
    for sid in dirty:
        sp = p.steps[sid]
        drv, out = drv_of[sid], out_of[sid]
        if out not in invalid:
            status: Status = "built" if drv in built else "reused"
            origin = rep.built_on.get(drv)
            if drv not in built and out in rep.substituted:
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
            if upstream_failed and drv not in failed_drvs:
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
                log = nix.read_log(drv) if drv in failed_drvs else ""
                if not log:
                    inner = sorted(failed_drvs - set(drv_of.values()))
                    log = "\n".join(nix.read_log(d) for d in inner[:1]) if inner else ""
                res = StepResult(
                    id=sid, key=sp.key, status="failed", drv=drv, reasons=sp.reasons, log_tail=log
                )
                report(sid, "failed")
            failed_steps.add(sid)
        results[sid] = res

    checks = [
        sid
        for sid in dirty
        if results[sid].status in ("built", "substituted", "reused") and graph.steps[sid].check
    ]
    if checks:
        rep = nix.realise([drv_of[s] for s in checks], check=True)
        run.nix_calls += 1
        if rep.nix_failed:
            index.record(new_results(results, dirty), last, p.graph)
            raise rep.nix_error("nix-store --realise --check")
        # A failed --check that names no derivation (e.g. a rebuild that itself failed) proves
        # nothing reproducible: none of the checked steps counts as deterministic then.
        unexplained = rep.returncode != 0 and not rep.failed
        for sid in checks:
            results[sid].deterministic = drv_of[sid] not in rep.failed and not unexplained
            results[sid].checked_on = rep.built_on.get(drv_of[sid])
            report(sid, "checked" if results[sid].deterministic else "nondeterministic")

    index.record(new_results(results, dirty), last, p.graph)
    run.steps = {sid: results[sid] for sid in p.order}
    return run


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
                )
            )
    return new


def evaluate(
    graph: Graph, p: Plan, dirty: list[str], nix: Any, state_dir: Path, index: Index | None = None
) -> tuple[Path, list[str]]:
    """Render the dirty steps into one file and instantiate it: (file, one .drv per step).

    An evaluation error is bad input (exit 2) blamed on a step and its template; a failure of Nix
    itself is a NixError (exit 4)."""
    from engine import blame

    text, owner = render_expression(graph, p, dirty)
    expr_file = state_dir / "build" / f"{digest_bytes(text.encode())[:32]}.nix"
    _write_atomic(expr_file, text)
    if index is not None:
        index.prune_build_files(keep=KEEP_BUILD_FILES)  # the newest, to read after a failure
    rc, drvs, err = nix.instantiate(expr_file)
    if rc == 0 and len(drvs) == len(dirty):
        return expr_file, drvs
    failure = blame.nix_failure(rc, err, "nix-instantiate")
    if failure is not None:
        raise failure
    if rc == 0:
        raise NixError(f"nix-instantiate printed {len(drvs)} derivations for {len(dirty)} steps")

    def run_file(path: Path) -> tuple[int, str]:
        code, _, e = nix.instantiate(path)
        return code, e

    evaluator = blame.scratch_evaluator(
        lambda prefix: render_expression(graph, p, prefix)[0], run_file, expr_file.parent
    )
    starts: dict[str, int] = {}
    for line, sid in owner.items():
        starts[sid] = min(line, starts.get(sid, line))
    raise blame.blame(graph, dirty, err, owner, starts, expr_file, evaluator)
