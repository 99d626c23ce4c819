"""The scope/minimality gate on small diffs: exact reason codes and rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.build_records import GateRecord
from trace_sandbox.gates.scope import ScopePolicy, evaluate, in_scope

FORK = Path(__file__).parent / "fixtures" / "fork" / "trace" / "candidates"


def diff(path: str, removed: list[str], added: list[str], start: int = 10) -> str:
    """A -U0 diff of one hunk in one file."""
    old = f"-{start},{len(removed)}" if len(removed) != 1 else f"-{start}"
    new = f"+{start},{len(added)}" if len(added) != 1 else f"+{start}"
    body = [f"-{x}" for x in removed] + [f"+{x}" for x in added]
    head = [f"diff --git a/{path} b/{path}", f"--- a/{path}", f"+++ b/{path}"]
    return "\n".join([*head, f"@@ {old} {new} @@", *body]) + "\n"


def rules(record: dict[str, object]) -> list[str]:
    details = record["details"]
    assert isinstance(details, dict)
    return [f["rule"] for f in details["findings"]]


def test_the_fork_s_real_fix_passes_and_is_a_valid_gate_record() -> None:
    text = (FORK / "cparse-key-overflow" / "fix.patch").read_text()
    rec = evaluate([text], ScopePolicy(scope=("pkgs/cparse/**",)))
    assert rec["passed"] is True
    assert rec["reasons"] == []
    assert rec["score"] == 1.0
    details = GateRecord.model_validate(rec).details
    assert (details["files"], details["hunks"], details["lines_added"]) == (1, 1, 4)


def test_files_outside_the_declared_scope() -> None:
    text = diff("src/a.c", ["x = 1;"], ["x = 2;"]) + diff(
        "Makefile", ["\tcc a.c"], ["\tcc -O2 a.c"]
    )
    rec = evaluate([text], ScopePolicy(scope=("src/*.c",)))
    assert rec["reasons"] == ["scope-outside-declared"]
    assert rules(rec) == ["scope.outside-declared-scope"]
    assert rec["score"] == 0.5  # half of the changed lines are in scope
    # the default scope (sources and nix expressions) also leaves the Makefile out
    assert evaluate([text], ScopePolicy())["reasons"] == ["scope-outside-declared"]


def test_fork_relative_scope_globs_cover_source_relative_patch_paths() -> None:
    assert in_scope("cparse.c", ["pkgs/cparse/**"])
    assert in_scope("src/x/y.c", ["src/**/*.c"])
    assert not in_scope("lib/a.c", ["src/*.c"])
    assert not in_scope("Makefile", ["*.c", "*.h"])


def test_size_bounds() -> None:
    text = diff("a.c", ["a;", "b;"], ["c;", "d;"]) + diff("b.c", ["e;"], ["f;"], start=40)
    policy = ScopePolicy(max_files=1, max_hunks=1, max_lines=5)
    rec = evaluate([text], policy)
    assert rec["reasons"] == ["scope-too-large"]
    assert rules(rec) == ["scope.too-many-files", "scope.too-many-hunks", "scope.too-many-lines"]
    assert evaluate([text], ScopePolicy(max_files=2, max_hunks=2, max_lines=6))["passed"]


@pytest.mark.parametrize(
    ("path", "removed", "added", "expected"),
    [
        ("inc/p.h", ["int parse(const char *s);"], ["int parse(const char *s, int n);"], 1),
        ("inc/p.h", ["int parse(const char *s,", "          size_t n);"], [], 1),
        ("inc/p.h", ["int parse(const char *s);"], ["int  parse( const char * s );"], 0),
        ("inc/p.h", [], ["int added(void);"], 0),
        ("src/p.c", ["int parse(const char *s);"], ["int parse(const char *s, int n);"], 0),
        ("m/page.py", ["def page(items, n):"], ["def page(items, n, size=10):"], 1),
        ("m/page.py", ["def _helper(a):"], ["def _helper(a, b):"], 0),
        ("m/page.py", ["def __init__(self):"], ["def __init__(self, x):"], 1),
        ("m/page.py", ["def page(items) -> list:"], ["def page(items) -> list:"], 0),
    ],
)
def test_public_interface_changes(
    path: str, removed: list[str], added: list[str], expected: int
) -> None:
    rec = evaluate([diff(path, removed, added)], ScopePolicy(scope=("**",)))
    assert rules(rec).count("scope.public-interface-changed") == expected
    assert rec["reasons"] == (["scope-interface-changed"] if expected else [])


@pytest.mark.parametrize(
    ("path", "removed", "added", "rule"),
    [
        ("a.c", ["    assert(n < cap);"], [], "scope.weakened.assert-removed"),
        ("a.py", ["    assert n < cap"], ["    pass"], "scope.weakened.assert-removed"),
        (
            "a.c",
            ["    if (i >= len)", "        return -1;"],
            [],
            "scope.weakened.bounds-check-removed",
        ),
        (
            "a.c",
            ["    if (p == NULL)", "        goto fail;"],
            ["    x();"],
            "scope.weakened.error-return-removed",
        ),
        ("a.py", ["    raise ValueError(n)"], ["    n = 0"], "scope.weakened.error-return-removed"),
        (
            "a.py",
            ["    x()"],
            ["    try:", "        x()", "    except Exception:", "        pass"],
            "scope.weakened.catch-all-added",
        ),
        ("a.py", [], ["    except:"], "scope.weakened.catch-all-added"),
        ("build.sh", ["make check"], ["make check || true"], "scope.weakened.error-suppressed"),
        ("Makefile", ["\t./t"], ["\t./t 2>/dev/null"], "scope.weakened.error-suppressed"),
        (
            "a.c",
            ["    if (write(fd, b, n) < 0) return -1;"],
            ["    (void)write(fd, b, n);"],
            "scope.weakened.return-code-ignored",
        ),
        (
            "a.py",
            ["    run(cmd, check=True)"],
            ["    run(cmd, check=False)"],
            "scope.weakened.return-code-ignored",
        ),
        (
            "tests/test_p.py",
            [],
            ["@pytest.mark.skip(reason='flaky')"],
            "scope.weakened.test-disabled",
        ),
        (
            "tests/test_p.py",
            ["def test_last_page():", "    assert f() == 3"],
            [],
            "scope.weakened.test-deleted",
        ),
    ],
)
def test_weakened_checks(path: str, removed: list[str], added: list[str], rule: str) -> None:
    rec = evaluate([diff(path, removed, added)], ScopePolicy(scope=("**",)))
    assert rule in rules(rec), rules(rec)
    expected = "scope-tests-disabled" if "test-" in rule else "scope-weakened-checks"
    assert expected in rec["reasons"]


def test_the_bounds_check_rule_alone_for_a_removed_guard() -> None:
    rec = evaluate(
        [diff("a.c", ["    if (i >= len)", "        return -1;"], [])], ScopePolicy(scope=("**",))
    )
    assert rules(rec) == [
        "scope.weakened.bounds-check-removed",
        "scope.weakened.error-return-removed",
    ]


@pytest.mark.parametrize(
    ("path", "removed", "added"),
    [
        ("a.c", ["    assert(n < cap);"], ["    assert(n <= cap);"]),  # changed, not removed
        ("a.c", ["    if (i > len)"], ["    if (i >= len)"]),  # a stricter bound
        ("a.c", [], ["    if (klen >= KEY_MAX)", "        return -1;"]),  # adding checks
        ("a.py", ["    except ValueError:"], ["    except (ValueError, KeyError):"]),
        ("a.c", ['    x = f("a || true");'], ['    x = g("a || true");']),  # same count
    ],
)
def test_changes_that_do_not_weaken(path: str, removed: list[str], added: list[str]) -> None:
    rec = evaluate([diff(path, removed, added)], ScopePolicy(scope=("**",)))
    assert rec["passed"] is True, rules(rec)


def test_deleted_test_file() -> None:
    text = (
        "diff --git a/tests/test_page.py b/tests/test_page.py\n"
        "deleted file mode 100644\n"
        "--- a/tests/test_page.py\n"
        "+++ /dev/null\n"
        "@@ -1,2 +0,0 @@\n"
        "-def test_one():\n"
        "-    assert page(3) == [7]\n"
    )
    rec = evaluate([text], ScopePolicy(scope=("**",)))
    assert rec["reasons"] == ["scope-tests-disabled"]
    assert rules(rec) == ["scope.weakened.test-deleted"]


def test_the_plausible_but_wrong_fix_is_in_scope_and_small() -> None:
    """What this gate cannot see: the wrong fix changes a constant, touches nothing else."""
    text = (FORK / "cparse-wrong-fix" / "fix.patch").read_text()
    rec = evaluate([text], ScopePolicy(scope=("pkgs/cparse/**",)))
    assert rec["passed"] is True


def test_the_kind_s_default_scope_is_the_gate_s() -> None:
    import tomli

    from trace_sandbox.gates.scope import DEFAULT_SCOPE

    kinds = tomli.loads((Path(__file__).parent.parent / "graphs" / "gates.toml").read_text())
    assert (
        tuple(kinds["kinds"]["gate-scope"]["params"]["default_scope"]["default"]) == DEFAULT_SCOPE
    )


@pytest.mark.parametrize(
    ("path", "removed", "added", "expected"),
    [
        # a check traded for an unrelated one is a removal, though the counts are equal
        (
            "a.c",
            ["    if (klen >= KEY_MAX)", "        return -1;"],
            ["    if (klen > 100)", "        return -1;"],
            ["scope.weakened.bounds-check-removed", "scope.weakened.error-return-removed"],
        ),
        (
            "a.c",
            ["    assert(n < cap);"],
            ["    assert(n < 100);"],
            ["scope.weakened.assert-removed"],
        ),
        (
            "a.py",
            ["    assert len(key) <= MAX_KEY, 'too long'"],
            ["    assert len(key) <= 100"],
            ["scope.weakened.assert-removed"],
        ),
        (  # Python if-raise: the guard is what the error return tested
            "a.py",
            ["    if key not in table:", "        raise KeyError(key)"],
            ["    if other:", "        raise KeyError(key)"],
            ["scope.weakened.error-return-removed"],
        ),
        (
            "a.py",
            ["    if n > cap: raise ValueError(n)"],
            ["    if n > 10: raise ValueError(n)"],
            ["scope.weakened.bounds-check-removed", "scope.weakened.error-return-removed"],
        ),
        # checks that test at least the same identifiers keep them
        (
            "a.c",
            ["    if (klen >= KEY_MAX)", "        return -1;"],
            ["    if (klen >= KEY_MAX || klen == 0)", "        return -1;"],
            [],
        ),
        (  # a cast's type name is not what the check tests
            "a.c",
            ["    if ((size_t)(eq - line) >= KEY_MAX) {", "        return -1;", "    }"],
            ["    if (eq - line > KEY_MAX - 1) {", "        return -1;", "    }"],
            [],
        ),
        (
            "a.c",
            ["    if (p == NULL)", "        goto fail;"],
            ["    if (!p)", "        goto fail;"],
            [],
        ),
        (
            "a.py",
            ["    if key not in table:", "        raise KeyError(key)"],
            ["    if key not in table or not key:", "        raise LookupError(key)"],
            [],
        ),
        ("a.py", ["    raise ValueError(n)"], ["    raise KeyError(n)"], []),  # no guard: by count
        (  # two checks merged into one that tests both
            "a.c",
            ["    assert(i < n);", "    assert(j < m);"],
            ["    assert(i < n && j < m);"],
            [],
        ),
    ],
)
def test_removed_checks_are_matched_by_what_they_test(
    path: str, removed: list[str], added: list[str], expected: list[str]
) -> None:
    rec = evaluate([diff(path, removed, added)], ScopePolicy(scope=("**",)))
    assert rules(rec) == expected
    assert rec["passed"] is (not expected)


def test_a_removed_check_names_what_it_tested() -> None:
    text = diff("a.c", ["    if (klen >= KEY_MAX)"], ["    if (klen > 100)"])
    (finding,) = evaluate([text], ScopePolicy(scope=("**",)))["details"]["findings"]
    assert (
        finding["message"] == "bounds check removed (it tested KEY_MAX, klen): if (klen >= KEY_MAX)"
    )
    assert finding["line"] == 10


def test_no_size_bound_is_no_limit() -> None:
    """Bounds come from the signing policy; one it does not set does not limit."""
    text = "".join(diff(f"f{i}.c", [f"a{i};"], [f"b{i};"]) for i in range(8))
    rec = evaluate([text], ScopePolicy(max_hunks=8, max_lines=16))
    assert rec["passed"] is True
    assert rec["details"]["limits"] == {"max_files": None, "max_hunks": 8, "max_lines": 16}
    assert rules(evaluate([text], ScopePolicy(max_files=7))) == ["scope.too-many-files"]
