"""The scope gate's weakened-error-handling rules, as a table: one row per construct.

A row: the language it reads (`c` and `python` read a side's statements, joined while brackets stay
open, strings and comments blanked; `any` reads the raw added and removed lines of any file: shell
in Makefiles, .nix, scripts), the rule it reports (a `[[rules]]` entry of policy/reasons.toml), its
pattern, and what the construct means. A row fires when the patch ADDS more matching statements
than it removes (a moved catch-all is not a new one). The `was-checked` row is the one that
compares the two sides: a C call whose result the removed code tested (`if (f(...) < 0)`, `rc =
f(...)`) and that the added code calls as a bare statement (`f(...);`).

Python's `except ...:` is joined with the statement after it, so `except OSError: return None`
over two lines is read as one. tests/test_gates_scope_rules.py has a positive and a negative
example for every row.
"""

from __future__ import annotations

import re

from ._dataclasses import dataclass

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Literal

CATCH_ALL = "scope.weakened.catch-all-added"
SUPPRESSED = "scope.weakened.error-suppressed"
IGNORED = "scope.weakened.return-code-ignored"
DEFAULTED = "scope.weakened.except-returns-default"
DISABLED = "scope.weakened.test-disabled"


@dataclass(frozen=True)
class Row:
    """One row of the weakening rules: language, rule and pattern."""

    lang: Literal["c", "python", "any"]
    rule: str
    pattern: re.Pattern[str]
    means: str
    how: Literal["count", "was-checked"] = "count"
    tests_too: bool = False  # also in test files (otherwise a test's own handlers are its own)


_DEFAULT = r"(?:None|True|False|-?\d+|''|\"\"|\[\]|\{\}|\(\)|\w+\(\))?"

ROWS: tuple[Row, ...] = (
    Row("python", CATCH_ALL, re.compile(r"^except\s*:"), "bare `except:` catches everything"),
    Row(
        "python",
        CATCH_ALL,
        re.compile(r"^except\s*\(?\s*Exception\b"),
        "`except Exception` catches every error",
    ),
    Row(
        "python",
        CATCH_ALL,
        re.compile(r"^except\s*\(?[^:]*\bBaseException\b"),
        "`except BaseException` catches everything, exits and interrupts too",
    ),
    Row(
        "python",
        CATCH_ALL,
        re.compile(r"\bsuppress\s*\(\s*[^)]*\b(?:Exception|BaseException)\b"),
        "`with contextlib.suppress(Exception):` is a catch-all that hides every error",
    ),
    Row(
        "python",
        DEFAULTED,
        re.compile(r"^except\b[^:]*:\s*return\s*" + _DEFAULT + r"\s*$"),
        "`except ...: return <default>` turns an error into an ordinary-looking value",
    ),
    Row(
        "python",
        IGNORED,
        re.compile(r"\bcheck\s*=\s*False\b|\berrors\s*=\s*['\"]ignore['\"]"),
        "a subprocess's failure or a decoding error ignored (check=False, errors='ignore')",
    ),
    Row(
        "c",
        CATCH_ALL,
        re.compile(r"\bcatch\s*\(\s*\.\.\.\s*\)"),
        "`catch (...)` catches every exception",
    ),
    Row(
        "c",
        IGNORED,
        re.compile(r"^\(\s*void\s*\)\s*\w+\s*\("),
        "a call's result discarded with a (void) cast",
    ),
    Row(
        "c",
        IGNORED,
        re.compile(r"^(\w+)\s*\(.*\)\s*;$"),
        "a call whose result was checked is now a bare statement (its error is ignored)",
        how="was-checked",
    ),
    Row(
        "any",
        SUPPRESSED,
        re.compile(r"\|\|\s*(?:true|:)(?:\s|;|$|\))"),
        "`|| true` turns a failure into success",
        tests_too=True,
    ),
    Row(
        "any",
        SUPPRESSED,
        re.compile(r"2>\s*/dev/null|&>\s*/dev/null"),
        "`2>/dev/null` hides the error message",
        tests_too=True,
    ),
    Row(
        "any",
        SUPPRESSED,
        re.compile(r"\bset\s+\+e\b"),
        "`set +e` lets a script run on after a failing command",
        tests_too=True,
    ),
    Row(
        "any",
        DISABLED,
        re.compile(
            r"@pytest\.mark\.(?:skip|xfail)|@unittest\.skip|\bpytest\.skip\s*\(|\.skipTest\s*\(|"
            r"^\s*#\s*if\s+0\b|\bexit\s+77\b|\breturn\s+77\s*;"
        ),
        "a test skipped or compiled out (skip markers, `#if 0`, exit 77)",
        tests_too=True,
    ),
    # outside campaign (issue 25): a catch-all spelled inside a tuple or as an exception group,
    # and a `return` in `finally` (it discards whatever exception the `try` block raised)
    Row(
        "python",
        CATCH_ALL,
        re.compile(r"^except\s*(?:\*\s*\(?\s*Exception\b|\([^:)]*,\s*Exception\b)"),
        "`except (KeyError, Exception)` or `except* Exception` still catches every error",
    ),
    Row(
        "python",
        CATCH_ALL,
        re.compile(r"^finally\s*:\s*return\b"),
        "a `return` in `finally` swallows every exception the `try` block raised",
    ),
)

Stmt = tuple[int | None, str]


def join_except(run: list[Stmt]) -> list[Stmt]:
    """Python: an `except ...:` (or `finally:`) statement joined with the statement after it."""
    out: list[Stmt] = []
    i = 0
    while i < len(run):
        line, code = run[i]
        if re.match(r"^(?:except\b.*|finally\s*):$", code) and i + 1 < len(run):
            out.append((line, f"{code} {run[i + 1][1]}"))
            i += 2
            continue
        out.append((line, code))
        i += 1
    return out


_CHECKED_CALL = re.compile(
    r"^(?:if|while)\s*\(.*?\b(\w+)\s*\(|^(?:\w[\w\s\*]*?)?\w+\s*=\s*(\w+)\s*\("
)


def checked_calls(stmts: list[Stmt]) -> set[str]:
    """Functions whose result a statement tests or stores (`if (f(..))`, `rc = f(..)`)."""
    found: set[str] = set()
    for _, code in stmts:
        m = _CHECKED_CALL.match(code)
        if m:
            found.add(m.group(1) or m.group(2))
    return found - {"if", "while", "sizeof"}


def was_checked(row: Row, removed: list[Stmt], added: list[Stmt]) -> list[Stmt]:
    """Added bare calls of functions whose result the removed code checked."""
    checked = checked_calls(removed) - checked_calls(added)
    hits: list[Stmt] = []
    for line, code in added:
        m = row.pattern.match(code)
        if m and m.group(1) in checked:
            hits.append((line, code))
    return hits
