"""Mutants of the lines a patch adds: each one is the candidate patch with one added line changed.

Operators, applied to every added line of a C or Python source file (test files excluded), in
this fixed order, each left to right along the line (lines that only write diagnostics to stderr
or a logger are left alone, as PIT's `avoidCallsTo` does for logging):

1. ``relational``  ``<``↔``<=``, ``>``↔``>=``, ``==``↔``!=``
2. ``arithmetic``  binary ``+``↔``-``, ``*``→``/``, ``/``→``*``, ``//``→``*``, ``%``→``*``,
   ``+=``↔``-=``
3. ``constant``    a decimal integer literal n becomes n+1 and (when n ≥ 1) n-1
4. ``negate``      the condition of ``if``/``while`` (C) or ``if``/``elif``/``while`` (Python)
5. ``delete``      a whole statement becomes an empty one (``;`` in C, ``pass`` in Python)
6. ``return``      ``return e`` becomes ``return 0`` (``return 1`` when e is 0) in C;
   ``return None`` (``True``↔``False``) in Python

A mutant keeps the line count of its patch, so the patch still applies with its own context and
line numbers stay comparable. Identical mutated lines are generated once. Ids are ``m001``… in
that order: same patch, same mutants, same ids.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from .diff import FileDiff, Line, parse_series
from .lang import Lang, brackets_balanced, code_only, indent_of, is_test_path, language

OPERATORS = ("relational", "arithmetic", "constant", "negate", "delete", "return")

_REL = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "=="}
_REL_RE = re.compile(r"<<=|>>=|<<|>>|->|=>|<=|>=|==|!=|<|>|=")
_ARITH = {"+": "-", "-": "+", "*": "/", "/": "*", "//": "*", "%": "*", "+=": "-=", "-=": "+="}
_ARITH_RE = re.compile(r"\+\+|--|->|\*\*|//|\+=|-=|\*=|/=|%=|[-+*/%]")
_INT_RE = re.compile(r"(?<![\w.])(\d+)([uUlL]*)(?![\w.])")
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
        }


@dataclass(frozen=True)
class _Edit:
    operator: str
    column: int
    mutated: str
    description: str


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


def _constant(text: str, code: str) -> Iterator[_Edit]:
    for m in _INT_RE.finditer(code):
        n = int(m.group(1))
        for new in (n + 1, n - 1):
            if new < 0:
                continue
            mutated = text[: m.start(1)] + str(new) + text[m.end(1) :]
            yield _Edit("constant", m.start(1), mutated, f"constant {n} -> {new}")


def _matching_paren(code: str, open_at: int) -> int:
    depth = 0
    for k in range(open_at, len(code)):
        if code[k] == "(":
            depth += 1
        elif code[k] == ")":
            depth -= 1
            if depth == 0:
                return k
    return -1


def _negate(text: str, code: str, lang: Lang) -> Iterator[_Edit]:
    if lang == "c":
        for m in re.finditer(r"\b(if|while)\s*\(", code):
            open_at = m.end() - 1
            close = _matching_paren(code, open_at)
            if close < 0:
                continue
            cond = text[open_at + 1 : close]
            mutated = text[: open_at + 1] + "!(" + cond + ")" + text[close:]
            yield _Edit("negate", open_at + 1, mutated, f"negate {m.group(1)} condition")
        return
    pm = re.match(r"^(\s*)(if|elif|while)\s+", code)
    if not pm:
        return
    m = pm
    depth = 0
    colon = -1
    for k in range(m.end(), len(code)):
        ch = code[k]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == ":" and depth == 0 and code[k + 1 : k + 2] != "=":
            colon = k
            break
    if colon < 0:
        return
    cond = text[m.end() : colon].rstrip()
    mutated = text[: m.end()] + "not (" + cond + ")" + text[m.end() + len(cond) :]
    yield _Edit("negate", m.end(), mutated, f"negate {m.group(2)} condition")


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


def line_edits(text: str, lang: Lang) -> list[_Edit]:
    """Every distinct mutation of one line, in operator order then column order."""
    if lang not in ("c", "python"):
        return []
    code = code_only(text, lang)
    if _skip_line(code.strip(), lang):
        return []
    groups = [
        _relational(text, code),
        _arithmetic(text, code, lang),
        _constant(text, code),
        _negate(text, code, lang),
        _delete(text, code, lang),
        _return(text, code, lang),
    ]
    seen = {text}
    out: list[_Edit] = []
    for group in groups:
        for edit in sorted(group, key=lambda e: e.column):
            if edit.mutated not in seen:
                seen.add(edit.mutated)
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
        for ln in f.added:
            for edit in line_edits(ln.text, lang):
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
    )
