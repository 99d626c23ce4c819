"""Where a patch landed (trace_sandbox/gates/landing.py) and whether a built mutant is worth a run
(trace_sandbox/gates/equiv.py): explicit files, no nix. The nix tests build both for real."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from trace_sandbox.gates.diff import parse
from trace_sandbox.gates.equiv import check_mutant, python_check, tree_diff
from trace_sandbox.gates.landing import landed, locate, locate_file
from trace_sandbox.gates.mutation import write_mutant

REPO = Path(__file__).resolve().parent.parent
CPARSE = REPO / "tests" / "fixtures" / "fork" / "pkgs" / "cparse" / "src" / "cparse.c"
FIX = REPO / "tests" / "fixtures" / "fork" / "trace" / "candidates" / "cparse-key-overflow"


def patched_cparse(tmp: Path) -> Path:
    """cparse.c with the real fix applied (its four lines after line 14)."""
    lines = CPARSE.read_text().split("\n")
    added = [ln[1:] for ln in (FIX / "fix.patch").read_text().splitlines() if ln[:2] == "+ "]
    out = tmp / "files" / "cparse.c"
    out.parent.mkdir(parents=True)
    out.write_text("\n".join(lines[:14] + added + lines[14:]))
    return out


def test_a_stale_hunk_header_is_located_where_the_patch_landed(tmp_path: Path) -> None:
    """Issue 9 item 3: the header says line 10, patch applied it 2 lines further (as busybox and
    GNU patch do): the added lines are 15..18 in the patched tree, not 13..16."""
    good = (FIX / "fix.patch").read_text()
    stale = good.replace("@@ -12,6 +12,10 @@", "@@ -10,6 +10,10 @@")
    assert stale != good
    patched_cparse(tmp_path)
    where = locate([stale], str(tmp_path / "files"))
    assert where["cparse.c"]["offsets"] == [2]
    assert {landed(where, "cparse.c", n) for n in (13, 14, 15, 16)} == {15, 16, 17, 18}
    assert locate([good], str(tmp_path / "files"))["cparse.c"]["offsets"] == [0]


def test_hunks_found_by_added_lines_alone_and_not_at_all() -> None:
    diff = parse("--- a/f.c\n+++ b/f.c\n@@ -1,2 +1,3 @@\n a\n+b\n c\n")
    (f,) = diff.files
    # the context changed (fuzz): the added line alone is found
    assert locate_file(f, ["x", "y", "z", "b", "q"])["lines"] == {2: 4}
    # found nowhere: the header's numbers stay, and the hunk is reported
    gone = locate_file(f, ["x", "y"])
    assert (gone["lines"], gone["unlocated"]) == ({2: 2}, [1])


def test_tree_diff_ignores_each_sides_own_store_path(tmp_path: Path) -> None:
    a = tmp_path / "nix" / "aaaa-pkg-mutant-1"
    b = tmp_path / "nix" / "bbbb-pkg"
    for root in (a, b):
        (root / "bin").mkdir(parents=True)
        (root / "bin" / "tool").write_bytes(b"\x7fELF rpath=" + str(root).encode() + b"/lib")
        os.symlink("tool", root / "bin" / "alias")
    assert tree_diff(str(a), str(b)) == []  # identical programs: TCE says equivalent
    (a / "bin" / "tool").write_bytes(b"\x7fELF other code")
    assert tree_diff(str(a), str(b)) == ["bin/tool"]
    (b / "share").mkdir()
    (b / "share" / "x").write_text("only in the fix")
    assert tree_diff(str(a), str(b)) == ["bin/tool", "share/x"]


def test_python_mutants_stillborn_equivalent_or_not_code() -> None:
    patched = 'def f(a):\n    """Doc: a < b."""\n    return a + 1\n'
    assert python_check(patched.replace("a + 1", "a +"), patched, "m.py") == (
        "stillborn",
        "m.py: does not compile (SyntaxError, line 3)",
    )
    same = patched.replace("a + 1", "a  +  1  # spaced")
    assert python_check(same, patched, "m.py") == (
        "equivalent",
        "m.py: same AST as the patched file",
    )
    doc = patched.replace("Doc: a < b.", "Doc: a <= b.")
    assert python_check(doc, patched, "m.py") == (
        "not-code",
        "m.py: only a docstring or bare string differs",
    )
    assert python_check(patched.replace("a + 1", "a - 1"), patched, "m.py") is None


def test_check_mutant_on_built_trees(tmp_path: Path) -> None:
    patch = tmp_path / "fix.patch"
    patch.write_text((FIX / "fix.patch").read_text())
    mdir = tmp_path / "mutant"
    write_mutant({"patches": [str(patch)], "index": 1}, str(mdir))
    post, mut = tmp_path / "post", tmp_path / "mut"
    for root, body in ((post, b"fix"), (mut, b"fix")):
        (root / "bin").mkdir(parents=True)
        (root / "bin" / "cparse").write_bytes(body)
    cfg = {"target": str(mut), "post": str(post), "mutant": str(mdir)}
    assert check_mutant(cfg)["status"] == "equivalent"
    (mut / "bin" / "cparse").write_bytes(b"mutated")
    assert check_mutant(cfg)["status"] == "run"
    (mut / ".trace-build-failed").write_text("1\n")
    assert check_mutant(cfg) == {"status": "stillborn", "why": "the mutant does not build (exit 1)"}


def test_changed_files_map_to_installed_files_by_path_or_content(tmp_path: Path) -> None:
    """Issue 10: the patch's `src/<pkg>/x.py` is installed as `lib/python3.X/site-packages/<pkg>/
    x.py`; a renamed install is found by its bytes; two equally good names are no match."""
    from trace_sandbox.gates.coverage import find_by_content, match_path

    installed = [
        "lib/python3.11/site-packages/textcols/__init__.py",
        "lib/python3.11/site-packages/textcols/layout.py",
    ]
    assert match_path("src/textcols/layout.py", installed) == installed[1]
    assert match_path("src/other/__init__.py", installed) == installed[0]  # the name alone
    two = ["lib/a/__init__.py", "lib/b/__init__.py"]
    assert match_path("src/c/__init__.py", two) is None
    # by content: the patched file's copy equals an installed file under another name
    root = tmp_path / "out"
    (root / "lib" / "vendored").mkdir(parents=True)
    (root / "lib" / "vendored" / "_layout_impl.py").write_text("X = 1\n")
    (root / "lib" / "vendored" / "other.py").write_text("X = 2\n")
    patched = tmp_path / "files" / "src" / "textcols" / "layout.py"
    patched.parent.mkdir(parents=True)
    patched.write_text("X = 1\n")
    names = ["lib/vendored/_layout_impl.py", "lib/vendored/other.py"]
    assert find_by_content(str(patched), str(root), names) == "lib/vendored/_layout_impl.py"
    patched.write_text("X = 3\n")
    assert find_by_content(str(patched), str(root), names) is None


def test_an_unmapped_python_file_says_so(tmp_path: Path) -> None:
    import json

    from trace_sandbox.gates.coverage_gate import evaluate

    patch = tmp_path / "fix.patch"
    patch.write_text(
        "--- a/src/pkg/x.py\n+++ b/src/pkg/x.py\n@@ -1,1 +1,2 @@\n a = 1\n+b = a + 1\n"
    )
    cov = tmp_path / "coverage.json"
    files = {"lib/python/other/y.py": {"executable": [1], "executed": [1]}}
    doc = {"build": "ok", "tools": ["python-settrace"], "files": files, "sources": {}}
    cov.write_text(json.dumps(doc))
    policy = json.dumps({"name": "p", "version": "1", "thresholds": {"min_score": 0.8}})
    rec = evaluate({"patches": [str(patch)], "policy": policy, "coverage": str(cov)})
    assert rec["details"]["rules"] == ["coverage.path-not-mapped"]
    assert "src/pkg/x.py" in rec["details"]["summary"]
    assert "cannot report" not in rec["details"]["summary"]


def test_a_python_mutant_that_does_not_import_is_stillborn(tmp_path: Path) -> None:
    from trace_sandbox.gates.equiv import imports, module_of

    site = "lib/python3.11/site-packages"
    assert module_of(f"{site}/pkg/__init__.py") == (site, "pkg")
    assert module_of("lib/python/pager/layout.py") == ("lib/python", "pager.layout")
    assert module_of("share/doc/x.py") is None
    post, mut = tmp_path / "post", tmp_path / "mut"
    for root, body in ((post, "X = 1\n"), (mut, "X = undefined_name\n")):
        (root / site / "pkg").mkdir(parents=True)
        (root / site / "pkg" / "__init__.py").write_text(body)
    assert imports(str(post), f"{site}/pkg/__init__.py") == (True, "")
    ok, why = imports(str(mut), f"{site}/pkg/__init__.py")
    assert not ok and "NameError" in why
    patch = tmp_path / "fix.patch"
    patch.write_text((FIX / "fix.patch").read_text())
    mdir = tmp_path / "mutant"
    write_mutant({"patches": [str(patch)], "index": 1}, str(mdir))
    got = check_mutant({"target": str(mut), "post": str(post), "mutant": str(mdir)})
    assert got["status"] == "stillborn" and "does not import" in got["why"]


def test_one_process_runs_a_mutant_step(tmp_path: Path) -> None:
    """`mutant-run` (mutant_variants.run_mutant): the check, then only for a mutant worth a run
    the reproducer under the harness (a real run against tests.test_verify_gate's fake package)
    and its variants; every branch leaves check.json, mutant.json and outcome.json."""
    import json
    import shutil
    import tempfile

    from tests.test_verify_gate import HARNESS, run_harness
    from trace_sandbox.gates.mutant_variants import run_mutant

    run_harness(tmp_path, "setup", "true\n")  # the fake package at tmp_path/pkg
    patch = tmp_path / "fix.patch"
    patch.write_text((FIX / "fix.patch").read_text())
    mdir = tmp_path / "mutant"
    write_mutant({"patches": [str(patch)], "index": 1}, str(mdir))
    post, mut = tmp_path / "post", tmp_path / "pkg"
    shutil.copytree(mut, post)
    (tmp_path / "kill.sh").write_text('"$TARGET/bin/crash"\n')
    cfg = {"target": str(mut), "post": str(post), "mutant": str(mdir), "variant_runs": []}
    build = Path(tempfile.mkdtemp(prefix="mr-", dir="/tmp"))  # short: the harness's sockets
    env = {"harness": str(HARNESS), "target": str(mut), "run": "1", "tools": "/usr"}
    env |= {"timeout": "30", "script": str(tmp_path / "kill.sh"), "TMPDIR": str(build)}

    def step(name: str) -> dict[str, dict[str, object]]:
        out = tmp_path / name
        run_mutant(cfg, {**env, "out": str(out)}, str(out))
        names = ("check", "mutant", "outcome", "variants")
        return {
            n: json.loads((out / f"{n}.json").read_text())
            for n in names
            if (out / f"{n}.json").exists()
        }

    same = step("equivalent")  # byte-identical to the post-fix build: never run
    assert same["check"]["status"] == "equivalent" and same["outcome"]["target_ran"] is False
    assert same["mutant"] == json.loads((mdir / "mutant.json").read_text())
    (mut / "bin" / "ok").write_text("#!/bin/sh\necho mutated\n")
    ran = step("run")
    assert ran["check"]["status"] == "run"
    assert ran["outcome"]["invocations"][0]["signal"] == "SIGSEGV"  # the harness ran it
    assert ran["variants"]["skipped"] == "the reproducer already kills it"
    (mut / ".trace-build-failed").write_text("2\n")
    failed = step("failed")
    assert failed["check"]["status"] == "stillborn"
    assert (failed["outcome"]["build"], failed["outcome"]["target_ran"]) == ("failed", False)
    shutil.rmtree(build, ignore_errors=True)


def _tree(root: Path) -> dict[str, bytes]:
    files = sorted(p for p in root.rglob("*") if p.is_file())
    return {str(p.relative_to(root)): p.read_bytes() for p in files}


def test_the_patched_source_step_writes_landing_and_mutants_in_one_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 25's cost: `patched-source SRC OUT MUTANTS` (the step's one gate process) writes
    what `patched-source SRC OUT` and `mutants MUTANTS` (two processes before) wrote, byte for
    byte: landing.json, files/, and every mutant's series and mutant.json."""
    from trace_sandbox.gates.main import main

    src = tmp_path / "src"
    src.mkdir()
    (src / "cparse.c").write_text(patched_cparse(tmp_path / "p").read_text())
    cfg = json.dumps({"patches": [str(FIX / "fix.patch")]})
    monkeypatch.setenv("TRACE_GATE_CONFIG", cfg)
    one, two = tmp_path / "one", tmp_path / "two"
    for d in (one, two):
        d.mkdir()
    assert main(["patched-source", str(src), str(one), str(one / "mutants")]) == 0
    assert main(["patched-source", str(src), str(two)]) == 0
    assert main(["mutants", str(two / "mutants")]) == 0
    written = _tree(one)
    assert written == _tree(two)
    mutants = {k.split("/")[1] for k in written if k.startswith("mutants/")}
    assert len(mutants) >= 2 and "landing.json" in written and "files/cparse.c" in written


def test_write_mutants_is_write_mutant_for_every_index(tmp_path: Path) -> None:
    """write_mutants generates the mutants once; each directory is still what write_mutant (which
    generates them for its one index) writes, the placeholder past the end included."""
    from trace_sandbox.gates.mutation import write_mutants

    cfg = {"patches": [str(FIX / "fix.patch")]}
    write_mutants(cfg, str(tmp_path / "all"))
    count = len(list((tmp_path / "all").iterdir()))
    assert count >= 2
    for n in range(1, count + 2):
        write_mutant({**cfg, "index": n}, str(tmp_path / "one" / str(n)))
    for n in range(1, count + 1):
        assert _tree(tmp_path / "all" / str(n)) == _tree(tmp_path / "one" / str(n))
    placeholder = json.loads((tmp_path / "one" / str(count + 1) / "mutant.json").read_text())
    assert placeholder == {"id": None, "index": count + 1, "of": count}
