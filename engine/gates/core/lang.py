"""Just enough lexical knowledge of C, Python and shell to look at one line of a patch.

`code_mask` marks which characters of a line are code (not inside a string literal or a
comment), so operators inside `"a < b"` or `# x + 1` are never read or mutated. Lines are looked
at one at a time, as a diff presents them; a construct spanning lines (a block comment, a
triple-quoted string) is only seen where it starts.
"""

from __future__ import annotations

import posixpath
from typing import Literal

Lang = Literal["c", "python", "shell", "other"]

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
    out = ["c"] * len(line)
    i = 0
    n = len(line)
    while i < n:
        c = line[i]
        if lang == "c" and line.startswith("//", i):
            out[i:] = ["m"] * (n - i)
            break
        if lang == "c" and line.startswith("/*", i):
            end = line.find("*/", i + 2)
            stop = n if end < 0 else end + 2
            out[i:stop] = ["m"] * (stop - i)
            i = stop
            continue
        if lang in ("python", "shell") and c == "#" and (lang == "python" or _word_start(line, i)):
            out[i:] = ["m"] * (n - i)
            break
        if c in "\"'" and lang != "other":
            quote = c * 3 if lang == "python" and line.startswith(c * 3, i) else c
            j = i + len(quote)
            escapes = not (lang == "shell" and c == "'")
            while j < n and not line.startswith(quote, j):
                j += 2 if escapes and line[j] == "\\" else 1
            stop = min(n, j + len(quote))
            out[i:stop] = ["s"] * (stop - i)
            i = stop
            continue
        i += 1
    return "".join(out)


def _word_start(line: str, i: int) -> bool:
    return i == 0 or line[i - 1] in " \t;&|("


def code_mask(line: str, lang: Lang) -> list[bool]:
    """True for each character that is code, False inside strings and comments."""
    return [k == "c" for k in classify(line, lang)]


def code_only(line: str, lang: Lang) -> str:
    """The line with strings and comments blanked to spaces (same length, same columns)."""
    kinds = classify(line, lang)
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
