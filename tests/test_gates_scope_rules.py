"""The scope gate's weakened-handling table (trace_sandbox/gates/weakrules.py ROWS), one test per
row: a patch that adds the construct fires the row; a close look-alike that does not weaken
anything does not (issue 25: `contextlib.suppress(Exception)` was not seen)."""

from __future__ import annotations

import pytest

from trace_sandbox.gates.scope import ScopePolicy, evaluate
from trace_sandbox.gates.weakrules import ROWS, Row

Change = tuple[str, list[str], list[str]]  # path, removed lines, added lines


def diff(change: Change) -> str:
    path, removed, added = change
    body = [f"-{x}" for x in removed] + [f"+{x}" for x in added]
    head = f"@@ -10,{len(removed)} +10,{len(added)} @@"
    return "\n".join([f"--- a/{path}", f"+++ b/{path}", head, *body]) + "\n"


# row's `means` -> (a change that must fire it, a look-alike that must not)
EXAMPLES: dict[str, tuple[Change, Change]] = {
    ROWS[0].means: (
        ("m/a.py", [], ["try:", "    f()", "except:", "    log()"]),
        ("m/a.py", [], ["try:", "    f()", "except ValueError:", "    log()"]),
    ),
    ROWS[1].means: (
        ("m/a.py", [], ["try:", "    f()", "except Exception:", "    pass"]),
        ("m/a.py", [], ["try:", "    f()", "except ExceptionGroupError:", "    raise"]),
    ),
    ROWS[2].means: (
        ("m/a.py", [], ["try:", "    f()", "except (OSError, BaseException) as e:", "    log(e)"]),
        ("m/a.py", [], ["try:", "    f()", "except OSError as e:", "    log(e)"]),
    ),
    ROWS[3].means: (
        ("m/a.py", ["    f()"], ["    with contextlib.suppress(Exception):", "        f()"]),
        (
            "m/a.py",
            ["    f()"],
            ["    with contextlib.suppress(FileNotFoundError):", "        f()"],
        ),
    ),
    ROWS[4].means: (
        (
            "m/a.py",
            [],
            ["    try:", "        return f()", "    except ValueError:", "        return None"],
        ),
        (
            "m/a.py",
            [],
            ["    try:", "        return f()", "    except ValueError:", "        return g(x)"],
        ),
    ),
    ROWS[5].means: (
        ("m/a.py", ["run(cmd, check=True)"], ["run(cmd, check=False)"]),
        ("m/a.py", ["run(cmd)"], ["run(cmd, check=True)"]),
    ),
    ROWS[6].means: (
        ("src/a.cc", [], ["try { f(); } catch (...) {}"]),
        ("src/a.cc", [], ["try { f(); } catch (const std::bad_alloc &) { return -1; }"]),
    ),
    ROWS[7].means: (
        ("src/a.c", ["if (close(fd) < 0) return -1;"], ["(void) close(fd);"]),
        ("src/a.c", ["x = 1;"], ["(void) x;"]),
    ),
    ROWS[8].means: (
        ("src/a.c", ["if (fflush(fp) != 0)", "  return -1;"], ["fflush(fp);"]),
        (
            "src/a.c",
            ["if (fflush(fp) != 0)", "  return -1;"],
            ["rc = fflush(fp);", "if (rc) return -1;"],
        ),
    ),
    ROWS[9].means: (
        ("build.sh", ["make check"], ["make check || true"]),
        ("build.sh", ["make check"], ["make check || exit 1"]),
    ),
    ROWS[10].means: (
        ("build.sh", ["cp a b"], ["cp a b 2>/dev/null"]),
        ("build.sh", ["cp a b"], ["cp a b 2>&1"]),
    ),
    ROWS[11].means: (
        ("build.sh", [], ["set +e"]),
        ("build.sh", [], ["set -e"]),
    ),
    ROWS[12].means: (
        (
            "tests/test_a.py",
            [],
            ["@pytest.mark.skip(reason='flaky')", "def test_b():", "    assert 1"],
        ),
        (
            "tests/test_a.py",
            [],
            ["@pytest.mark.parametrize('x', [1])", "def test_b(x):", "    assert x"],
        ),
    ),
    # outside campaign (issue 25): catch-alls the rows above did not read
    ROWS[13].means: (
        ("m/a.py", [], ["try:", "    f()", "except (KeyError, Exception):", "    log()"]),
        ("m/a.py", [], ["try:", "    f()", "except (KeyError, ExceptionGroupError):", "    log()"]),
    ),
    ROWS[14].means: (
        (
            "m/a.py",
            [],
            [
                "def quiet(fn):",
                "    def run(*a):",
                "        try:",
                "            return fn(*a)",
                "        finally:",
                "            return a[0]",
                "    return run",
            ],
        ),
        ("m/a.py", [], ["try:", "    return f()", "finally:", "    close()"]),
    ),
}


def test_an_exception_group_catch_all_is_one() -> None:
    """`except* Exception` (Python 3.11) is read by the tuple row too."""
    group = ("m/a.py", [], ["try:", "    f()", "except* Exception:", "    log()"])
    assert len(_fired(group, ROWS[13])) == 1


def test_every_row_has_its_examples() -> None:
    assert sorted(EXAMPLES) == sorted(r.means for r in ROWS)
    assert len({r.means for r in ROWS}) == len(ROWS)


def _fired(change: Change, row: Row) -> list[dict[str, object]]:
    rec = evaluate([diff(change)], ScopePolicy(scope=("**",)))
    details = rec["details"]
    assert isinstance(details, dict)
    return [
        f
        for f in details["findings"]
        if f["rule"] == row.rule and str(f["message"]).startswith(row.means)
    ]


@pytest.mark.parametrize("row", ROWS, ids=[f"{r.lang}: {r.means[:40]}" for r in ROWS])
def test_the_row_fires_on_its_construct_and_not_on_a_look_alike(row: Row) -> None:
    positive, negative = EXAMPLES[row.means]
    fired = _fired(positive, row)
    assert len(fired) == 1, fired
    rec = evaluate([diff(positive)], ScopePolicy(scope=("**",)))
    assert "scope-weakened-checks" in rec["reasons"] or "scope-tests-disabled" in rec["reasons"]
    assert _fired(negative, row) == []


def test_a_moved_catch_all_is_not_a_new_one() -> None:
    moved = (
        "m/a.py",
        ["    with contextlib.suppress(Exception):"],
        ["    with contextlib.suppress(Exception):"],
    )
    assert _fired(moved, ROWS[3]) == []
