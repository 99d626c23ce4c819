"""Loading pipeline files into a validated, ordered graph of steps.

Reads TOML with tomli, follows `include`s, validates with pydantic, resolves parameters
(defaults, `{ var = ... }` references into the run's context, paths relative to the declaring
file) and orders the steps. Every error names the file, the key, the line where it can be found,
and what to do; nothing is built or written when loading fails.
"""

from __future__ import annotations

import dataclasses
import graphlib
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import InputError
from engine.graphfile import File, load_files, resolve_in, suggest
from engine.graphfile import find_line as find_line  # re-exported: engine.graph is its old home
from engine.graphparams import TYPE_NAMES, Resolver, check_type
from engine.graphstep import build_step as build_step  # re-exported: its old home
from engine.graphtypes import Graph, InputRef, Kind, NixConfig, Param, Step
from engine.hashing import StatCache, digest_bytes
from engine.loader import (
    check_path,
    check_regular,
    read_text,
    resolve,
)
from engine.paths import key_source_paths
from engine.plainfile import PlainNix
from engine.specrules import FORBIDDEN_OPTIONS, MAX_REPEAT, MAX_STEPS
from engine.steptable import PlainStep

if TYPE_CHECKING:  # pydantic is imported for a file that is not plainly valid (graphfile.py)
    from engine.spec import NixSettings, StepSpec

    Declared = StepSpec | PlainStep


def _merge_nix(files: list[File]) -> NixSettings | PlainNix:
    """The `[nix]` tables of the files merged, the entry file's last (it wins); plain when
    every table was (engine/plainfile.py), else validated by pydantic as a whole."""
    merged: dict[str, Any] = {}
    sandbox: list[str] = []
    plain = True
    for f in files:  # included files first, the entry file last: it wins
        if f.spec.nix is None:
            continue
        for opt in f.spec.nix.options:
            if opt.removeprefix("extra-") in FORBIDDEN_OPTIONS or opt in FORBIDDEN_OPTIONS:
                raise InputError(
                    f"[nix] options may not set '{opt}'",
                    file=f.path,
                    key=f"nix.options.{opt}",
                    line=f.line("nix", "options"),
                    hint="trace always builds in the Nix sandbox; binary caches, their keys and "
                    "remote builders are the machine's (Nix's configuration or trace's machine "
                    "config, docs/evidence.md), never a pipeline's; paths the sandbox needs go "
                    "in [nix] extra_sandbox_paths",
                )
        nix = f.spec.nix
        if isinstance(nix, PlainNix):
            data = nix.set_fields()
        else:
            data, plain = nix.model_dump(exclude_unset=True), False
        sandbox.extend(p for p in data.pop("extra_sandbox_paths", []) if p not in sandbox)
        opts = {**merged.get("options", {}), **data.pop("options", {})}
        merged.update(data)
        merged["options"] = opts
    merged["extra_sandbox_paths"] = sandbox
    if plain:  # every value as NixSettings gives it back: the merge of them too
        return PlainNix(merged)
    from engine.spec import NixSettings

    return NixSettings.model_validate(merged)


def load_graph(
    entry: Path,
    *,
    root: Path | None = None,
    context: Mapping[str, Any] | None = None,
    hasher: StatCache | None = None,
    variant: str | None = None,
) -> Graph:
    """Load, validate and resolve a pipeline file and its includes.

    `variant` names one instantiation of a shared pipeline (e.g. a candidate id), so the index
    keeps each one's latest keys apart (plan explanations, `trace gc`).
    """
    check_path(entry, "pipeline file")
    check_regular(entry, "pipeline file")
    entry = resolve(entry)
    root = (root or Path.cwd()).resolve()
    files = load_files(entry)
    r = Resolver(root, context or {}, hasher or StatCache())
    r.entry = entry
    kinds = _load_kinds(files, r)
    specs = _collect_steps(files, kinds, entry)
    expansions, repeated = _expand_repeats(specs, r)
    nix, package_set = _resolve_nix(files, r)
    steps = _build_steps(specs, kinds, expansions, repeated, r)
    return Graph(
        root=root,
        entry=entry,
        files=tuple(f.path for f in files),
        sources=tuple((f.path, f.digest) for f in files),
        kinds=kinds,
        steps=steps,
        order=_order(steps, specs),
        nix=nix,
        package_set=package_set,
        variant=variant,
        reads=_reads(files, kinds, r, package_set, nix.package_set_exclude),
    )


