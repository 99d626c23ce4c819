"""The mutation gate's `handler` operator (the sqlparse campaign, CVE-2024-4340): a Python fix
whose point is to catch an error (`except RecursionError as err: raise SQLParseError(...)`)
had no mutant at all (mutation-not-measurable); the handler made to catch nothing is the fix
undone, which the reproducer must kill."""

from __future__ import annotations

from pathlib import Path

import pytest

from trace_sandbox.gates.lang import classify_lines
from trace_sandbox.gates.mutate import generate, line_edits

UPSTREAM = """--- a/sqlparse/sql.py
+++ b/sqlparse/sql.py
@@ -209,2 +209,5 @@
-        for token in self.tokens:
-            yield token
+        try:
+            for token in self.tokens:
+                yield token
+        except RecursionError as err:
+            raise SQLParseError('Maximum recursion depth exceeded') from err
"""


def handler_edits(line: str) -> list[str]:
    return [e.mutated for e in line_edits(line, "python") if e.operator == "handler"]


@pytest.mark.parametrize(
    ("line", "mutated"),
    [
        ("        except RecursionError as err:", "        except () as err:"),
        ("    except Exception:", "    except ():"),
        ("    except (KeyError, ValueError) as e:", "    except () as e:"),
        ("        with suppress(RecursionError):", "        with suppress():"),
        ("    with contextlib.suppress(OSError, ValueError):", "    with contextlib.suppress():"),
    ],
)
def test_a_handler_is_made_to_catch_nothing(line: str, mutated: str) -> None:
    assert handler_edits(line) == [mutated]


@pytest.mark.parametrize(
    "line",
    [
        "    except:",  # a bare except has nothing to empty (the scope gate judges it)
        "    except () as e:",  # already catches nothing
        "    suppress()",
        "    excepted = handle(RecursionError)",  # not a handler
        "    # except RecursionError:",  # a comment
    ],
)
def test_near_misses_get_no_handler_mutant(line: str) -> None:
    assert handler_edits(line) == []


def test_c_has_no_handler_mutants() -> None:
    assert [e for e in line_edits("    except (x) :", "c") if e.operator == "handler"] == []


def test_the_upstream_fix_of_cve_2024_4340_gets_a_mutant() -> None:
    mutants = generate([UPSTREAM])
    assert [(m.operator, m.line, m.mutated.strip()) for m in mutants] == [
        ("handler", 212, "except () as err:")
    ]


FIX = Path(__file__).parent / "fixtures/fork/trace/outside/sqlparse-cve-2024-4340/fix.patch"


def test_a_hunk_that_begins_inside_a_docstring_is_code_after_its_closing_quote() -> None:
    """The upstream fix's hunk opens on flatten's docstring (its closing `\"\"\"` is context):
    read from outside a string, every added line was string and no mutant was made."""
    mutants = generate([FIX.read_text()])
    assert [(m.operator, m.mutated.strip()) for m in mutants] == [
        ("negate", "if not (token.is_group):"),
        ("handler", "except () as err:"),
    ]


def test_a_hunk_that_ends_inside_a_docstring_keeps_its_code() -> None:
    hunk = [
        "    total = count + 1",
        "    return total",
        "",
        "",
        "def other():",
        '    """Other things,',
    ]
    kinds = classify_lines(hunk, "python")
    assert set(kinds[0]) == {"c"} and kinds[5].strip().endswith("s")
    assert set(classify_lines(["x = 1", '"""doc"""', "y = 2"], "python")[2]) == {"c"}


def test_a_hunk_that_begins_in_a_long_docstring_before_short_code() -> None:
    """The poc-depth candidate's second hunk: two long `:param:` lines, the closing quote, then
    two added lines holding single-quoted strings: lines, not characters, decide."""
    hunk = [
        "    :param encoding: The encoding of the statement (optional).",
        "    :returns: A tuple of :class:`~sqlparse.sql.Statement` instances.",
        '    """',
        "    if isinstance(sql, str) and '[' * 200 in sql:",
        "        raise SQLParseError('Maximum recursion depth exceeded')",
        "    return tuple(parsestream(sql, encoding))",
    ]
    kinds = classify_lines(hunk, "python")
    assert "s" not in kinds[3][:30] and set(kinds[5]) == {"c"}
    assert set(kinds[0]) == {"s"}
