"""Loading pipeline files into a validated, ordered graph of steps.

Reads TOML with tomli, follows `include`s, validates with pydantic, resolves parameters
(defaults, `{ var = ... }` references into the run's context, paths relative to the declaring
file) and orders the steps. Every error names the file, the key, the line where it can be found,
and what to do; nothing is built or written when loading fails.
"""

from __future__ import annotations

import contextlib
import difflib
import graphlib
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from engine.errors import InputError
from engine.hashing import StatCache, digest_bytes, tree_digest
from engine.loader import (
    check_path,
    check_regular,
    decode,
    parse_toml,
    read_bytes,
    read_text,
    resolve,
)
from engine.model import Graph, InputRef, Kind, NixConfig, Param, Step
from engine.paths import PREFIX, data_dir, key_source_paths, resolve_ref
from engine.spec import (
    FORBIDDEN_OPTIONS,
    MAX_REPEAT,
    MAX_STEPS,
    NixSettings,
    ParamSpec,
    PipelineFile,
    StepSpec,
    VarRef,
)

_TYPE_NAMES = {
    "string": "a string",
    "int": "an integer",
    "bool": "true or false",
    "float": "a number",
    "path": "a path (string)",
    "strings": "a list of strings",
    "paths": "a list of paths",
}


def find_line(text: str, dotted: list[str]) -> int | None:
    """Best-effort line of a dotted key in TOML text (headers and inline keys)."""
    lines = text.splitlines()
    for depth in range(len(dotted), 0, -1):
        head = r"\s*\.\s*".join(re.escape(p) for p in dotted[:depth])
        patterns = [rf"^\s*\[\[?\s*{head}\s*\]\]?\s*(#.*)?$", rf"^\s*{head}\s*="]
        if depth >= 2:
            tail = r"\s*\.\s*".join(re.escape(p) for p in dotted[depth - 1 : depth])
            patterns.append(rf"^\s*{tail}\s*=")
        for pat in patterns[:2]:
            for i, line in enumerate(lines, 1):
                if re.search(pat, line):
                    if depth == len(dotted):
                        return i
                    # find the remaining key below that header
                    rest = dotted[depth]
                    for j in range(i, len(lines)):
                        if re.match(rf"^\s*{re.escape(rest)}\s*=", lines[j]):
                            return j + 1
                        if j > i and lines[j].lstrip().startswith("["):
                            break
                    return i
    return None


def closest(name: str, options: list[str]) -> str | None:
    match = difflib.get_close_matches(name, options, n=1, cutoff=0.5)
    return match[0] if match else None


def _suggest(name: str, options: list[str], what: str) -> str:
    guess = closest(name, options)
    if guess:
        return f"did you mean '{guess}'?"
    known = ", ".join(sorted(options)) or "none"
    return f"declare the {what} first; known: {known}"


_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")


class _File:
    def __init__(self, path: Path, text: str, spec: PipelineFile, digest: str) -> None:
        self.path = path
        self.text = text
        self.spec = spec
        self.digest = digest  # sha256 of the bytes read (engine/loadcache.py checks it)

        self._headers: dict[str, int] | None = None

    def line(self, *dotted: str) -> int | None:
        """Line of a key, for error messages (a scan of the file: call it only when failing)."""
        return find_line(self.text, list(dotted))

    def header_line(self, *dotted: str) -> int | None:
        """Line of a `[table.header]`, from a map built once per file (cheap on every load)."""
        if self._headers is None:
            self._headers = {}
            for i, text in enumerate(self.text.splitlines(), 1):
                m = _HEADER.match(text)
                if m:
                    name = ".".join(p.strip().strip('"') for p in m.group(1).split("."))
                    self._headers.setdefault(name, i)
        return self._headers.get(".".join(dotted))


def _read_file(path: Path) -> _File:
    data = read_bytes(path, "pipeline file")
    text = decode(data, path, "pipeline file")
    raw = parse_toml(text, path, "pipeline file")
    try:
        spec = PipelineFile.model_validate(raw)
    except ValidationError as exc:
        raise _validation_error(exc, path, text, raw) from None
    return _File(path, text, spec, digest_bytes(data))