def _load_kinds(files: list[File], r: Resolver) -> dict[str, Kind]:
    kinds: dict[str, Kind] = {}
    kind_files: dict[str, File] = {}
    for f in files:
        for name, ks in f.spec.kinds.items():
            if name in kinds:
                raise InputError(
                    f"kind '{name}' is declared twice (also in {kind_files[name].path})",
                    file=f.path,
                    key=f"kinds.{name}",
                    line=f.line("kinds", name),
                    hint="rename one of them",
                )
            for pname, pspec in ks.params.items():
                if pspec.default is not None and not check_type(pspec.default, pspec):
                    raise InputError(
                        f"default of '{pname}' must be {TYPE_NAMES[pspec.type]}",
                        file=f.path,
                        key=f"kinds.{name}.params.{pname}.default",
                        line=f.line("kinds", name, "params", pname),
                        hint="fix the default or the declared type",
                    )
            tpath, text = _read_template(ks.template, f, name)
            kinds[name] = Kind(
                name=name,
                template_path=tpath,
                template_text=text,
                template_digest=digest_bytes(text.encode()),
                params={
                    pname: Param(
                        type=p.type,
                        default=p.default,
                        required=p.required,
                        description=p.description,
                    )
                    for pname, p in ks.params.items()
                },
                check=ks.check,
                source=f.path,
                inputs={
                    iname: r.path(value, f, "kinds", name, "inputs", iname)
                    for iname, value in ks.inputs.items()
                },
            )
            kind_files[name] = f
    return kinds


def _read_template(value: str, f: File, kind: str) -> tuple[Path, str]:
    """A kind's template text (compiled and linted on load, before anything is built: a changed
    template changes the key of every step that uses it)."""
    from engine.templatelint import lint_template

    tpath = resolve_in(value, f, "kinds", kind, "template")
    where = {"file": f.path, "key": f"kinds.{kind}.template", "line": f.line("kinds", kind)}
    if tpath.is_dir():
        raise InputError(
            f"template '{value}' is a directory ({tpath}), not a file",
            hint="name the template file itself (e.g. templates/step.nix.j2)",
            **where,  # type: ignore[arg-type]
        )
    if not tpath.exists():
        raise InputError(
            f"template '{value}' does not exist (looked for {tpath})",
            hint="create the template or fix the path (relative to this file)",
            **where,  # type: ignore[arg-type]
        )
    try:
        text = read_text(tpath, "template")
    except InputError as exc:
        if exc.line is not None:  # in the template's text: the template's file and line
            raise
        raise InputError(
            f"template '{value}' ({tpath}): {exc.message}",
            file=f.path,
            key=f"kinds.{kind}.template",
            line=f.line("kinds", kind),
            hint=exc.hint,
        ) from None
    lint_template(text, tpath)
    return tpath, text


def _collect_steps(
    files: list[File], kinds: dict[str, Kind], entry: Path
) -> dict[str, tuple[Declared, File]]:
    specs: dict[str, tuple[Declared, File]] = {}
    for f in files:
        for sid, ss in f.spec.steps.items():
            if sid in specs:
                raise InputError(
                    f"step '{sid}' is declared twice (also in {specs[sid][1].path})",
                    file=f.path,
                    key=f"steps.{sid}",
                    line=f.line("steps", sid),
                    hint="step ids must be unique across included files; rename one",
                )
            if ss.kind not in kinds:
                raise InputError(
                    f"step '{sid}' has unknown kind '{ss.kind}'",
                    file=f.path,
                    key=f"steps.{sid}.kind",
                    line=f.line("steps", sid, "kind"),
                    hint=suggest(ss.kind, list(kinds), "kind under [kinds.<name>]"),
                )
            specs[sid] = (ss, f)
    if not specs:
        raise InputError(
            "the graph has no steps (nothing to build)",
            file=entry,
            key="steps",
            hint="declare at least one [steps.<id>] with a kind, here or in an included file",
        )
    return specs


def _expand_repeats(
    specs: dict[str, tuple[Declared, File]], r: Resolver
) -> tuple[dict[str, tuple[str, ...]], set[str]]:
    """step id -> the ids it expands to (id@1..id@N when `repeat` is set); the repeated ids."""
    expansions: dict[str, tuple[str, ...]] = {}
    repeated: set[str] = set()
    total = 0
    for sid, (ss, f) in specs.items():
        rep: Any = 1 if isinstance(ss, PlainStep) else ss.repeat  # plain: no `repeat`
        if not isinstance(rep, int):  # validated: an int or a `{ var = ... }` reference
            rep = r.var(rep, f, "steps", sid, "repeat")
        if not isinstance(rep, int) or isinstance(rep, bool) or not 1 <= rep <= MAX_REPEAT:
            raise InputError(
                f"repeat must be an integer from 1 to {MAX_REPEAT}, got {rep!r}",
                file=f.path,
                key=f"steps.{sid}.repeat",
                line=f.line("steps", sid, "repeat"),
                hint=f"set repeat = 1 .. {MAX_REPEAT}",
            )
        total += rep
        if total > MAX_STEPS:
            raise InputError(
                f"the graph expands to more than {MAX_STEPS} steps",
                file=f.path,
                key=f"steps.{sid}.repeat",
                line=f.line("steps", sid, "repeat") or f.line("steps", sid),
                hint="split the graph or lower the repeats",
            )
        if not isinstance(ss, PlainStep) and "repeat" in ss.model_fields_set:
            repeated.add(sid)
            expansions[sid] = tuple(f"{sid}@{i}" for i in range(1, rep + 1))
        else:
            expansions[sid] = (sid,)
    return expansions, repeated


