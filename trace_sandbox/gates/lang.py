"""Just enough lexical knowledge of C, Python and shell to look at one line of a patch.

`code_mask` marks which characters of a line are code (not inside a string literal or a
comment), so operators inside `"a < b"` or `# x + 1` are never read or mutated. Lines are looked
at one at a time, as a diff presents them; a construct spanning lines (a block comment, a
triple-quoted string) is only seen where it starts.
"""

from __future__ import annotations

import posixpath
import re

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Literal

    Lang = Literal["c", "python", "shell", "other"]
else:  # plain strings at run time: the gates import no `typing` (a process's start-up)
    Lang = str

_C_EXT = {".c", ".h", ".cc", ".cpp", ".cxx", ".hh", ".hpp", ".hxx"}
_PY_EXT = {".py", ".pyi"}
_SH_EXT = {".sh", ".bash"}


def language(path: str) -> Lang:
    ext = posixpath.splitext(path)[1].lower()
    if ext in _C_EXT:
        return "c"
    if ext in _PY_EXT:
        return "python"
    if ext in _SH_EXT or posixpath.basename(path) in {"Makefile", "GNUmakefile", "makefile"}:
        return "shell"
    return "other"


def is_header(path: str) -> bool:
    return posixpath.splitext(path)[1].lower() in {".h", ".hh", ".hpp", ".hxx"}


def classify(line: str, lang: Lang) -> str:
    """One letter per character: 'c' code, 's' inside a string literal, 'm' inside a comment."""
    return classify_text(line, lang)[0]


def classify_text(text: str, lang: Lang, state: str = "") -> tuple[str, str]:
    """`classify` over several lines at once, carrying what spans lines: a C block comment, a
    Python triple-quoted string (a docstring's inner lines are string, not code). `state` is
    what was open when `text` starts ('' none, '/*', or the open triple quote); returns the
    kinds (newlines count as code) and the state open at the end."""
    out = ["c"] * len(text)
    i = 0
    n = len(text)
    if state:
        close = "*/" if state == "/*" else state
        end = text.find(close)
        stop = n if end < 0 else end + len(close)
        out[:stop] = ["m" if state == "/*" else "s"] * stop
        if end < 0:
            return "".join(out), state
        i = stop
    while i < n:
        c = text[i]
        eol = text.find("\n", i)
        eol = n if eol < 0 else eol
        if lang == "c" and text.startswith("//", i):
            out[i:eol] = ["m"] * (eol - i)
            i = eol
            continue
        if lang == "c" and text.startswith("/*", i):
            end = text.find("*/", i + 2)
            stop = n if end < 0 else end + 2
            out[i:stop] = ["m"] * (stop - i)
            if end < 0:
                return "".join(out), "/*"
            i = stop
            continue
        if lang in ("python", "shell") and c == "#" and (lang == "python" or _word_start(text, i)):
            out[i:eol] = ["m"] * (eol - i)
            i = eol
            continue
        if c in "\"'" and lang != "other":
            triple = lang == "python" and text.startswith(c * 3, i)
            quote = c * 3 if triple else c
            j = i + len(quote)
            escapes = not (lang == "shell" and c == "'")
            limit = n if triple or lang == "shell" else eol
            while j < limit and not text.startswith(quote, j):
                j += 2 if escapes and text[j] == "\\" else 1
            stop = min(limit, j + len(quote)) if j < limit else limit
            out[i:stop] = ["s"] * (stop - i)
            if triple and j >= n:
                return "".join(out), quote
            i = stop
            continue
        i += 1
    for k, ch in enumerate(text):
        if ch == "\n":
            out[k] = "c"
    return "".join(out), ""


def classify_lines(lines: list[str], lang: Lang, state: str = "") -> list[str]:
    """`classify_text` of consecutive lines (a hunk's new side), one kinds string per line.
    Python, nothing declared open: a hunk whose triple quotes leave a string open at its end
    either ends inside a docstring or begins inside one (its closing quote in the leading
    context: CVE-2024-4340's fix of sqlparse's `flatten`, whose code after the docstring read as
    string); the reading with fewer lines that are string only wins (a tie: from outside)."""
    text = "\n".join(lines)
    kinds, end = classify_text(text, lang, state)
    if lang == "python" and not state and end:
        inside, still_open = classify_text(text, lang, end)
        if not still_open and _string_lines(text, inside) < _string_lines(text, kinds):
            kinds = inside
    out: list[str] = []
    pos = 0
    for ln in lines:
        out.append(kinds[pos : pos + len(ln)])
        pos += len(ln) + 1
    return out


def _string_lines(text: str, kinds: str) -> int:
    """How many lines of `text` are string only (every non-blank character of kind `s`)."""
    count = 0
    pos = 0
    for line in text.split("\n"):
        marks = [k for ch, k in zip(line, kinds[pos : pos + len(line)], strict=True) if ch.strip()]
        count += bool(marks) and all(k == "s" for k in marks)
        pos += len(line) + 1
    return count


def _word_start(line: str, i: int) -> bool:
    return i == 0 or line[i - 1] in " \t;&|("


def code_mask(line: str, lang: Lang) -> list[bool]:
    """True for each character that is code, False inside strings and comments."""
    return [k == "c" for k in classify(line, lang)]


def code_only(line: str, lang: Lang, kinds: str | None = None) -> str:
    """The line with strings and comments blanked to spaces (same length, same columns);
    `kinds`: the line's classification when known from its neighbours (`classify_lines`)."""
    kinds = classify(line, lang) if kinds is None else kinds
    return "".join(ch if k == "c" else " " for ch, k in zip(line, kinds, strict=True))


def strip_comment(line: str, lang: Lang) -> str:
    """The line without a trailing comment, right-stripped."""
    kinds = classify(line, lang)
    cut = kinds.find("m")
    return (line if cut < 0 else line[:cut]).rstrip()


def brackets_balanced(code: str) -> bool:
    depth = 0
    for ch in code:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth < 0:
                return False
    return depth == 0


def indent_of(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


_TEST_DIRS = {"test", "tests", "testing", "t", "testsuite", "unittests"}


def is_test_path(path: str) -> bool:
    """A test file by the usual conventions (test dirs, test_*.py, *_test.c, ...)."""
    parts = path.split("/")
    if any(p in _TEST_DIRS for p in parts[:-1]):
        return True
    base = posixpath.splitext(parts[-1])[0].lower()
    return base.startswith("test_") or base.endswith(("_test", "_tests")) or base == "conftest"


def definition_patterns(name: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """(Python, C): a line that begins the definition of function `name` (a regex, escaped by
    the caller); the Python pattern's group 1 is the definition's indent."""
    py = re.compile(rf"^(\s*)(?:async\s+)?def\s+{name}\b")
    c = re.compile(rf"^[A-Za-z_].*\b{name}\s*\([^;]*$")
    return py, c