def _validation_error(exc: ValidationError, path: Path, text: str, raw: Any) -> InputError:
    err = exc.errors()[0]
    # pydantic adds union members and validators to locations; keep the keys the file has
    keys: list[str] = []
    cur: Any = raw
    for part in err["loc"]:
        if isinstance(cur, Mapping) and str(part) in cur:
            keys.append(str(part))
            cur = cur[str(part)]
        elif isinstance(cur, list) and isinstance(part, int) and part < len(cur):
            cur = cur[part]
    hint = "see `trace schema` for the accepted keys and types"
    line = find_line(text, keys)
    msg = str(err["msg"])
    if err["type"] == "extra_forbidden":
        hint = f"remove or rename '{err['loc'][-1]}'; " + hint
    elif err["type"] == "value_error" and keys in (["steps"], ["kinds"]):
        m = re.search(r"'([^']*)' is not a valid name", msg)
        if m:  # the line of the offending [steps.<name>] / [kinds.<name>] header
            name = m.group(1)
            keys.append(name)
            for i, ln in enumerate(text.splitlines(), 1):
                if name in ln and (ln.lstrip().startswith("[") or "=" in ln):
                    line = i
                    break
        msg = msg.removeprefix("Value error, ")
        hint = "rename it (step and kind names are used in ids, store names and keys)"
    elif err["type"] in ("int_type", "bool_type", "string_type", "float_type"):
        hint = (
            f"write it as {err['type'].removesuffix('_type')} (no quotes around numbers); " + hint
        )
    return InputError(msg, file=path, key=".".join(keys) or None, line=line, hint=hint)


def _load_files(entry: Path) -> list[_File]:
    """The entry file and everything it includes, depth first, each file once."""
    files: list[_File] = []
    seen: set[Path] = set()

    def visit(path: Path, stack: tuple[Path, ...]) -> None:
        if path in stack:
            chain = " -> ".join(str(p) for p in (*stack, path))
            raise InputError(
                f"include cycle: {chain}",
                file=path,
                key="include",
                hint="remove one of the includes",
            )
        if path in seen:
            return
        seen.add(path)
        f = _read_file(path)
        for inc in f.spec.include:
            target = _resolve(inc, f, "include")
            if target.is_dir() or not target.exists():
                is_dir = target.is_dir()
                raise InputError(
                    f"included file '{inc}' "
                    + (
                        f"is a directory ({target}), not a pipeline file"
                        if is_dir
                        else "does not exist"
                    ),
                    file=path,
                    key="include",
                    line=f.line("include"),
                    hint="name the .toml file itself"
                    if is_dir
                    else "fix the path (relative to this file)",
                )
            visit(target, (*stack, path))
        files.append(f)

    visit(resolve(entry), ())
    return files


def _resolve(value: str, f: _File, *key: str) -> Path:
    """`resolve_ref`, with a refused `trace:` reference located in the file that wrote it."""
    try:
        return resolve_ref(value, f.path.parent)
    except InputError as exc:
        raise InputError(
            exc.message, file=f.path, key=".".join(key), line=f.line(*key), hint=exc.hint
        ) from None


def _shipped(path: Path) -> bool:
    return path.is_relative_to(data_dir())


def _lookup(context: Mapping[str, Any], dotted: str) -> Any:
    cur: Any = context
    for part in dotted.split("."):
        if isinstance(cur, Mapping) and part in cur:
            cur = cur[part]
        else:
            raise KeyError(dotted)
    return cur


