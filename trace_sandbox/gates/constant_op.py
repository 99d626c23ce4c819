"""The mutation gate's `constant` operator (mutate.py): an integer literal n becomes n+1 and
n-1 in its own base (decimal, hex `0x84`, C octal `017`, Python `0o17`/`0b10`); `0` becomes `1`
and `-1`, so `x < 0` becomes `x < -1`, a sign check's boundary. Nothing below -1 is spelled."""

from __future__ import annotations

import re
from collections.abc import Iterator

from ._dataclasses import dataclass
from .lang import Lang

_INT_RE = re.compile(
    r"(?<![\w.])(0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|0[0-7]+|\d+)([uUlL]*)(?![\w.])"
)


@dataclass(frozen=True)
class Edit:
    """One operator of a line replaced by another: where, and the line it makes."""

    operator: str
    column: int
    mutated: str
    description: str
    effect: str | None = None


def _base_of(spelling: str, lang: Lang) -> tuple[int, str]:
    """The base a literal is written in, and its prefix (`0x`, `0o`, `0b`, C's `0`)."""
    low = spelling.lower()
    if low.startswith(("0x", "0o", "0b")):
        return {"x": 16, "o": 8, "b": 2}[low[1]], spelling[:2]
    if lang == "c" and len(spelling) > 1 and spelling[0] == "0":
        return 8, "0"
    return 10, ""


def _spell(n: int, base: int, prefix: str, digits: str) -> str:
    """n in the literal's own base and case (`-1` for a negative result: no base has a sign)."""
    if n < 0:
        return str(n)
    body = {16: f"{n:x}", 8: f"{n:o}", 2: f"{n:b}", 10: str(n)}[base]
    return prefix + (body.upper() if digits.isupper() else body)


def constant_edits(text: str, code: str, lang: Lang) -> Iterator[Edit]:
    for m in _INT_RE.finditer(code):
        spelling = m.group(1)
        base, prefix = _base_of(spelling, lang)
        digits = spelling[len(prefix) :]
        try:
            n = int(digits, base)
        except ValueError:
            continue  # `0b2`, a C `09`: not a literal this operator reads
        for new in (n + 1, n - 1):
            if new < -1:
                continue
            spelled = _spell(new, base, prefix, digits)
            mutated = text[: m.start(1)] + spelled + text[m.end(1) :]
            yield Edit("constant", m.start(1), mutated, f"constant {spelling} -> {spelled}")


def literal_value(spelling: str) -> int:
    if spelling.startswith("-"):
        return -literal_value(spelling[1:])
    base, prefix = _base_of(spelling, "c")
    return int(spelling[len(prefix) :] or "0", base)
