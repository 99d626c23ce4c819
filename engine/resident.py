"""`trace watch`'s resident graph (issue 30): the validated graph, every step's key, key components
and cached result kept in memory between rounds, so that an edit of one step's table in a
pipeline file re-validates and re-resolves that step only, re-keys it and the steps below it,
and plans without hashing or asking the index about the unchanged steps; engine/run.py then
renders the dirty frontier and imports every clean upstream step by its recorded `.drv`.

`update` answers None (the caller then runs a full plan: load, through the load cache, and
`engine.plan.plan`) unless every one of these holds:
- only pipeline files changed: a template, an input, the package set, the engine's own source,
  anything unreadable or an inotify loss is a full plan (engine/watch.py says which);
- a changed file is read whole (the loader's rules: regular file, UTF-8) and still splits into
  the same table headers in the same order; its old text split *faithfully* (every section
  parses on its own and their merge is what the whole file parsed to, checked when the resident
  was made from a full load, the file's digest being the one loaded); each changed section is a
  `[steps.<id>]` table (no `[steps.<id>.sub]` table in the file) that parses on its own to
  exactly that table and validates as one (plainly valid tables are
  checked without pydantic: engine/steptable.py);
- the step is one declared in that file, not repeated, keeps its `needs` (the graph's order is
  unchanged) and a kind the graph declares, and re-resolves without error (an error, or any
  doubt, is the full load's to report, with its usual message);
- the files behind `[nix] extra_sandbox_paths` have the identity the keys were made with.
A step is clean when its key has a result, remembered or in the index, and the result's output
exists, exactly as `engine.plan.plan` decides; its reasons when dirty are plan's too.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import tomli

from engine.cache import CachedResult, IndexView
from engine.graphtypes import Graph, Step
from engine.hashing import StatCache, digest_bytes, key_digest
from engine.plain import Frozen
from engine.plan import Plan, StepPlan, components, graph_id, why_dirty
from engine.steptable import DeclaredStep, plain_step

TYPE_CHECKING = False
if TYPE_CHECKING:
    from engine.run import RunResult

_OPENS = re.compile(r"[ \t]*\[")  # a line that may open a table
_HEADER = re.compile(
    r"[ \t]*(\[\[?)[ \t]*([A-Za-z0-9_-]+(?:[ \t]*\.[ \t]*[A-Za-z0-9_-]+)*)[ \t]*\]\]?[ \t]*(#.*)?"
)
_STEP = re.compile(r"steps\.([A-Za-z][A-Za-z0-9_-]*)")
OK = ("cached", "built", "substituted", "reused")

Section = tuple[str | None, str]  # the table header ('[[' first for an array) or None, its text


def _lines(text: str) -> list[str]:
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def sections(text: str) -> list[Section] | None:
    """The text cut before every table header; None when a line opening with '[' is not a
    plain header (bare keys only: anything else is not split)."""
    out: list[Section] = []
    head: str | None = None
    cur: list[str] = []
    for line in _lines(text):
        if _OPENS.match(line):
            m = _HEADER.fullmatch(line.rstrip("\r\n"))
            if m is None:
                return None
            out.append((head, "".join(cur)))
            brackets = "[[" if m.group(1) == "[[" else ""
            head, cur = brackets + re.sub(r"[ \t]", "", m.group(2)), []
        cur.append(line)
    out.append((head, "".join(cur)))
    return out


def _parse(text: str) -> dict[str, Any] | None:
    try:
        return tomli.loads(text)
    except (tomli.TOMLDecodeError, RecursionError):
        return None


def _merge(into: dict[str, Any], part: Mapping[str, Any]) -> bool:
    """Merge tables key by key; False when both sides hold the same non-table key."""
    for k, v in part.items():
        if k not in into:
            into[k] = v
        elif not (isinstance(into[k], dict) and isinstance(v, dict) and _merge(into[k], v)):
            return False
    return True


def faithful(text: str) -> list[Section] | None:
    """The sections of `text`, when parsing each on its own and merging gives the whole parse."""
    secs = sections(text)
    whole = _parse(text)
    if secs is None or whole is None:
        return None
    heads = [h for h, _ in secs if h is not None]
    if len(heads) != len(set(heads)):
        return None
    merged: dict[str, Any] = {}
    for _, part in secs:
        parsed = _parse(part)
        if parsed is None or not _merge(merged, parsed):
            return None
    return secs if merged == whole else None


class _Source(Frozen):
    """A pipeline file as the resident graph last resolved it (sections None: never updated in
    place, every edit of it is a full plan). A plain class: a dataclass costs ~2-4M instructions
    to make at import (issue 30)."""

    FIELDS = ("text", "sections")
    __slots__ = FIELDS

    def __init__(self, text: str, sections: tuple[Section, ...] | None) -> None:
        self.text, self.sections = text, sections

    def starts(self) -> list[int]:
        """Where each section begins in `text`, then the text's length."""
        return [0, *itertools.accumulate(len(t) for _, t in self.sections or ())]

    def headers(self) -> dict[str, int]:
        """Each table header's line, from the sections (what graphfile.File.header_line maps)."""
        # lines as str.splitlines counts them (as the loader's File does: U+2028 too)
        counts = (len(t.splitlines()) for _, t in self.sections or ())
        lines = list(itertools.accumulate(counts, initial=1))
        return {
            h: n for (h, _), n in zip(self.sections or (), lines[:-1], strict=True) if h is not None
        }