class _Resolver:
    def __init__(self, root: Path, context: Mapping[str, Any], hasher: StatCache) -> None:
        self.root = root
        self.context = context
        self.hasher = hasher
        self._digests: dict[Path, str] = {}
        self.entry: Path | None = None  # the pipeline file the user named

    def _root_hint(self) -> str:
        """What to do about a path outside the root, naming only options the command has: a
        verify graph's root is the fork (`--fork`), a plain graph's `--root`."""
        if "fork" in self.context:
            return (
                "keep the candidate's files and every input inside the fork (`--fork DIR` names it)"
            )
        return "keep inputs inside the project (or pass --root DIR)"

    def digested(self) -> list[Path]:
        return list(self._digests)

    @contextlib.contextmanager
    def blame(self, var: str | None, f: _File, *key: str) -> Iterator[None]:
        """A value from a file in the context (`candidate.patches`: the candidate file) that is
        refused is reported at that file and its key, not at the pipeline that uses it."""
        try:
            yield
        except InputError as exc:
            head, _, rest = (var or "").partition(".")
            origin = self.context.get(head)
            if not rest or not isinstance(origin, Mapping) or not origin.get("file"):
                raise
            raise InputError(
                exc.message,
                file=str(origin["file"]),
                key=rest,
                hint=f"{exc.hint or 'fix the value'} (used by {f.path}, key '{'.'.join(key)}')",
            ) from None

    def var(self, ref: VarRef, f: _File, *key: str) -> Any:
        try:
            return _lookup(self.context, ref.var)
        except KeyError:
            known = ", ".join(sorted(_flatten(self.context))) or "none (no context given)"
            if self.entry is not None and _shipped(f.path) and not _shipped(self.entry):
                raise InputError(  # the user's include, not trace's pipeline, is the mistake
                    f"the shipped pipeline {f.path.name} (included from here) needs "
                    f"'{ref.var}', which this run does not provide",
                    file=self.entry,
                    key="include",
                    hint="trace's verify pipeline runs for a candidate: use `trace verify "
                    f"CANDIDATE`, not `trace run` (known variables: {known})",
                ) from None
            raise InputError(
                f"unknown variable '{ref.var}'",
                file=f.path,
                key=".".join(key),
                line=f.line(*key),
                hint=f"known variables: {known}",
            ) from None

    def path(self, value: str, f: _File, *key: str, exclude: list[str] | None = None) -> InputRef:
        """A file or tree the step reads: inside the project root, or `trace:` shipped data.

        With `exclude` (the package set), the listed paths are left out of the digest. Every
        other file counts, git-ignored ones included: Nix imports the work tree as it is.
        """
        shipped = value.startswith(PREFIX)
        target = _resolve(value, f, *key)
        if not shipped and not target.is_relative_to(self.root):
            raise InputError(
                f"path '{value}' escapes the project root {self.root}",
                hint=self._root_hint(),
                file=f.path,
                key=".".join(key),
                line=f.line(*key),
            )
        if not target.exists():
            raise InputError(
                f"input '{value}' does not exist (looked for {target})",
                hint="create it or fix the path (relative to this file; `trace:` = trace's data)",
                file=f.path,
                key=".".join(key),
                line=f.line(*key),
            )
        digest = self._digests.get(target) if exclude is None else None
        if digest is None and exclude is not None and target.is_dir():
            digest = tree_digest(target, self.hasher, exclude)
        elif digest is None:
            digest = tree_digest(target, self.hasher)
            self._digests[target] = digest
        # Keys name shipped data by its `trace:` reference, so they do not depend on where trace
        # is installed; project files by their path relative to the root.
        rel = value if shipped else str(target.relative_to(self.root))
        return InputRef(path=target, rel=rel, digest=digest)

    def package_set(self, value: str, exclude: list[str], f: _File) -> InputRef:
        return self.path(value, f, "nix", "package_set", exclude=exclude)


def _flatten(ctx: Mapping[str, Any], prefix: str = "") -> list[str]:
    out: list[str] = []
    for k, v in ctx.items():
        name = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.extend(_flatten(v, name + "."))
        else:
            out.append(name)
    return out


def _check_type(value: Any, spec: ParamSpec | Param) -> bool:
    t = spec.type
    if t in ("string", "path"):
        return isinstance(value, str)
    if t == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if t == "bool":
        return isinstance(value, bool)
    if t == "float":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _unrepresentable(value: Any) -> str | None:
    """Why Nix cannot hold a (type-checked) param value exactly, or None."""
    import math
    import sys

    for v in value if isinstance(value, list) else [value]:
        if isinstance(v, str) and "\0" in v:
            return "contains a NUL character, which Nix strings cannot hold"
        if isinstance(v, float) and not math.isfinite(v):
            return f"is {v}, which Nix numbers cannot be"
        if isinstance(v, float) and v != 0 and abs(v) < sys.float_info.min:
            return f"is the subnormal float {v!r}, which Nix cannot read"
        # Nix reads `-9223372036854775808` as the negation of a literal one too large
        if isinstance(v, int) and not isinstance(v, bool) and not -(2**63) < v < 2**63:
            return "does not fit Nix's 64-bit integers (-(2^63 - 1) to 2^63 - 1)"
    return None


