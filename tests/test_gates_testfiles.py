"""Which files are the package's tests, the patch without them, and how a patch weakens them
(trace_sandbox/gates/testfiles.py; issue 25). Real builds: the calibration table's rows
roster-loosened-test and pager-flaky-test (tests/test_gates_calibration.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trace_sandbox.gates.testfiles import (
    IDENTICAL,
    filter_series,
    named_paths,
    sections,
    weakenings,
    write_base_test_patches,
)


def _patch(path: str, old: list[str], new: list[str], *, start: int = 1) -> str:
    body = [f"-{x}" for x in old] + [f"+{x}" for x in new]
    head = f"@@ -{start},{len(old)} +{start},{len(new)} @@"
    return "\n".join([f"--- a/{path}", f"+++ b/{path}", head, *body]) + "\n"


SRC = _patch("lib.c", ["  return x;"], ["  return x + 1;"])

# (what, patch of a test file, the finding kinds it must give)
WEAKENED = [
    (
        "a comparison loosened with || [ -z ]",
        _patch(
            "tests/run.sh",
            ['if [ "$got" = "$want" ]; then'],
            ['if [ "$got" = "$want" ] || [ -z "$got" ]; then'],
        ),
        {"removed-or-edited", "or-empty"},
    ),
    ("|| true added", _patch("tests/run.sh", [], ["./check_all || true"]), {"or-true"}),
    ("an early exit 0", _patch("tests/run.sh", [], ["exit 0"]), {"exit-0"}),
    ("exit 77 (skipped)", _patch("tests/check.sh", [], ["exit 77"]), {"exit-77"}),
    ("set +e", _patch("tests/run.sh", [], ["set +e"]), {"set-e-off"}),
    ("pytest.mark.skip", _patch("test_pager.py", [], ["@pytest.mark.skip"]), {"py-skip"}),
    (
        "pytest.mark.skipif",
        _patch("tests/test_a.py", [], ["@pytest.mark.skipif(True, reason='x')"]),
        {"py-skip"},
    ),
    ("unittest.skip", _patch("tests/test_a.py", [], ["@unittest.skip('slow')"]), {"py-skip"}),
    (
        "an assertion deleted",
        _patch("tests/test_a.py", ["    assert f(1) == 2"], []),
        {"removed-or-edited"},
    ),
    (
        "an expected value edited",
        _patch("tests/test_a.py", ["    assert f(1) == 2"], ["    assert f(1) == 3"]),
        {"removed-or-edited"},
    ),
    (
        "a golden file edited",
        _patch("tests/golden/out.txt", ["a b"], ["a c"]),
        {"removed-or-edited"},
    ),
    (
        "a test file deleted",
        "--- a/tests/test_a.py\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-def test_a():\n-    assert 1\n",
        {"test-file-deleted"},
    ),
    ("#if 0 around a C test", _patch("t/parse_test.c", [], ["#if 0"]), {"if-0"}),
]


@pytest.mark.parametrize(("what", "patch", "kinds"), WEAKENED, ids=[w for w, _, _ in WEAKENED])
def test_a_weakened_test_is_found_with_its_hunk(what: str, patch: str, kinds: set[str]) -> None:
    kept, dropped = filter_series([SRC + patch], set())
    assert kept == [SRC]  # the source change stays, the test change is left out
    found = weakenings(dropped)
    assert {f["kind"] for f in found} == kinds, what
    assert all(f["hunk"].startswith("@@") or f["kind"] == "test-file-deleted" for f in found)


ADDED = [
    (
        "a new test function",
        _patch("tests/test_a.py", [], ["def test_b():", "    assert f(2) == 4"]),
    ),
    ("a new TAP check", _patch("tests/run.sh", [], ['check "page 11" "101 102 103 " 103 10 11'])),
    ("a new test file", "--- /dev/null\n+++ b/tests/test_new.py\n@@ -0,0 +1 @@\n+assert 1\n"),
]


@pytest.mark.parametrize(("what", "patch"), ADDED, ids=[w for w, _ in ADDED])
def test_adding_tests_is_not_weakening(what: str, patch: str) -> None:
    kept, dropped = filter_series([SRC + patch], set())
    assert kept == [SRC] and len(dropped) == 1  # still left out of the base-test build
    assert weakenings(dropped) == [], what


def test_a_source_file_is_never_a_test_and_is_kept() -> None:
    kept, dropped = filter_series([SRC, _patch("src/parse.py", ["a = 1"], ["a = 2"])], set())
    assert kept == [SRC, _patch("src/parse.py", ["a = 1"], ["a = 2"])] and dropped == []


def test_files_the_check_scripts_name_are_tests(tmp_path: Path) -> None:
    (tmp_path / "check.sh").write_text("true\n")
    (tmp_path / "golden").mkdir()
    (tmp_path / "golden" / "out.txt").write_text("x\n")
    (tmp_path / "lib.c").write_text("x\n")
    named = named_paths(
        ["sh ./check.sh $out/bin/p", "cmp out golden/out.txt && echo ok"], str(tmp_path)
    )
    assert named == {"check.sh", "golden/out.txt"}
    named_dir = named_paths(['diff -r "golden" out'], str(tmp_path))
    assert named_dir == {"golden/"}
    patch = _patch("check.sh", ['[ "$a" = "$b" ]'], ['[ "$a" = "$b" ] || true']) + _patch(
        "golden/out.txt", ["x"], ["y"]
    )
    kept, dropped = filter_series([SRC + patch], named)
    assert kept == [SRC]
    assert {f["file"] for f in weakenings(dropped)} == {"check.sh", "golden/out.txt"}
    # without the scripts naming them, neither is a test by convention
    assert filter_series([SRC + patch], set())[0] == [SRC + patch]


def test_a_git_patch_splits_per_file_and_drops_its_preamble() -> None:
    text = (
        "From abc Mon Sep 17 00:00:00 2001\nSubject: fix\n\n---\n"
        "diff --git a/lib.c b/lib.c\nindex 1..2 100644\n"
        + SRC
        + "diff --git a/tests/t.sh b/tests/t.sh\nindex 1..2 100644\n"
        + _patch("tests/t.sh", ["a"], ["b"])
    )
    parts = sections(text)
    assert [s.diff.path for s in parts] == ["lib.c", "tests/t.sh"]
    assert parts[0].text.startswith("diff --git a/lib.c")


def _write(tmp: Path, patches: list[str]) -> Path:
    paths = []
    for i, text in enumerate(patches):
        p = tmp / f"in-{i}.patch"
        p.write_text(text)
        paths.append(str(p))
    out = tmp / "out"
    out.mkdir()
    write_base_test_patches({"patches": paths, "tree": "", "scripts": []}, str(out))
    return out


def test_a_series_touching_no_test_is_marked_identical(tmp_path: Path) -> None:
    """Only then does tests-post-base reuse the patched suite's build (package-tests.nix.j2)."""
    out = _write(tmp_path, [SRC, _patch("src/parse.py", ["a = 1"], ["a = 2"])])
    assert (out / IDENTICAL).is_file()
    assert (out / "0.patch").read_text() == SRC


@pytest.mark.parametrize(
    ("what", "patches"),
    [
        ("a loosened test", [SRC + WEAKENED[0][1]]),
        ("a new test (welcome, still left out)", [SRC, _patch("tests/t.sh", [], ["new"])]),
        ("a preamble dropped (not byte for byte)", ["From abc\nSubject: fix\n\n---\n" + SRC]),
    ],
)
def test_a_series_the_filter_changes_is_never_identical(
    tmp_path: Path, what: str, patches: list[str]
) -> None:
    assert not (_write(tmp_path, patches) / IDENTICAL).exists(), what
