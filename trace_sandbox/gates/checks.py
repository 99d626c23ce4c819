"""What a removed check tested, so that a patch cannot trade it for an unrelated one.

A check is an assertion, a bounds check (an `if`/`while` whose condition compares) or an error
return (C `return -1;`/`goto err;`/`exit(1)`, Python `raise`/`sys.exit(1)`). Its *subject* is the
set of identifiers its condition tests: the asserted expression, the `if`/`while` condition, or
for an error return the condition of the `if` guarding it (on the same statement, or the
statement just before it in the same run of removed/added lines: C `if (...)` + `return -1;`,
Python `if ...:` + `raise ...`). Keywords, type names in casts (`size_t`, `int`) and the null and
boolean constants are not part of a subject.

A removed check is *kept* when an added check of the same kind in the same file tests at least
the same identifiers (its subject is a superset): `if (klen >= KEY_MAX)` -> `if (klen >= KEY_MAX
|| !key)` keeps it; `if (klen >= KEY_MAX)` -> `if (klen > 100)` does not. Error returns whose
guard is not in the diff (only the `return -1;` line changed) have no subject and are matched by
count, as the lines themselves (`raise ValueError` -> `raise KeyError` is a change, not a
removal).
"""

from __future__ import annotations

import keyword
import re

from ._dataclasses import dataclass
from .diff import FileDiff, Line
from .lang import Lang, brackets_balanced, code_only, language

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Literal

    Kind = Literal["assert", "bounds", "error-return"]
else:  # plain strings at run time: the gates import no `typing` (a process's start-up)
    Kind = str
KINDS: tuple[Kind, ...] = ("assert", "bounds", "error-return")

Stmt = tuple[int | None, str]


def statements(lines: list[Line], kind: str, lang: Lang) -> list[Stmt]:
    """One side's lines joined while brackets stay open: (first line no, code text)."""
    return [s for run in runs(lines, kind, lang) for s in run]


def runs(lines: list[Line], kind: str, lang: Lang) -> list[list[Stmt]]:
    """Like `statements`, grouped by runs of consecutive lines of that side."""
    out: list[list[Stmt]] = []
    run: list[Stmt] = []
    buf: list[str] = []
    first: int | None = None
    for ln in lines:
        if ln.kind != kind:
            if buf:
                run.append((first, " ".join(buf)))
                buf, first = [], None
            if run:
                out.append(run)
                run = []
            continue
        code = code_only(ln.text, lang).strip()
        if not buf:
            first = ln.old_no if kind == "-" else ln.new_no
        buf.append(code)
        if brackets_balanced(" ".join(buf)):
            run.append((first, " ".join(buf)))
            buf, first = [], None
    if buf:
        run.append((first, " ".join(buf)))
    if run:
        out.append(run)
    return out


# ---- subjects ----

_IDENT = re.compile(r"\b[A-Za-z_]\w*")
_C_WORDS = frozenset(
    {
        *("if", "else", "while", "for", "do", "switch", "case", "default", "return", "goto"),
        *("break", "continue", "sizeof", "alignof", "_Alignof", "typeof", "__typeof__"),
        *("const", "volatile", "restrict", "static", "extern", "register", "inline"),
        *("struct", "union", "enum", "signed", "unsigned", "short", "long", "int", "char"),
        *("float", "double", "void", "bool", "_Bool", "NULL", "nullptr", "true", "false"),
    }
)
_PY_WORDS = frozenset(keyword.kwlist) | frozenset(keyword.softkwlist)
_TYPEDEF = re.compile(r"[a-z_][a-z0-9_]*_t\Z")


def identifiers(text: str, lang: Lang) -> frozenset[str]:
    words = _C_WORDS if lang == "c" else _PY_WORDS
    return frozenset(w for w in _IDENT.findall(text) if w not in words and not _TYPEDEF.match(w))


def _parenthesised(code: str, open_at: int) -> str:
    """The text inside the parentheses opening at code[open_at] (to the end if unbalanced)."""
    depth = 0
    for i in range(open_at, len(code)):
        if code[i] == "(":
            depth += 1
        elif code[i] == ")":
            depth -= 1
            if depth == 0:
                return code[open_at + 1 : i]
    return code[open_at + 1 :]


def _until_top_level(code: str, stop: str) -> str:
    """The text before the first `stop` character outside brackets."""
    depth = 0
    for i, ch in enumerate(code):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == stop and depth == 0:
            return code[:i]
    return code


# ---- finding checks ----

