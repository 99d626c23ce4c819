"""Plan a graph: each step's content key, and clean or dirty with the reasons why.

A step's key is the digest of its components (kind, template digest, resolved params, input
digests, the keys of the steps it needs, package-set digest, Nix settings, engine version). A
step whose key has a result in the index and whose output still exists is clean: no Nix
evaluation at all. Executing the plan is engine/run.py.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine import __version__
from engine.cache import CachedResult, IndexView
from engine.graphtypes import Graph, InputRef, Step
from engine.hashing import digest_bytes, key_digest


@dataclass(kw_only=True)
class StepPlan:
    """A step's key and, when dirty, why (its components: what the key was computed from)."""

    id: str
    key: str
    dirty: bool
    reasons: list[str] = field(default_factory=list)
    components: dict[str, Any]
    prev_key: str | None = None


@dataclass(kw_only=True)
class Plan:
    """Every step of a graph planned, in build order."""

    graph: str
    steps: dict[str, StepPlan]
    order: list[str]

    @property
    def dirty(self) -> list[str]:
        return [s for s in self.order if self.steps[s].dirty]


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


def why_dirty(
    old: dict[str, Any] | None, new: dict[str, Any], changed_upstream: set[str]
) -> list[str]:
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
            reasons = why_dirty(old, comps[sid], dirty_up) or ["no cached result for this key"]
        steps[sid] = StepPlan(
            id=sid,
            key=key,
            dirty=True,
            reasons=reasons,
            components=comps[sid],
            prev_key=prev_key,
        )
    return Plan(graph=graph_id(graph), steps=steps, order=list(graph.order)), cached


def known_drvs(p: Plan, cached: Mapping[str, CachedResult]) -> dict[str, tuple[str, str]]:
    """Clean step -> (.drv, output) of its cached result: what the frontier may import."""
    known: dict[str, tuple[str, str]] = {}
    for sid, sp in p.steps.items():
        hit = cached.get(sp.key)
        if not sp.dirty and hit is not None:
            known[sid] = (hit.drv, hit.out)
    return known
