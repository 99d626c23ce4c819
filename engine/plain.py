"""Value classes without `dataclasses` (issue 30): the decorator generates and compiles each
class's methods at import, ~2-4M instructions a class on every trace process. A class on the hot
path lists its fields once (`FIELDS`, in declaration order) and gets from `Plain` what a
dataclass gave it: equality with another instance of the same class, field by field, and a repr
naming the fields; `Frozen` adds a hash over them (a frozen dataclass's)."""

from __future__ import annotations

from typing import Any


class Plain:
    """Equal to an instance of the same class whose FIELDS are equal; unhashable (mutable)."""

    __slots__ = ()
    FIELDS: tuple[str, ...] = ()

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, f) for f in self.FIELDS)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, Plain)
        return self._values() == other._values()

    __hash__ = None  # type: ignore[assignment]  # as a dataclass with eq and not frozen

    def __repr__(self) -> str:
        fields = ", ".join(f"{f}={getattr(self, f)!r}" for f in self.FIELDS)
        return f"{type(self).__name__}({fields})"


class Frozen(Plain):
    """`Plain`, hashable over its FIELDS (whose values must be hashable)."""

    __slots__ = ()

    def __hash__(self) -> int:  # type: ignore[override]  # Plain's is None
        return hash(self._values())