_ASSERT_C = re.compile(r"\b(?:assert|static_assert|_Static_assert|g_assert\w*|BUG_ON)\s*\(")
_ASSERT_PY = re.compile(r"^assert\b")
_COMPARES = re.compile(r"(?<![<>=-])(?:<=?|>=?)(?![<>])")
_IF_C = re.compile(r"\b(?:if|while)\s*\(")
_IF_PY = re.compile(r"^(?:if|elif|while)\b")
_GUARD_C = re.compile(r"^(?:\}\s*)?(?:else\s+)?if\s*\(")
_GUARD_PY = re.compile(r"^(?:if|elif)\b")
ERROR_RETURN = {
    "c": re.compile(
        r"\breturn\s+(?:-\s*\w+|NULL|false|EXIT_FAILURE)\s*;|"
        r"\bgoto\s+\w*(?:err|fail|out|bad|error)\w*\s*;|\b(?:abort|_exit|exit)\s*\(\s*(?!0\b)"
    ),
    "python": re.compile(r"(?:^|:\s*)raise\b|\bsys\.exit\s*\(\s*(?!0\b)\S"),
}


@dataclass(frozen=True)
class Check:
    """A check the patch removed or added: its kind, line and text."""

    kind: Kind
    line: int | None
    text: str  # the statement, as code (strings and comments blanked)
    subject: frozenset[str]  # identifiers the check tests; empty: unknown, matched by text


def _conditions(code: str, lang: Lang) -> list[tuple[int, str]]:
    """(position, condition) of every if/while in a statement."""
    if lang == "c":
        return [(m.start(), _parenthesised(code, m.end() - 1)) for m in _IF_C.finditer(code)]
    m = _IF_PY.match(code)
    return [(0, _until_top_level(code[m.end() :], ":"))] if m else []


def _guard(code: str, at: int, previous: str | None, lang: Lang) -> str | None:
    """The condition guarding an error return at code[at]: an if/while earlier in the same
    statement, else the previous statement when it is an if header."""
    before = [cond for pos, cond in _conditions(code, lang) if pos < at]
    if before:
        return before[-1]
    header = _GUARD_C if lang == "c" else _GUARD_PY
    end = ")" if lang == "c" else ":"
    if previous is not None and header.match(previous) and previous.endswith(end):
        conds = _conditions(previous, lang)
        if conds:
            return conds[-1][1]
    return None


def _statement_checks(line: int | None, code: str, previous: str | None, lang: Lang) -> list[Check]:
    out: list[Check] = []
    if lang == "c":
        for m in _ASSERT_C.finditer(code):
            cond = _parenthesised(code, m.end() - 1)
            out.append(Check("assert", line, code, identifiers(cond, lang)))
    elif _ASSERT_PY.match(code):
        cond = _until_top_level(code[len("assert") :], ",")
        out.append(Check("assert", line, code, identifiers(cond, lang)))
    for _, cond in _conditions(code, lang):
        if _COMPARES.search(cond):
            out.append(Check("bounds", line, code, identifiers(cond, lang)))
    ret = ERROR_RETURN[lang].search(code)
    if ret:
        guard = _guard(code, ret.start(), previous, lang)
        subject = identifiers(guard, lang) if guard is not None else frozenset()
        out.append(Check("error-return", line, code, subject))
    return out


def side_checks(f: FileDiff, side: str) -> list[Check]:
    """Every check on one side ('-' removed, '+' added) of a file's diff."""
    lang = language(f.path)
    out: list[Check] = []
    for h in f.hunks:
        for run in runs(h.lines, side, lang):
            previous: str | None = None
            for line, code in run:
                out.extend(_statement_checks(line, code, previous, lang))
                previous = code
    return out


def removed_checks(f: FileDiff) -> list[Check]:
    """The removed checks with no added counterpart (see the module docstring), in order."""
    removed = side_checks(f, "-")
    added = side_checks(f, "+")
    lost: list[Check] = []
    for kind in KINDS:
        gone = [c for c in removed if c.kind == kind]
        new = [c for c in added if c.kind == kind]
        with_subject = [c for c in new if c.subject]
        for c in gone:
            if c.subject and not any(c.subject <= a.subject for a in with_subject):
                lost.append(c)
        # checks whose subject is unknown: by count, reporting those without an identical line
        blind = [c for c in gone if not c.subject]
        others = [c.text for c in new if not c.subject]
        extra = len(blind) - len(others)
        if extra > 0:
            unmatched = [c for c in blind if c.text not in others] or blind
            lost.extend(unmatched[:extra])
    return lost