def _resolve_params(
    step_id: str, step: StepSpec, kind: Kind, kind_name: str, f: _File, r: _Resolver
) -> tuple[dict[str, Any], dict[str, Any]]:
    params: dict[str, Any] = {}
    key_params: dict[str, Any] = {}
    for name in step.params:
        if name not in kind.params:
            raise InputError(
                f"kind '{kind_name}' has no parameter '{name}'",
                file=f.path,
                key=f"steps.{step_id}.params.{name}",
                line=f.line("steps", step_id, "params", name) or f.line("steps", step_id),
                hint=_suggest(name, list(kind.params), "parameter in the kind"),
            )
    for name, spec in kind.params.items():
        key = ("steps", step_id, "params", name)
        raw = step.params.get(name, spec.default)
        var = raw.get("var") if isinstance(raw, dict) and set(raw) == {"var"} else None
        if var is not None:
            raw = r.var(_var_ref(var, f, *key), f, *key)
        with r.blame(var, f, *key):
            _resolve_param(
                name, name in step.params, raw, spec, kind_name, step_id, f, r, params, key_params
            )
    return params, key_params


def _var_ref(var: Any, f: _File, *key: str) -> VarRef:
    if not isinstance(var, str):
        raise InputError(
            f"`var` must be a string (a dotted context name), got {var!r}",
            file=f.path,
            key=".".join(key),
            line=f.line(*key),
            hint='write { var = "candidate.package" }',
        )
    return VarRef(var=var)


def _resolve_param(
    name: str,
    given: bool,
    raw: Any,
    spec: Param,
    kind_name: str,
    step_id: str,
    f: _File,
    r: _Resolver,
    params: dict[str, Any],
    key_params: dict[str, Any],
) -> None:
    key = ("steps", step_id, "params", name)
    if raw is None:
        if spec.required or given:
            raise InputError(
                f"parameter '{name}' of kind '{kind_name}' is required",
                file=f.path,
                key=".".join(key[:2]),
                line=f.line("steps", step_id),
                hint=f"set params.{name} to {_TYPE_NAMES[spec.type]}",
            )
        params[name] = None
        key_params[name] = None
        return
    if not _check_type(raw, spec):
        raise InputError(
            f"parameter '{name}' must be {_TYPE_NAMES[spec.type]}, got {raw!r}",
            file=f.path,
            key=".".join(key),
            line=f.line(*key) or f.line("steps", step_id),
            hint=f"kind '{kind_name}' declares {name} as type '{spec.type}'",
        )
    bad = _unrepresentable(raw)
    if bad:
        raise InputError(
            f"parameter '{name}' {bad}",
            file=f.path,
            key=".".join(key),
            line=f.line(*key) or f.line("steps", step_id),
            hint="pass a value Nix can hold exactly (builds must see the value as written)",
        )
    if spec.type == "path":
        ref = r.path(raw, f, *key)
        params[name] = ref
        key_params[name] = {"path": ref.rel, "digest": ref.digest}
    elif spec.type == "paths":
        refs = [r.path(v, f, *key) for v in raw]
        params[name] = refs
        key_params[name] = [{"path": x.rel, "digest": x.digest} for x in refs]
    else:
        params[name] = raw
        key_params[name] = raw


def _merge_nix(files: list[_File]) -> NixSettings:
    merged: dict[str, Any] = {}
    sandbox: list[str] = []
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
        data = f.spec.nix.model_dump(exclude_unset=True)
        sandbox.extend(p for p in data.pop("extra_sandbox_paths", []) if p not in sandbox)
        opts = {**merged.get("options", {}), **data.pop("options", {})}
        merged.update(data)
        merged["options"] = opts
    merged["extra_sandbox_paths"] = sandbox
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
    files = _load_files(entry)
    r = _Resolver(root, context or {}, hasher or StatCache())
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


def _load_kinds(files: list[_File], r: _Resolver) -> dict[str, Kind]:
    kinds: dict[str, Kind] = {}
    kind_files: dict[str, _File] = {}
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
                if pspec.default is not None and not _check_type(pspec.default, pspec):
                    raise InputError(
                        f"default of '{pname}' must be {_TYPE_NAMES[pspec.type]}",
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


def _read_template(value: str, f: _File, kind: str) -> tuple[Path, str]:
    """A kind's template text (compiled and linted on load, before anything is built: a changed
    template changes the key of every step that uses it)."""
    from engine.templatelint import lint_template

    tpath = _resolve(value, f, "kinds", kind, "template")
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
    files: list[_File], kinds: dict[str, Kind], entry: Path
) -> dict[str, tuple[StepSpec, _File]]:
    specs: dict[str, tuple[StepSpec, _File]] = {}
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
                    hint=_suggest(ss.kind, list(kinds), "kind under [kinds.<name>]"),
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
    specs: dict[str, tuple[StepSpec, _File]], r: _Resolver
) -> tuple[dict[str, tuple[str, ...]], set[str]]:
    """step id -> the ids it expands to (id@1..id@N when `repeat` is set); the repeated ids."""
    expansions: dict[str, tuple[str, ...]] = {}
    repeated: set[str] = set()
    total = 0
    for sid, (ss, f) in specs.items():
        rep: Any = ss.repeat
        if isinstance(rep, VarRef):
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
        if "repeat" in ss.model_fields_set:
            repeated.add(sid)
            expansions[sid] = tuple(f"{sid}@{i}" for i in range(1, rep + 1))
        else:
            expansions[sid] = (sid,)
    return expansions, repeated


