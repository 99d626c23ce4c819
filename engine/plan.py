"""Plan a graph: each step's content key, and clean or dirty with the reasons why.

A step's key is the digest of its components (kind, template digest, resolved params, input
digests, the keys of the steps it needs, package-set digest, Nix settings, engine version). A
step whose key has a result in the index and whose output still exists is clean: no Nix
evaluation at all. Executing the plan is engine/run.py.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from engine import __version__
from engine.cache import CachedResult, IndexView
from engine.graphtypes import Graph, InputRef, Step
from engine.hashing import digest_bytes, key_digest
from engine.plain import Plain


class StepPlan(Plain):
    """A step's key and, when dirty, why (its components: what the key was computed from).

    A plain class, not a dataclass (making one costs ~2-4M instructions at every import, issue
    30). `components` may be given as `make`, a function computing them on first use: with a
    load cache's known keys, the plan of 999 clean steps whose key did not move never needs
    theirs (engine/run.py records only those of keys that moved)."""

    FIELDS = ("id", "key", "dirty", "reasons", "components", "prev_key")
    __slots__ = ("_components", "_make", "dirty", "id", "key", "prev_key", "reasons")

    def __init__(
        self,
        *,
        id: str,
        key: str,
        dirty: bool,
        reasons: list[str] | None = None,
        components: dict[str, Any] | None = None,
        make: Callable[[], dict[str, Any]] | None = None,
        prev_key: str | None = None,
    ) -> None:
        if (components is None) == (make is None):
            raise TypeError("StepPlan needs one of components= and make=")
        self.id, self.key, self.dirty, self.prev_key = id, key, dirty, prev_key
        self.reasons: list[str] = [] if reasons is None else reasons
        self._components, self._make = components, make

    @property
    def components(self) -> dict[str, Any]:
        if self._components is None:
            assert self._make is not None
            self._components, self._make = self._make(), None
        return self._components


class Plan(Plain):
    """Every step of a graph planned, in build order."""

    FIELDS = ("graph", "steps", "order")
    __slots__ = FIELDS

    def __init__(self, *, graph: str, steps: dict[str, StepPlan], order: list[str]) -> None:
        self.graph, self.steps, self.order = graph, steps, order

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
    and engine (engine/loadcache.py), so hashing is skipped, and a step's components are made
    only when used (a dirty step's reasons, a key that moved, a caller that reads them)."""
    keys: dict[str, str] = {}
    comps: dict[str, dict[str, Any]] = {}
    if known_keys is None:
        for sid in graph.order:
            comps[sid] = components(graph, graph.steps[sid], keys)
            keys[sid] = key_digest(comps[sid])
    else:
        keys = {sid: known_keys[sid] for sid in graph.order}
    cached = index.results(keys.values())
    gid = graph_id(graph)
    last = index.last_keys(gid)
    steps: dict[str, StepPlan] = {}
    for sid in graph.order:
        key = keys[sid]
        hit = cached.get(key)
        prev_key = last.get(sid)
        comp = comps.get(sid)
        make = None if sid in comps else partial(components, graph, graph.steps[sid], keys)
        if hit is not None and os.path.exists(hit.out):
            steps[sid] = StepPlan(
                id=sid, key=key, dirty=False, components=comp, make=make, prev_key=prev_key
            )
            continue
        sp = StepPlan(id=sid, key=key, dirty=True, components=comp, make=make, prev_key=prev_key)
        if hit is not None:
            sp.reasons = ["output missing from the store"]
        elif prev_key == key:
            sp.reasons = ["not built yet (the last run failed or was interrupted)"]
        else:
            dirty_up = {n for n in graph.steps[sid].needs if steps[n].dirty}
            old = index.last_components(gid, sid) if prev_key else None
            sp.reasons = why_dirty(old, sp.components, dirty_up) or [
                "no cached result for this key"
            ]
        steps[sid] = sp
    return Plan(graph=gid, steps=steps, order=list(graph.order)), cached


def known_drvs(p: Plan, cached: Mapping[str, CachedResult]) -> dict[str, tuple[str, str]]:
    """Clean step -> (.drv, output) of its cached result: what the frontier may import."""
    known: dict[str, tuple[str, str]] = {}
    for sid, sp in p.steps.items():
        hit = cached.get(sp.key)
        if not sp.dirty and hit is not None:
            known[sid] = (hit.drv, hit.out)
    return known
