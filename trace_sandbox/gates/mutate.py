"""Mutants of the lines a patch adds: each one is the candidate patch with one added line changed.

Operators, applied to every added line of a C or Python source file (test files excluded), in
this fixed order, each left to right along the line (lines that only write diagnostics to stderr
or a logger are left alone, as PIT's `avoidCallsTo` does for logging):

1. ``relational``  ``<``↔``<=``, ``>``↔``>=``, ``==``↔``!=``
2. ``arithmetic``  binary ``+``↔``-``, ``*``→``/``, ``/``→``*``, ``//``→``*``, ``%``→``*``,
   ``+=``↔``-=``
3. ``constant``    an integer literal n becomes n+1 and n-1, in its own base (decimal, hex
   ``0x84`` -> ``0x85``/``0x83``, octal ``017``/``0o17``, binary ``0b…``); ``0`` becomes ``1`` and
   ``-1`` (so ``x < 0`` becomes ``x < -1``: a boundary the sign check must not miss)
4. ``negate``      the condition of ``if``/``while`` (C) or ``if``/``elif``/``while`` (Python)
5. ``clause``      one clause of a condition dropped (``a && b`` becomes ``a`` and ``b``;
   ``and``/``or`` in Python)
6. ``delete``      a whole statement becomes an empty one (``;`` in C, ``pass`` in Python)
7. ``early-return`` a ``return`` inside a conditional block removed (``;`` / ``pass``)
8. ``return``      ``return e`` becomes ``return 0`` (``return 1`` when e is 0) in C;
   ``return None`` (``True``↔``False``) in Python

Only code is mutated: the hunk's lines are read together (`lang.classify_lines`), so a line
inside a block comment or a docstring is neither read nor mutated, nor is any string literal or
comment on a code line. A C mutant that only makes an allocation larger (a constant raised, or
``-`` made ``+``, inside the size argument of ``malloc``/``calloc``/``realloc``/``alloca``…) is
marked ``effect = "over-allocates"``: no sanitizer or output oracle can tell a larger buffer
apart, so the mutation gate does not count such a mutant when it survives (it is listed as
``unobservable``).

A mutant keeps the line count of its patch, so the patch still applies with its own context and
line numbers stay comparable. Identical mutated lines are generated once. Ids are ``m001``… in
that order: same patch, same mutants, same ids.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from ._dataclasses import dataclass
from .condition_ops import clause_edits, matching_paren, negate_edits
from .constant_op import Edit as _Edit
from .constant_op import constant_edits, literal_value
from .diff import FileDiff, Line, parse_series
from .lang import (
    Lang,
    brackets_balanced,
    classify_lines,
    code_only,
    indent_of,
    is_test_path,
    language,
)

OPERATORS = (
    "relational",
    "arithmetic",
    "constant",
    "negate",
    "clause",
    "delete",
    "early-return",
    "return",
    "handler",
)

_REL = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "=="}
_REL_RE = re.compile(r"<<=|>>=|<<|>>|->|=>|<=|>=|==|!=|<|>|=")
_ARITH = {"+": "-", "-": "+", "*": "/", "/": "*", "//": "*", "%": "*", "+=": "-=", "-=": "+="}
_ARITH_RE = re.compile(r"\+\+|--|->|\*\*|//|\+=|-=|\*=|/=|%=|[-+*/%]")
_C_DECL_RE = re.compile(
    r"^\s*(?:(?:const|static|unsigned|signed|volatile|register|extern|inline|struct|enum|union)"
    r"\s+)*[A-Za-z_]\w*(?:\s*\*+\s*|\s+)[A-Za-z_]\w*\s*(?:[=;,\[(]|$)"
)
_PY_NO_DELETE = (
    "def ",
    "class ",
    "return",
    "import ",
    "from ",
    "else",
    "elif ",
    "except",
    "try",
    "finally",
    "with ",
    "for ",
    "while ",
    "if ",
    "@",
    "pass",
    "global ",
    "nonlocal ",
    "async ",
    "yield",
    "raise",
)


@dataclass(frozen=True)
class Mutant:
    """One mutant of the fix: where one operator changed, and the patch series it makes."""

    id: str
    operator: str
    file: str
    line: int  # line number in the patched (new) file
    column: int  # 0-based column of the change in the line
    original: str
    mutated: str
    description: str
    patch_index: int  # which patch of the series carries the mutated line
    patches: tuple[str, ...]  # the whole series, with that one patch mutated
    effect: str | None = None  # "over-allocates": unobservable when it survives

    def review_diff(self) -> str:
        """A tiny diff a reviewer can read: the candidate's line against the mutant's."""
        return (
            f"--- a/{self.file}\t(candidate patch, line {self.line})\n"
            f"+++ b/{self.file}\t(mutant {self.id}: {self.description})\n"
            f"@@ -{self.line} +{self.line} @@\n"
            f"-{self.original}\n"
            f"+{self.mutated}\n"
        )

    def summary(self) -> dict[str, object]:
        return {
            "id": self.id,
            "operator": self.operator,
            "file": self.file,
            "line": self.line,
            "description": self.description,
            "diff": self.review_diff(),
            "effect": self.effect,
        }


def _prev_code(code: str, i: int) -> str:
    j = i - 1
    while j >= 0 and code[j] == " ":
        j -= 1
    return code[j] if j >= 0 else ""


def _next_code(code: str, i: int) -> str:
    j = i
    while j < len(code) and code[j] == " ":
        j += 1
    return code[j] if j < len(code) else ""


def _operand_end(ch: str) -> bool:
    return ch.isalnum() or ch in "_)]"


_KEYWORDS = frozenset({"return", "case", "sizeof", "in", "not", "and", "or", "yield", "else"})


def _after_keyword(code: str, i: int) -> bool:
    m = re.search(r"([A-Za-z_]\w*)\s*$", code[:i])
    return m is not None and m.group(1) in _KEYWORDS


def _operand_start(ch: str) -> bool:
    return ch.isalnum() or ch in "_(\"'"


_DIAGNOSTIC = {
    "c": re.compile(
        r"^(?:fprintf\s*\(\s*stderr\b|fputs\s*\(.*,\s*stderr\s*\)|perror\s*\(|syslog\s*\()"
    ),
    "python": re.compile(
        r"^(?:(?:logging|logger|log|_log|LOG)\."
        r"(?:debug|info|warning|warn|error|exception|critical)\s*\(|"
        r"warnings\.warn\s*\(|sys\.stderr\.write\s*\(|print\s*\(.*\bfile\s*=\s*sys\.stderr\b)"
    ),
}


def _skip_line(stripped: str, lang: Lang) -> bool:
    if not stripped:
        return True
    diag = _DIAGNOSTIC.get(lang)
    if diag is not None and diag.match(stripped):
        return True  # diagnostics to stderr/logs are not mutated (like PIT's avoidCallsTo)
    if lang == "c":
        return stripped.startswith(("#include", "#import", "#pragma", "#error", "#line"))
    return stripped.startswith(("import ", "from ", "def ", "class ", "@", "async def "))


def _relational(text: str, code: str) -> Iterator[_Edit]:
    for m in _REL_RE.finditer(code):
        op = m.group(0)
        if op not in _REL:
            continue
        new = _REL[op]
        mutated = text[: m.start()] + new + text[m.end() :]
        yield _Edit("relational", m.start(), mutated, f"relational '{op}' -> '{new}'")


def _arithmetic(text: str, code: str, lang: Lang) -> Iterator[_Edit]:
    for m in _ARITH_RE.finditer(code):
        op = m.group(0)
        if op not in _ARITH or (op == "//" and lang != "python"):
            continue
        before, after = _prev_code(code, m.start()), _next_code(code, m.end())
        if not _operand_end(before) or _after_keyword(code, m.start()):
            continue  # unary minus/plus, pointer dereference, *args
        if op in ("+=", "-="):
            if not after:
                continue
        elif not _operand_start(after):
            continue
        if op == "*" and lang == "c":
            spaced_l = code[m.start() - 1 : m.start()] == " "
            spaced_r = code[m.end() : m.end() + 1] == " "
            if spaced_l != spaced_r:
                continue  # `char *p`: a declaration, not a product
        new = _ARITH[op]
        mutated = text[: m.start()] + new + text[m.end() :]
        yield _Edit("arithmetic", m.start(), mutated, f"arithmetic '{op}' -> '{new}'")


def _delete(text: str, code: str, lang: Lang) -> Iterator[_Edit]:
    stripped = code.strip()
    if not stripped or not brackets_balanced(stripped):
        return
    indent = indent_of(text)
    if lang == "c":
        if (
            not stripped.endswith(";")
            or stripped == ";"
            or "{" in stripped
            or "}" in stripped
            or stripped.startswith(("return", "for", "typedef", "case ", "default"))
            or _C_DECL_RE.match(stripped)
        ):
            return
        yield _Edit("delete", len(indent), indent + ";", "delete statement")
        return
    if (
        stripped.endswith((":", "\\", ","))
        or stripped.startswith(_PY_NO_DELETE)
        or stripped[0] in ")]}"
        or stripped in ("break", "continue")
    ):
        return
    yield _Edit("delete", len(indent), indent + "pass", "delete statement")


def _return(text: str, code: str, lang: Lang) -> Iterator[_Edit]:
    if lang == "c":
        m = re.match(r"^(\s*return\s+)(.*?)\s*;\s*$", code.rstrip())
        if not m or not m.group(2):
            return
        expr = text[m.start(2) : m.end(2)]
        new = "1" if expr.strip() == "0" else "0"
    else:
        m = re.match(r"^(\s*return\s+)(.*?)\s*$", code.rstrip())
        if not m or not m.group(2):
            return
        expr = text[m.start(2) : m.end(2)]
        swap = {"True": "False", "False": "True"}
        if expr.strip() == "None":
            return
        new = swap.get(expr.strip(), "None")
    mutated = text[: m.start(2)] + new + text[m.end(2) :]
    yield _Edit("return", m.start(2), mutated, f"return {expr.strip()} -> return {new}")


_CONTROL = re.compile(r"^(?:\}\s*)?(?:if|else|elif|for|while|case|default|except|try|do)\b")


def _early_return(text: str, code: str, lang: Lang, before: list[str]) -> Iterator[_Edit]:
    """`return ...` inside a conditional block (the nearest less-indented line above it in the
    hunk opens an if/else/loop/case): removed, so control falls through."""
    stripped = code.strip()
    if not re.match(r"^return\b", stripped) or (lang == "c" and not stripped.endswith(";")):
        return
    width = len(indent_of(text))
    for prev in reversed(before):
        if not prev.strip():
            continue
        if len(indent_of(prev)) < width:
            if _CONTROL.match(prev.strip()):
                empty = ";" if lang == "c" else "pass"
                yield _Edit("early-return", width, indent_of(text) + empty, "remove early return")
            return


_ALLOC_RE = re.compile(
    r"\b(?:malloc|calloc|realloc|reallocarray|alloca|xmalloc|xcalloc|xrealloc|xzalloc|"
    r"g_malloc0?|g_new0?|kmalloc|kzalloc|kcalloc)\s*\("
)


def _alloc_spans(code: str) -> list[tuple[int, int]]:
    """The argument spans of allocation calls on a C line."""
    out = []
    for m in _ALLOC_RE.finditer(code):
        close = matching_paren(code, m.end() - 1)
        if close > 0:
            out.append((m.end(), close))
    return out


def _over_allocates(edit: _Edit, code: str) -> bool:
    """Does this C edit only make an allocation larger (a raised constant, `-` made `+`)?"""
    inside = any(lo <= edit.column < hi for lo, hi in _alloc_spans(code))
    if not inside:
        return False
    if edit.operator == "constant":
        m = re.match(r"constant (\S+) -> (\S+)$", edit.description)
        return m is not None and literal_value(m.group(2)) > literal_value(m.group(1))
    return edit.operator == "arithmetic" and edit.description == "arithmetic '-' -> '+'"


_HANDLER_RE = re.compile(r"^(\s*except\s+)(.+?)(\s+as\s+\w+)?\s*:\s*$")
_SUPPRESS_RE = re.compile(r"\bsuppress\(([^()]+)\)")


def _handler(text: str, code: str, lang: Lang) -> Iterator[_Edit]:
    """Python: what an added handler catches replaced by nothing (`except RecursionError as
    err:` -> `except () as err:`, `suppress(RecursionError)` -> `suppress()`). A fix whose
    point is to catch an error (CVE-2024-4340's upstream fix) adds no operator, constant or
    statement the other operators mutate; this mutant is the fix undone, and its reproducer
    must kill it."""
    if lang != "python":
        return
    m = _HANDLER_RE.match(code.rstrip())
    if m and m.group(2).strip() != "()":
        caught = text[m.start(2) : m.end(2)].strip()
        mutated = text[: m.start(2)] + "()" + text[m.end(2) :]
        yield _Edit(
            "handler", m.start(2), mutated, f"except {caught} -> except () (catches nothing)"
        )
    for s in _SUPPRESS_RE.finditer(code):
        caught = text[s.start(1) : s.end(1)].strip()
        mutated = text[: s.start(1)] + text[s.end(1) :]
        yield _Edit(
            "handler", s.start(1), mutated, f"suppress({caught}) -> suppress() (suppresses nothing)"
        )


def line_edits(
    text: str, lang: Lang, kinds: str | None = None, before: list[str] | None = None
) -> list[_Edit]:
    """Every distinct mutation of one line, in operator order then column order. `kinds`: the
    line's classification read with its hunk (`lang.classify_lines`); `before`: the hunk's
    new-side lines above it (for `early-return`)."""
    if lang not in ("c", "python"):
        return []
    code = code_only(text, lang, kinds)
    if _skip_line(code.strip(), lang):
        return []
    groups = [
        _relational(text, code),
        _arithmetic(text, code, lang),
        constant_edits(text, code, lang),
        negate_edits(text, code, lang),
        clause_edits(text, code, lang),
        _delete(text, code, lang),
        _early_return(text, code, lang, before or []),
        _return(text, code, lang),
        _handler(text, code, lang),
    ]
    seen = {text}
    out: list[_Edit] = []
    for group in groups:
        for edit in sorted(group, key=lambda e: e.column):
            if edit.mutated not in seen:
                seen.add(edit.mutated)
                if lang == "c" and _over_allocates(edit, code):
                    edit = _Edit(**{**edit.__dict__, "effect": "over-allocates"})
                out.append(edit)
    return out


def mutable_files(files: list[FileDiff]) -> list[FileDiff]:
    return [
        f
        for f in files
        if f.new_path is not None
        and not f.binary
        and language(f.new_path) in ("c", "python")
        and not is_test_path(f.new_path)
    ]


def generate(patches: list[str], *, strip: int = 1) -> list[Mutant]:
    """All mutants of a patch series, in deterministic order with ids m001, m002, ..."""
    series = parse_series(patches, strip=strip)
    out: list[Mutant] = []
    split = [p.split("\n") for p in patches]
    for f in mutable_files(series.files):
        lang = language(f.path)
        for h in f.hunks:
            new_side = [ln for ln in h.lines if ln.kind != "-"]
            texts = [ln.text for ln in new_side]
            kinds = classify_lines(texts, lang)
            for k, ln in enumerate(new_side):
                if ln.kind != "+":
                    continue
                for edit in line_edits(ln.text, lang, kinds[k], texts[:k]):
                    out.append(_make(len(out) + 1, f, ln, edit, patches, split))
    return out


def _make(
    n: int, f: FileDiff, ln: Line, edit: _Edit, patches: list[str], split: list[list[str]]
) -> Mutant:
    lines = list(split[f.patch])
    lines[ln.index] = "+" + edit.mutated
    series = list(patches)
    series[f.patch] = "\n".join(lines)
    return Mutant(
        id=f"m{n:03d}",
        operator=edit.operator,
        file=f.path,
        line=ln.new_no or 0,
        column=edit.column,
        original=ln.text,
        mutated=edit.mutated,
        description=edit.description,
        patch_index=f.patch,
        patches=tuple(series),
        effect=edit.effect,
    )