def _common(a: str, b: str, tail: bool = False) -> int:
    """How many characters `a` and `b` share at their start (at their end: `tail`), found by
    bisection on slices (compared in C)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        same = a[len(a) - mid :] == b[len(b) - mid :] if tail else a[:mid] == b[:mid]
        lo, hi = (mid, hi) if same else (lo, mid - 1)
    return lo


def splice(old: _Source, text: str) -> tuple[_Source, list[int]] | None:
    """`text` (the file now) split into sections by re-splitting only the part that differs
    from `old`; with the indexes of the sections whose text changed. None when the headers
    around the change are not the ones they were."""
    assert old.sections is not None
    secs, starts = old.sections, old.starts()
    p = _common(old.text, text)
    end = len(old.text) - _common(old.text[p:], text[p:], tail=True)
    i = max(0, bisect.bisect_right(starts, p) - 1)
    i -= 1 if i > 0 and starts[i] == p else 0  # an insertion at a boundary: both sides
    j = min(len(secs) - 1, bisect.bisect_right(starts, end) - 1)
    delta = len(text) - len(old.text)
    mid = sections(text[starts[i] : starts[j + 1] + delta])
    if mid is None:
        return None
    if secs[i][0] is not None:  # the slice begins with that header: no root section
        if mid[0] != (None, ""):
            return None
        mid = mid[1:]
    if [h for h, _ in mid] != [h for h, _ in secs[i : j + 1]]:
        return None
    changed = [i + k for k, sec in enumerate(mid) if sec != secs[i + k]]
    return _Source(text, (*secs[:i], *mid, *secs[j + 1 :])), changed


def _below(graph: Graph) -> dict[str, tuple[str, ...]]:
    below: dict[str, list[str]] = {sid: [] for sid in graph.order}
    for sid in graph.order:
        for need in graph.steps[sid].needs:
            below[need].append(sid)
    return {sid: tuple(b) for sid, b in below.items()}


def split_of(graph: Graph) -> dict[Path, tuple[Section, ...] | None]:
    """The sections of each pipeline file of a fully loaded graph (None: not split faithfully,
    or no longer the bytes loaded)."""
    out: dict[Path, tuple[Section, ...] | None] = {}
    for path, digest in graph.sources:
        src = _source(path, digest)
        out[path] = None if src is None else src.sections
    return out


def _read(path: Path) -> tuple[bytes, str] | None:
    from engine.errors import InputError
    from engine.loader import decode, read_bytes

    try:
        data = read_bytes(path, "pipeline file")
        return data, decode(data, path, "pipeline file")
    except InputError:
        return None


def _file(path: Path, text: str, digest: str, headers: dict[str, int]) -> Any:
    """A graphfile.File for re-resolving steps of `text` (its lines; it has no spec)."""
    from engine.graphfile import File

    return File(path, text, None, digest, headers)


def _source(path: Path, digest: str) -> _Source | None:
    """The file as loaded (its digest the one the load recorded), split if faithful."""
    got = _read(path)
    if got is None or digest_bytes(got[0]) != digest:
        return None
    secs = faithful(got[1])
    return _Source(got[1], None if secs is None else tuple(secs))


def _validated(raw: dict[str, Any], sid: str) -> DeclaredStep | None:
    """A step table that is not plainly valid (engine/steptable.py), validated by pydantic as
    the whole file's load would; None when refused or repeated (the full load reports it)."""
    from pydantic import ValidationError

    from engine.spec import PipelineFile

    try:
        ss = PipelineFile.model_validate(raw).steps[sid]
    except ValidationError:
        return None
    return None if "repeat" in ss.model_fields_set else ss


