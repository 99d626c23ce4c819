"""A pipeline file checked without pydantic, when it is plainly valid.

engine/steptable.py's rule for one step table, for a whole file: importing pydantic and building
the pipeline file's schema costs more than everything else a first `trace run` of 100 steps does
in Python (issue 30). A file whose every key is one engine/spec.py declares, each value of
exactly the type declared there (strict: a TOML string is a `str`, an array a `list`...) and
within its constraints (a valid name, `jobs` 1 or more, a numeric option a number), with no
`{ var = ... }` and no `repeat`, is taken as it is: for such a file PipelineFile's validation can
only accept it and give back the same values (tests/test_plainfile.py checks that as a hypothesis
property). Anything else is not decided here: engine/graphfile.py validates it with pydantic,
which gives the usual answer and message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, get_args

from engine.graphtypes import ParamType
from engine.plain import Plain
from engine.specrules import ID_RE, numeric_option_problem
from engine.steptable import PlainStep, plain_step, str_table, strs

PARAM_TYPES = frozenset(get_args(ParamType))
Check = Callable[[Any], bool]


class PlainParam(Plain):
    """A kind's parameter as spec.ParamSpec would give it."""

    FIELDS = ("type", "default", "required", "description")
    __slots__ = FIELDS

    def __init__(self, type: ParamType, default: Any, required: bool, description: str) -> None:
        self.type, self.default, self.required = type, default, required
        self.description = description


class PlainKind(Plain):
    """A kind as spec.KindSpec would give it."""

    FIELDS = ("template", "description", "params", "inputs", "check")
    __slots__ = FIELDS

    def __init__(
        self,
        template: str,
        description: str,
        params: dict[str, PlainParam],
        inputs: dict[str, str],
        check: bool,
    ) -> None:
        self.template, self.description, self.params = template, description, params
        self.inputs, self.check = inputs, check


class PlainNix(Plain):
    """`[nix]` as spec.NixSettings would give it; `fields_set`: the keys the file set (pydantic's
    `model_fields_set`: what a merge over included files takes from it)."""

    FIELDS = ("package_set", "package_set_exclude", "extra_sandbox_paths", "options", "jobs")
    __slots__ = (*FIELDS, "fields_set")

    def __init__(self, table: Mapping[str, Any]) -> None:
        self.package_set: str | None = table.get("package_set")
        self.package_set_exclude: list[str] = list(table.get("package_set_exclude", []))
        self.extra_sandbox_paths: list[str] = list(table.get("extra_sandbox_paths", []))
        self.options: dict[str, str] = dict(table.get("options", {}))
        self.jobs: int | None = table.get("jobs")
        self.fields_set = frozenset(table)

    def set_fields(self) -> dict[str, Any]:
        """What the file set, as `model_dump(exclude_unset=True)` gives it (lists copied)."""
        got = {k: getattr(self, k) for k in self.FIELDS if k in self.fields_set}
        return {k: list(v) if type(v) is list else v for k, v in got.items()}


class PlainFile(Plain):
    """A pipeline file as spec.PipelineFile would give it."""

    FIELDS = ("version", "include", "nix", "kinds", "steps")
    __slots__ = FIELDS

    def __init__(
        self,
        include: list[str],
        nix: PlainNix | None,
        kinds: dict[str, PlainKind],
        steps: dict[str, PlainStep],
    ) -> None:
        self.version = 1
        self.include, self.nix, self.kinds, self.steps = include, nix, kinds, steps


def _is(kind: type) -> Check:
    return lambda v: type(v) is kind


def _only(table: Any, checks: Mapping[str, Check], required: tuple[str, ...] = ()) -> bool:
    """A table of only these keys, each value passing its check, the required ones present."""
    if type(table) is not dict or any(k not in table for k in required):
        return False
    return all(k in checks and checks[k](v) for k, v in table.items())


def _names(v: Any) -> bool:
    return type(v) is dict and all(ID_RE.match(k) for k in v)


NIX: dict[str, Check] = {
    "package_set": lambda v: type(v) is str and len(v) >= 1,
    "package_set_exclude": strs,
    "extra_sandbox_paths": strs,
    "options": lambda v: str_table(v) and numeric_option_problem(v) is None,
    "jobs": lambda v: type(v) is int and v >= 1,
}
PARAM: dict[str, Check] = {
    "type": lambda v: type(v) is str and v in PARAM_TYPES,
    "default": lambda v: True,  # Any
    "required": _is(bool),
    "description": _is(str),
}
KIND: dict[str, Check] = {
    "template": _is(str),
    "description": _is(str),
    "params": lambda v: type(v) is dict and all(_only(p, PARAM, ("type",)) for p in v.values()),
    "inputs": str_table,
    "check": _is(bool),
}
TOP: dict[str, Check] = {
    "version": lambda v: type(v) is int and v == 1,
    "include": strs,
    "nix": lambda v: _only(v, NIX),
    "kinds": lambda v: _names(v) and all(_only(k, KIND, ("template",)) for k in v.values()),
    "steps": _names,  # each table: plain_step
}


def plain_file(raw: Mapping[str, Any]) -> PlainFile | None:
    """The parsed file as a PlainFile, or None when only pydantic can say (module doc)."""
    if not _only(raw, TOP):
        return None
    steps: dict[str, PlainStep] = {}
    for sid, table in raw.get("steps", {}).items():
        step = plain_step(table)
        if step is None:
            return None
        steps[sid] = step
    nix = raw.get("nix")
    return PlainFile(
        include=list(raw.get("include", [])),
        nix=None if nix is None else PlainNix(nix),
        kinds={name: _kind(k) for name, k in raw.get("kinds", {}).items()},
        steps=steps,
    )


def _kind(k: Mapping[str, Any]) -> PlainKind:
    return PlainKind(
        template=k["template"],
        description=k.get("description", ""),
        params={name: _param(p) for name, p in k.get("params", {}).items()},
        inputs=dict(k.get("inputs", {})),
        check=k.get("check", False),
    )


def _param(p: Mapping[str, Any]) -> PlainParam:  # p["type"]: checked to be a ParamType
    return PlainParam(
        type=p["type"],
        default=p.get("default"),
        required=p.get("required", False),
        description=p.get("description", ""),
    )
