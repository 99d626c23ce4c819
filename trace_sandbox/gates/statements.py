"""Statements that span lines: where a changed clause of a multi-line condition is evaluated.

gcc's line table puts a clause's test where it pleases: in `if (n > max ||\\n    flag)` the test of
`flag` may be counted on the `if` line, and the clause's own line left at count 0 or out of the
table. Coverage of such a clause is the coverage of its statement: the outermost parenthesised
expression that spans lines (a condition, a call's arguments). `spans` finds them in C-like
source (strings, character literals and comments skipped); Python's are not needed (the tracer
reports the statement's first line for every line of it, and `python_executable_lines` knows).

Stdlib only (the coverage gate runs in the sandbox).
"""

from __future__ import annotations

import re

_TOKEN = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|//[^\n]*|/\*.*?\*/|[()\n]', re.S)


def spans(source: str) -> list[tuple[int, int]]:
    """(first, last) 1-based lines of every outermost parenthesised expression spanning lines."""
    out: list[tuple[int, int]] = []
    line, depth, start = 1, 0, 0
    for m in _TOKEN.finditer(source):
        tok = m.group(0)
        if tok == "(":
            if depth == 0:
                start = line
            depth += 1
        elif tok == ")" and depth > 0:
            depth -= 1
            if depth == 0 and line > start:
                out.append((start, line))
        line += tok.count("\n")
    return out


def statement_of(line: int, found: list[tuple[int, int]]) -> tuple[int, int] | None:
    """The multi-line statement `line` lies in, if any."""
    for first, last in found:
        if first <= line <= last:
            return first, last
    return None
