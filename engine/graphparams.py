"""Resolving a graph's parameters and inputs: defaults, `{ var = ... }` references into the run's
context, paths relative to the declaring file (inside the project root, or `trace:` data) with
their digests, and each value checked against its declared type. Used by engine/graph.py.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import InputError
from engine.graphfile import File, resolve_in, shipped, suggest
from engine.graphtypes import InputRef, Kind, Param
from engine.hashing import StatCache, tree_digest
from engine.paths import PREFIX

if TYPE_CHECKING:  # no pydantic on the way to re-resolving one step (engine/graphstep.py)
    from engine.plainfile import PlainParam
    from engine.spec import ParamSpec, VarRef
    from engine.steptable import DeclaredStep

TYPE_NAMES = {
    "string": "a string",
    "int": "an integer",
    "bool": "true or false",
    "float": "a number",
    "path": "a path (string)",
    "strings": "a list of strings",
    "paths": "a list of paths",
}


def _lookup(context: Mapping[str, Any], dotted: str) -> Any:
    cur: Any = context
    for part in dotted.split("."):
        if isinstance(cur, Mapping) and part in cur:
            cur = cur[part]
        else:
            raise KeyError(dotted)
    return cur


class Resolver:
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
    def blame(self, var: str | None, f: File, *key: str) -> Iterator[None]:
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

    def var(self, ref: VarRef, f: File, *key: str) -> Any:
        try:
            return _lookup(self.context, ref.var)
        except KeyError:
            known = ", ".join(sorted(flatten(self.context))) or "none (no context given)"
            if self.entry is not None and shipped(f.path) and not shipped(self.entry):
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

    def path(self, value: str, f: File, *key: str, exclude: list[str] | None = None) -> InputRef:
        """A file or tree the step reads: inside the project root, or `trace:` shipped data.

        With `exclude` (the package set), the listed paths are left out of the digest. Every
        other file counts, git-ignored ones included: Nix imports the work tree as it is.
        """
        shipped = value.startswith(PREFIX)
        target = resolve_in(value, f, *key)
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

    def package_set(self, value: str, exclude: list[str], f: File) -> InputRef:
        return self.path(value, f, "nix", "package_set", exclude=exclude)


def flatten(ctx: Mapping[str, Any], prefix: str = "") -> list[str]:
    out: list[str] = []
    for k, v in ctx.items():
        name = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.extend(flatten(v, name + "."))
        else:
            out.append(name)
    return out


def check_type(value: Any, spec: ParamSpec | PlainParam | Param) -> bool:
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


def unrepresentable(value: Any) -> str | None:
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


def resolve_params(
    step_id: str, step: DeclaredStep, kind: Kind, kind_name: str, f: File, r: Resolver
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
                hint=suggest(name, list(kind.params), "parameter in the kind"),
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


def _var_ref(var: Any, f: File, *key: str) -> VarRef:
    if not isinstance(var, str):
        raise InputError(
            f"`var` must be a string (a dotted context name), got {var!r}",
            file=f.path,
            key=".".join(key),
            line=f.line(*key),
            hint='write { var = "candidate.package" }',
        )
    from engine.spec import VarRef

    return VarRef(var=var)


def _resolve_param(
    name: str,
    given: bool,
    raw: Any,
    spec: Param,
    kind_name: str,
    step_id: str,
    f: File,
    r: Resolver,
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
                hint=f"set params.{name} to {TYPE_NAMES[spec.type]}",
            )
        params[name] = None
        key_params[name] = None
        return
    if not check_type(raw, spec):
        raise InputError(
            f"parameter '{name}' must be {TYPE_NAMES[spec.type]}, got {raw!r}",
            file=f.path,
            key=".".join(key),
            line=f.line(*key) or f.line("steps", step_id),
            hint=f"kind '{kind_name}' declares {name} as type '{spec.type}'",
        )
    bad = unrepresentable(raw)
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