def nix_settings(entry: Path) -> tuple[NixSettings | PlainNix, Path | None]:
    """The merged `[nix]` settings of a pipeline file and its includes, and the file that set
    the package set (None when none did): what a graph generated for the same package set
    (`trace record`'s trials) builds with."""
    files = load_files(resolve(entry))
    owner = next((f.path for f in reversed(files) if f.spec.nix and f.spec.nix.package_set), None)
    return _merge_nix(files), owner


def _nix_config(nix: NixSettings | PlainNix, package_set: str | None) -> NixConfig:
    from engine import hostpaths

    return NixConfig(
        sandbox_identity=hostpaths.identity(nix.extra_sandbox_paths),
        package_set=package_set,
        package_set_exclude=list(nix.package_set_exclude),
        extra_sandbox_paths=list(nix.extra_sandbox_paths),
        options=dict(nix.options),
        jobs=nix.jobs,
    )


def _resolve_nix(files: list[File], r: Resolver) -> tuple[NixConfig, InputRef | None]:
    nix = _merge_nix(files)
    if nix.package_set is None:
        return _nix_config(nix, None), None
    owner = next(f for f in reversed(files) if f.spec.nix and f.spec.nix.package_set)
    ps = nix.package_set
    value = ps if isinstance(ps, str) else r.var(ps, owner, "nix", "package_set")
    package_set = r.package_set(str(value), nix.package_set_exclude, owner)
    return _nix_config(nix, str(package_set.path)), package_set


def _build_steps(
    specs: dict[str, tuple[Declared, File]],
    kinds: dict[str, Kind],
    expansions: dict[str, tuple[str, ...]],
    repeated: set[str],
    r: Resolver,
) -> dict[str, Step]:
    steps: dict[str, Step] = {}
    for sid, (ss, f) in specs.items():
        steps.update(build_step(sid, ss, f, kinds, expansions, repeated, specs, r))
    return steps


def _order(steps: dict[str, Step], specs: dict[str, tuple[Declared, File]]) -> tuple[str, ...]:
    sorter = graphlib.TopologicalSorter({s.id: s.needs for s in steps.values()})
    try:
        return tuple(sorter.static_order())
    except graphlib.CycleError as exc:
        cycle = [steps[c].base_id for c in exc.args[1]]
        first = specs[cycle[0]][1]
        raise InputError(
            "dependency cycle: " + " -> ".join(cycle),
            file=first.path,
            key=f"steps.{cycle[0]}.needs",
            line=first.line("steps", cycle[0], "needs"),
            hint="a step cannot need itself, directly or through others; remove one of these needs",
        ) from None


def _reads(
    files: list[File],
    kinds: dict[str, Kind],
    r: Resolver,
    package_set: InputRef | None,
    exclude: list[str],
) -> tuple[tuple[Path, tuple[str, ...]], ...]:
    paths = {f.path: () for f in files} | {k.template_path: () for k in kinds.values()}
    paths |= dict.fromkeys(key_source_paths(), ())
    reads: dict[Path, tuple[str, ...]] = {**paths, **dict.fromkeys(r.digested(), ())}
    if package_set is not None:
        reads[package_set.path] = tuple(exclude)
    return tuple(sorted(reads.items()))


def needed_by(graph: Graph, bases: Collection[str]) -> Graph:
    """The graph cut down to the steps whose base id is in `bases` and everything they need, in
    the same order: the part of a pipeline a test or a bench builds."""
    want = {s for s in graph.order if graph.steps[s].base_id in bases}
    todo = list(want)
    while todo:
        for need in graph.steps[todo.pop()].needs:
            if need not in want:
                want.add(need)
                todo.append(need)
    keep = tuple(s for s in graph.order if s in want)
    return dataclasses.replace(graph, steps={s: graph.steps[s] for s in keep}, order=keep)
