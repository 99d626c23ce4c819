"""A `[steps.<id>]` table checked without pydantic, when it is plainly valid.

`trace run` after an edit of one step's table, and `trace watch`, re-validate that table alone
(engine/resident.py). Importing pydantic and building the pipeline file's schema costs more than
everything else trace does in Python on that path, so a table whose every key is one of the
plain ones below, each of exactly the type engine/spec.py's StepSpec declares (strict: a TOML
string is a `str`, an array a `list`...), is taken as it is: for such a table StepSpec's
validation can only accept it and give back the same values. Anything else (an unknown key,
`repeat`, an input `{ var = ... }`, a value of another type) is not decided here: the caller
validates it with pydantic, which gives the usual answer and message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from engine.plain import Plain


class DeclaredStep(Protocol):
    """What resolving a declared step reads of its table (engine/graphstep.py): a validated
    engine.spec.StepSpec, or a PlainStep."""

    @property
    def kind(self) -> str: ...

    @property
    def needs(self) -> Sequence[str]: ...

    @property
    def inputs(self) -> Mapping[str, Any]: ...  # a path (str), or a spec.VarRef

    @property
    def params(self) -> Mapping[str, Any]: ...

    @property
    def check(self) -> bool | None: ...


class PlainStep(Plain):
    """A step table StepSpec would accept as it is: no `repeat`, every input a path. A plain
    class: a dataclass costs ~2-4M instructions to make at import, on every trace process
    (issue 30)."""

    FIELDS = ("kind", "needs", "inputs", "params", "check", "description")
    __slots__ = FIELDS

    def __init__(
        self,
        kind: str,
        needs: list[str],
        inputs: dict[str, str],
        params: dict[str, Any],
        check: bool | None,
        description: str,
    ) -> None:
        self.kind, self.needs, self.inputs, self.params = kind, needs, inputs, params
        self.check, self.description = check, description


def strs(value: Any) -> bool:
    """A TOML array of strings, as strict `list[str]` takes it."""
    return type(value) is list and all(type(v) is str for v in value)


def str_table(value: Any) -> bool:
    """A TOML table of strings, as strict `dict[str, str]` takes it."""
    return type(value) is dict and all(type(k) is str and type(v) is str for k, v in value.items())


# key -> whether a value is of the type StepSpec declares for it, taken as it is in strict mode
PLAIN: dict[str, Any] = {
    "kind": lambda v: type(v) is str,
    "needs": strs,
    "inputs": str_table,
    "params": lambda v: type(v) is dict and all(type(k) is str for k in v),
    "check": lambda v: type(v) is bool,
    "description": lambda v: type(v) is str,
}


def plain_step(table: Mapping[str, Any]) -> PlainStep | None:
    """The table as a PlainStep, or None when only pydantic can say (see the module doc)."""
    if type(table) is not dict or "kind" not in table:
        return None
    for key, value in table.items():
        ok = PLAIN.get(key)
        if ok is None or not ok(value):
            return None
    return PlainStep(
        kind=table["kind"],
        needs=list(table.get("needs", [])),
        inputs=dict(table.get("inputs", {})),
        params=dict(table.get("params", {})),
        check=table.get("check"),
        description=table.get("description", ""),
    )