def _nix_config(nix: NixSettings, package_set: str | None) -> NixConfig:
    from engine import hostpaths

    return NixConfig(
        sandbox_identity=hostpaths.identity(nix.extra_sandbox_paths),
        package_set=package_set,
        package_set_exclude=list(nix.package_set_exclude),
        extra_sandbox_paths=list(nix.extra_sandbox_paths),
        options=dict(nix.options),
        jobs=nix.jobs,
    )


def _resolve_nix(files: list[_File], r: _Resolver) -> tuple[NixConfig, InputRef | None]:
    nix = _merge_nix(files)
    if nix.package_set is None:
        return _nix_config(nix, None), None
    owner = next(f for f in reversed(files) if f.spec.nix and f.spec.nix.package_set)
    ps = nix.package_set
    value = r.var(ps, owner, "nix", "package_set") if isinstance(ps, VarRef) else ps
    package_set = r.package_set(str(value), nix.package_set_exclude, owner)
    return _nix_config(nix, str(package_set.path)), package_set


def _build_steps(
    specs: dict[str, tuple[StepSpec, _File]],
    kinds: dict[str, Kind],
    expansions: dict[str, tuple[str, ...]],
    repeated: set[str],
    r: _Resolver,
) -> dict[str, Step]:
    steps: dict[str, Step] = {}
    for sid, (ss, f) in specs.items():
        kind = kinds[ss.kind]
        for need in ss.needs:
            if need not in specs:
                raise InputError(
                    f"step '{sid}' needs unknown step '{need}'",
                    file=f.path,
                    key=f"steps.{sid}.needs",
                    line=f.line("steps", sid, "needs"),
                    hint=_suggest(need, list(specs), "step"),
                )
        params, key_params = _resolve_params(sid, ss, kind, ss.kind, f, r)
        inputs: dict[str, InputRef] = dict(kind.inputs)  # the kind's defaults, then the step's
        for iname, ival in ss.inputs.items():
            key = ("steps", sid, "inputs", iname)
            var = ival.var if isinstance(ival, VarRef) else None
            value = r.var(ival, f, *key) if isinstance(ival, VarRef) else ival
            with r.blame(var, f, *key):
                inputs[iname] = r.path(str(value), f, *key)
        needs_base = {n: expansions[n] for n in ss.needs}
        needs = tuple(x for n in ss.needs for x in expansions[n])
        line = f.header_line("steps", sid)
        for idx, xid in enumerate(expansions[sid], 1):
            steps[xid] = Step(
                id=xid,
                base_id=sid,
                kind=ss.kind,
                needs=needs,
                needs_base=needs_base,
                inputs=inputs,
                params=params,
                path_params=key_params,
                repeat_index=idx if sid in repeated else None,
                check=kind.check if ss.check is None else ss.check,
                source=f.path,
                line=line,
            )
    return steps


def _order(steps: dict[str, Step], specs: dict[str, tuple[StepSpec, _File]]) -> tuple[str, ...]:
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
    files: list[_File],
    kinds: dict[str, Kind],
    r: _Resolver,
    package_set: InputRef | None,
    exclude: list[str],
) -> tuple[tuple[Path, tuple[str, ...]], ...]:
    paths = {f.path: () for f in files} | {k.template_path: () for k in kinds.values()}
    paths |= dict.fromkeys(key_source_paths(), ())
    reads: dict[Path, tuple[str, ...]] = {**paths, **dict.fromkeys(r.digested(), ())}
    if package_set is not None:
        reads[package_set.path] = tuple(exclude)
    return tuple(sorted(reads.items()))