class Resident:
    """A graph, its keys and components, and the results of its clean steps (by key); `below`:
    the steps that need each step; `recorded`: each step's key and components as the index's
    last_keys holds them (the last round's); `clean`: the last plan's clean steps, reused while
    their key stays and their output exists. A plain class: a dataclass costs ~2-4M
    instructions to make at import, on every trace process (issue 30)."""

    __slots__ = ("below", "clean", "comps", "graph", "keys", "recorded", "results", "sources")

    def __init__(
        self,
        graph: Graph,
        keys: dict[str, str],
        comps: dict[str, dict[str, Any]],
        results: dict[str, CachedResult],
        sources: dict[Path, _Source | None],
        below: Mapping[str, tuple[str, ...]],
        recorded: tuple[Mapping[str, str], Mapping[str, dict[str, Any]]] = ({}, {}),
        clean: Mapping[str, StepPlan] | None = None,
    ) -> None:
        self.graph, self.keys, self.comps, self.results = graph, keys, comps, results
        self.sources, self.below, self.recorded = sources, below, recorded
        self.clean: Mapping[str, StepPlan] = {} if clean is None else clean

    def _but(self, **changes: Any) -> Resident:
        """A copy with `changes` (as dataclasses.replace made one)."""
        new = Resident.__new__(Resident)
        for name in Resident.__slots__:
            setattr(new, name, changes[name] if name in changes else getattr(self, name))
        return new

    @classmethod
    def make(cls, graph: Graph, result: RunResult) -> Resident:
        """From a full round: the graph it loaded and what it planned and built."""
        keys = {sid: result.steps[sid].key for sid in graph.order}
        comps = {sid: components(graph, graph.steps[sid], keys) for sid in graph.order}
        sources = {path: _source(path, digest) for path, digest in graph.sources}
        return cls(graph, keys, comps, {}, sources, _below(graph)).absorb(result)

    @classmethod
    def cached(
        cls,
        graph: Graph,
        keys: dict[str, str],
        split: Mapping[Path, tuple[Section, ...] | None],
    ) -> Resident:
        """From the load cache (engine/loadcache.py): a graph, its keys and its pipeline files'
        sections as stored (authenticated there); components are made when needed."""
        sources = {
            path: None if secs is None else _Source("".join(t for _, t in secs), secs)
            for path, secs in split.items()
        }
        return cls(graph, keys, {}, {}, sources, _below(graph))

    def split(self) -> dict[Path, tuple[Section, ...] | None]:
        """What the load cache stores of the pipeline files: their sections."""
        return {p: None if s is None else s.sections for p, s in self.sources.items()}

    def absorb(self, result: RunResult) -> Resident:
        """After a round ran this resident's plan: its results remembered, its keys recorded."""
        from engine.run import as_cached

        results = {
            r.key: as_cached(r) for r in result.steps.values() if r.status in OK and r.drv and r.out
        }
        return self._but(results=results, recorded=(self.keys, self.comps))

    def update(self, changed: Iterable[str], hasher: StatCache) -> Resident | None:
        """The resident graph after edits of `changed` (paths), or None: a full plan."""
        from engine import hostpaths

        paths = [Path(p) for p in changed]
        if not paths or any(self.sources.get(p) is None for p in paths):
            return None
        nix = self.graph.nix
        if hostpaths.identity(nix.extra_sandbox_paths) != nix.sandbox_identity:
            return None
        steps: dict[str, Step] = {}
        sources = dict(self.sources)
        digests = dict(self.graph.sources)
        reads = dict(self.graph.reads)
        for path in paths:
            got = self._edited(path, hasher, steps)
            if got is None:
                return None
            sources[path], digests[path], more = got
            reads.update(dict.fromkeys(more, ()))
        graph = dataclasses.replace(
            self.graph,
            steps={**self.graph.steps, **steps},
            sources=tuple(digests.items()),
            reads=tuple(sorted(reads.items())),
        )
        return self._rekey(graph, sources, set(steps))

    def _edited(
        self, path: Path, hasher: StatCache, steps: dict[str, Step]
    ) -> tuple[_Source, str, list[Path]] | None:
        """One edited pipeline file: its steps re-resolved into `steps`; its new source, digest
        and the inputs those steps read."""
        from engine.graphparams import Resolver

        old = self.sources[path]
        got = _read(path)
        if old is None or old.sections is None or got is None:
            return None
        data, text = got
        spliced = splice(old, text)
        if spliced is None:
            return None
        new, changed = spliced
        assert new.sections is not None
        headers = new.headers()
        f = _file(path, text, digest_bytes(data), headers)
        r = Resolver(self.graph.root, {}, hasher)
        r.entry = self.graph.entry
        for idx in changed:
            head = new.sections[idx][0]
            m = None if head is None else _STEP.fullmatch(head)
            if m is None or any(h.removeprefix("[[").startswith(m.group(0) + ".") for h in headers):
                return None
            step = self._restep(m.group(1), new.sections[idx][1], f, r)
            if step is None:
                return None
            steps[step.id] = step
        for s in self.graph.steps.values():  # lines moved by the edit: the other steps' too
            line = headers.get(f"steps.{s.base_id}")
            if s.line != line and s.id not in steps and s.source == path:  # Path == last: costly
                steps[s.id] = dataclasses.replace(s, line=line)
        return new, f.digest, r.digested()

    def _restep(self, sid: str, part: str, f: Any, r: Any) -> Step | None:
        """The step of an edited `[steps.<sid>]` section, or None when it cannot be made here."""
        from engine.errors import TraceError
        from engine.graphstep import build_step
        from engine.loader import too_deep

        old = self.graph.steps.get(sid)
        raw = _parse(part)
        if old is None or old.source != f.path or old.repeat_index is not None or raw is None:
            return None
        table = raw.get("steps", {}).get(sid) if set(raw) == {"steps"} else None
        if not isinstance(table, dict) or set(raw["steps"]) != {sid} or too_deep(raw):
            return None
        ss = plain_step(table) or _validated(raw, sid)
        if ss is None or ss.kind not in self.graph.kinds:
            return None
        if tuple(ss.needs) != tuple(old.needs_base) or old.needs != tuple(old.needs_base):
            return None
        expansions = {n: (n,) for n in (sid, *ss.needs)}
        try:
            made = build_step(sid, ss, f, self.graph.kinds, expansions, (), self.graph.steps, r)
        except TraceError:
            return None
        return made[sid]

    def _rekey(
        self, graph: Graph, sources: dict[Path, _Source | None], edited: set[str]
    ) -> Resident:
        """Keys and components of the edited steps and, where a key moved, of those below."""
        keys, comps = dict(self.keys), dict(self.comps)
        todo = set(edited)
        for sid in graph.order:  # topological: a step's needs come before it
            if sid not in todo:
                continue
            comp = components(graph, graph.steps[sid], keys)
            was = comps.get(sid) or components(self.graph, self.graph.steps[sid], self.keys)
            if comp != was:
                keys[sid], comps[sid] = key_digest(comp), comp
                todo.update(self.below[sid])
        return self._but(graph=graph, keys=keys, comps=comps, sources=sources)

    def plan(self, index: IndexView) -> tuple[Plan, dict[str, CachedResult]]:
        """`engine.plan.plan` of this graph, from memory: the index is asked only about keys
        without a remembered result; every clean step's output is checked to exist."""
        missing = [k for k in self.keys.values() if k not in self.results]
        cached = {**self.results, **(index.results(missing) if missing else {})}
        steps: dict[str, StepPlan] = {}
        for sid in self.graph.order:
            steps[sid] = self._step_plan(sid, cached.get(self.keys[sid]), steps)
        p = Plan(graph=graph_id(self.graph), steps=steps, order=list(self.graph.order))
        clean = {sid: sp for sid, sp in steps.items() if not sp.dirty}
        self.clean = clean  # plan objects to reuse next round (their key and output checked)
        return p, cached

    def _step_plan(
        self, sid: str, hit: CachedResult | None, steps: Mapping[str, StepPlan]
    ) -> StepPlan:
        key, comp = self.keys[sid], self.comps[sid]
        prev = self.recorded[0].get(sid)  # the key the index recorded last
        if hit is not None and os.path.exists(hit.out):
            was = self.clean.get(sid)
            if was is not None and was.key == key and was.prev_key == prev:
                return was
            return StepPlan(id=sid, key=key, dirty=False, components=comp, prev_key=prev)
        if hit is not None:
            reasons = ["output missing from the store"]
        elif prev == key:
            reasons = ["not built yet (the last run failed or was interrupted)"]
        else:
            up = {n for n in self.graph.steps[sid].needs if steps[n].dirty}
            old = self.recorded[1].get(sid) if prev else None
            reasons = why_dirty(old, comp, up) or ["no cached result for this key"]
        return StepPlan(
            id=sid, key=key, dirty=True, reasons=reasons, components=comp, prev_key=prev
        )
