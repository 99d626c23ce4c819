"""Mutation and coverage gate records from explicit run/coverage files (no nix), the gates'
reason codes against the policy catalogue, and the sandbox code's stdlib-only rule."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import tomli

from engine.build_records import GateRecord
from trace_sandbox.gates import codes
from trace_sandbox.gates.coverage import changed_lines, match_path, python_executable_lines
from trace_sandbox.gates.coverage_gate import evaluate as coverage_gate
from trace_sandbox.gates.mutation import evaluate as mutation_gate
from trace_sandbox.gates.mutation import write_mutants

REPO = Path(__file__).resolve().parent.parent
PTR = REPO / "tests" / "fixtures" / "gates" / "cparse-ptr" / "fix.patch"
WRONG = REPO / "tests" / "fixtures" / "fork" / "trace" / "candidates" / "cparse-wrong-fix"


def policy(min_score: float | None) -> str:
    """A gate's `policy` parameter, as engine.gates.context makes it from a signing policy."""
    thresholds = {} if min_score is None else {"min_score": min_score}
    return json.dumps({"name": "test-signing", "version": "1.0", "thresholds": thresholds})


JUDGE = str(REPO / "trace_sandbox" / "gates" / "oracle.py")  # the post-fix judge


def run_record(exit_code: int | None = 0, script: int = 0, **kw: Any) -> dict[str, Any]:
    """A run whose one target invocation ended with `exit_code` (and `kw`: signal, sanitizer),
    while the reproducer script itself exited `script`."""
    inv = {"target": "bin/cparse", "exit_code": exit_code, "signal": None, "sanitizer": None}
    inv.update(kw)
    return {
        "schema": "trace.run/v1",
        "side": "post",
        "run": 1,
        "build": "ok",
        "target_ran": True,
        "invocations": [inv],
        "exit_code": script,
    }


def mutant_dirs(
    tmp: Path, patch: Path, records: list[dict[str, Any]], checks: list[str] | None = None
) -> list[str]:
    """What the mutant-run steps leave behind: mutant.json (from the real writer), check.json
    (what equiv.check_mutant said: `run` unless given) and a run record."""
    dirs = []
    write_mutants({"patches": [str(patch)]}, str(tmp / "mutants"))  # as the one shared step does
    for i, rec in enumerate(records, 1):
        d = tmp / "mutants" / str(i)
        (d / "outcome.json").write_text(json.dumps(rec))
        status = checks[i - 1] if checks else "run"
        (d / "check.json").write_text(json.dumps({"status": status, "why": f"test: {status}"}))
        dirs.append(str(d))
    return dirs


def post_dir(tmp: Path, rec: dict[str, Any]) -> str:
    d = tmp / "post"
    d.mkdir()
    (d / "outcome.json").write_text(json.dumps(rec))
    return str(d)


def test_mutation_counts_score_and_survivors(tmp_path: Path) -> None:
    runs = [
        run_record(0),  # m001 survives
        {
            "schema": "trace.run/v1",
            "side": "post",
            "run": 1,
            "build": "failed",
            "target_ran": False,
        },
        run_record(1, sanitizer={"tool": "AddressSanitizer", "kind": "x"}),  # killed
        run_record(None, signal="SIGKILL"),  # the target killed by a signal: killed
        run_record(1),  # m005 (constant 0 -> -1, issue 25): the target's own exit 1: killed
        run_record(1),  # the target's own exit 1: killed
    ]
    cfg = {
        "patches": [str(PTR)],
        "policy": policy(0.7),
        "mutant_runs": mutant_dirs(tmp_path, PTR, runs),
        "post_runs": [post_dir(tmp_path, run_record(0))],
        "judge": JUDGE,
    }
    rec = mutation_gate(cfg)
    GateRecord.model_validate(rec)
    d = rec["details"]
    assert (d["killed"], d["survived"], d["stillborn"]) == (4, 1, 1)
    assert rec["score"] == 0.8
    assert [s["id"] for s in d["survivors"]] == ["m001"]
    assert "+    if ((size_t)(eq - line) > KEY_MAX)" in d["survivors"][0]["diff"]
    # the survivor's diff is in the summary the verify table shows
    assert "survivor m001" in d["summary"] and "> KEY_MAX)" in d["summary"]
    assert (rec["passed"], rec["reasons"]) == (True, [])
    strict = mutation_gate({**cfg, "policy": policy(0.85)})
    assert (strict["passed"], strict["reasons"]) == (False, ["mutation-score-below-threshold"])


def test_the_reproducer_scripts_own_exit_kills_no_mutant(tmp_path: Path) -> None:
    """Issue 10: the mutation gate judged the reproducer script's exit while the expectation
    gate judged the targets. A script that exits 1 while every target exited 0 kills nothing;
    a target that fails kills even when the script exits 0."""
    runs = [run_record(0, script=1)] * 5 + [run_record(1, script=0)]
    cfg = {
        "patches": [str(PTR)],
        "policy": policy(0.5),
        "mutant_runs": mutant_dirs(tmp_path, PTR, runs),
        "post_runs": [post_dir(tmp_path, run_record(0))],
        "judge": JUDGE,
    }
    d = mutation_gate(cfg)["details"]
    assert [r["status"] for r in d["results"]] == ["survived"] * 5 + ["killed"]


def test_a_declared_clean_rejection_is_no_kill_and_the_post_fix_runs_are_measurable(
    tmp_path: Path,
) -> None:
    """Issue 9: a fix that rejects bad input with exit 2 (declared in [accept]) was
    `mutation-not-measurable` ("post-fix already fails") because any non-zero exit counted as a
    failure. Mutants are judged by post_fix_acceptable under the declared oracles: exit 2 is
    acceptable there, exit 1 or a sanitizer report is a kill."""
    oracles = json.dumps({"expect": {}, "accept": {"exit_code": [0, 2]}})
    asan = {"tool": "AddressSanitizer", "kind": "x"}
    runs = [run_record(2), run_record(1), run_record(2, sanitizer=asan), run_record(0)]
    runs += [run_record(2), run_record(2)]
    cfg = {
        "patches": [str(PTR)],
        "policy": policy(0.5),
        "mutant_runs": mutant_dirs(tmp_path, PTR, runs),
        "post_runs": [post_dir(tmp_path, run_record(2))],
        "judge": JUDGE,
        "oracles": oracles,
    }
    rec = mutation_gate(cfg)
    assert rec["measurable"] is True, rec
    assert [r["status"] for r in rec["details"]["results"]] == [
        "survived",
        "killed",
        "killed",
        "survived",
        "survived",
        "survived",
    ]
    # without the declaration, the same post-fix runs fail their oracles: nothing to measure
    undeclared = mutation_gate({**cfg, "oracles": "{}"})
    assert undeclared["measurable"] is False


def test_stillborn_equivalent_not_code_and_unobservable_count_nowhere(tmp_path: Path) -> None:
    patch = tmp_path / "alloc.patch"
    patch.write_text(
        "--- a/x.c\n+++ b/x.c\n@@ -1,1 +1,2 @@\n int f(size_t n) {\n+    char *k = malloc(n + 1);\n"
    )
    # m001 n - 1 (killed), m002 n + 2 (over-allocates: survives), m003 n + 0 (killed)
    runs = [run_record(1), run_record(0), run_record(1)]
    cfg = {
        "patches": [str(patch)],
        "policy": policy(0.8),
        "mutant_runs": mutant_dirs(tmp_path, patch, runs),
        "post_runs": [post_dir(tmp_path, run_record(0))],
        "judge": JUDGE,
    }
    rec = mutation_gate(cfg)
    d = rec["details"]
    assert [r["status"] for r in d["results"]] == ["killed", "unobservable", "killed"]
    assert (rec["score"], rec["passed"], d["survivors"]) == (1.0, True, [])
    assert [u["id"] for u in d["unobservable"]] == ["m002"]
    # the same runs with the check saying stillborn / equivalent / not-code
    for status in ("stillborn", "equivalent", "not-code"):
        other = tmp_path / status
        other.mkdir()
        dirs = mutant_dirs(other, patch, runs, [status, "run", "run"])
        r = mutation_gate({**cfg, "mutant_runs": dirs})
        assert r["details"]["results"][0]["status"] == status
        assert (r["details"]["killed"], r["score"]) == (1, 1.0)
    # nothing left to judge: not measurable, and the record says why
    none = tmp_path / "none"
    none.mkdir()
    dirs = mutant_dirs(none, patch, runs, ["equivalent", "run", "stillborn"])
    r = mutation_gate({**cfg, "mutant_runs": dirs})
    assert (r["measurable"], r["reasons"]) == (False, ["mutation-not-measurable"])
    assert r["details"]["rules"] == ["mutation.none-judged"]
    assert "no mutant could be judged" in r["details"]["summary"]


def test_mutation_is_not_measurable_when_the_post_fix_fails(tmp_path: Path) -> None:
    cfg = {
        "patches": [str(PTR)],
        "policy": policy(0.5),
        "mutant_runs": mutant_dirs(tmp_path, PTR, [run_record(1)] * 6),
        "post_runs": [post_dir(tmp_path, run_record(1))],
        "judge": JUDGE,
    }
    rec = mutation_gate(cfg)
    assert (rec["passed"], rec["measurable"], rec["score"]) == (False, False, None)
    assert rec["reasons"] == ["mutation-not-measurable"]
    assert rec["details"]["rules"] == ["mutation.post-fix-fails"]
    assert "post-fix build does not pass the reproducer" in rec["details"]["summary"]


def _variant_post(tmp: Path, index: int, rec: dict[str, Any]) -> str:
    d = tmp / f"variant-post-{index}"
    d.mkdir()
    meta = {"id": f"v{index:03d}-length", "index": index, "description": "f.conf: 16 bytes"}
    (d / "variant.json").write_text(json.dumps(meta))
    (d / "outcome.json").write_text(json.dumps(rec))
    return str(d)


def test_a_variant_kills_a_mutant_only_where_the_post_fix_build_is_acceptable(
    tmp_path: Path,
) -> None:
    """Issue 10: each mutant runs against the reproducer AND the variants. A mutant the
    reproducer misses is killed by a variant whose run on it is unacceptable post-fix behaviour
    (the same oracles) while the post-fix build's run of that variant is acceptable; a variant
    that fails on the post-fix build too kills nothing."""
    asan = {"tool": "AddressSanitizer", "kind": "heap-buffer-overflow"}
    runs = [run_record(0), run_record(0), run_record(1), run_record(1), run_record(1)]
    runs.append(run_record(1))
    dirs = mutant_dirs(tmp_path, PTR, runs)
    # m001: variant 2 overflows it (post-fix: fine); m002: variant 1 fails it, and post-fix too
    for d, index, rec in ((dirs[0], 2, run_record(1, sanitizer=asan)), (dirs[1], 1, run_record(1))):
        v = Path(d) / "variants" / str(index)
        v.mkdir(parents=True)
        (v / "outcome.json").write_text(json.dumps(rec))
    baselines = [
        _variant_post(tmp_path, 1, run_record(1)),
        _variant_post(tmp_path, 2, run_record(0)),
    ]
    cfg = {
        "patches": [str(PTR)],
        "policy": policy(0.8),
        "mutant_runs": dirs,
        "post_runs": [post_dir(tmp_path, run_record(0))],
        "variant_runs": baselines,
        "judge": JUDGE,
    }
    rec = mutation_gate(cfg)
    d = rec["details"]
    (m1, m2) = d["results"][:2]
    assert (m1["status"], m2["status"]) == ("killed", "survived")
    assert m1["why"].startswith("variant v002-length (f.conf: 16 bytes): ")
    assert "AddressSanitizer" in m1["why"]
    assert (d["killed_by_variants"], d["variants_judged_against"]) == (1, 2)
    assert rec["score"] == round(5 / 6, 6)  # 5 of 6 killed (m001 by a variant)
    # a mutant's variant run without the post-fix build's run of it cannot be judged: an error
    with pytest.raises(ValueError, match="variant 2 has no post-fix run"):
        mutation_gate({**cfg, "variant_runs": baselines[:1]})


def test_mutation_not_measurable_says_why(tmp_path: Path) -> None:
    """Issue 10: `mutation-not-measurable` names its cause: no mutant generated, none built."""
    comment = tmp_path / "comment.patch"
    comment.write_text("--- a/x.c\n+++ b/x.c\n@@ -1,1 +1,2 @@\n int x;\n+/* a comment */\n")
    cfg = {
        "patches": [str(comment)],
        "policy": policy(0.8),
        "mutant_runs": [],
        "post_runs": [post_dir(tmp_path, run_record(0))],
        "judge": JUDGE,
    }
    rec = mutation_gate(cfg)
    assert (rec["measurable"], rec["reasons"]) == (False, ["mutation-not-measurable"])
    assert rec["details"]["rules"] == ["mutation.no-mutants"]
    assert "no mutant generated" in rec["details"]["summary"]
    # the shared mutant-patches step gives such a patch its one placeholder mutant-run (`1/`)
    write_mutants({"patches": [str(comment)]}, str(tmp_path / "none"))
    assert sorted(p.name for p in (tmp_path / "none").iterdir()) == ["1"]
    placeholder = json.loads((tmp_path / "none" / "1" / "mutant.json").read_text())
    assert (placeholder["id"], placeholder["of"]) == (None, 0)
    rec = mutation_gate({**cfg, "mutant_runs": [str(tmp_path / "none" / "1")]})
    assert rec["details"]["rules"] == ["mutation.no-mutants"]
    built = tmp_path / "built"
    built.mkdir()
    failed = {"schema": "trace.run/v1", "build": "failed", "target_ran": False}
    dirs = mutant_dirs(built, PTR, [failed] * 6)
    rec = mutation_gate({**cfg, "patches": [str(PTR)], "mutant_runs": dirs})
    assert rec["details"]["rules"] == ["mutation.none-built"]
    assert "no mutant built" in rec["details"]["summary"]


def test_mutation_rejects_runs_that_do_not_match_the_patch(tmp_path: Path) -> None:
    cfg = {
        "patches": [str(PTR)],
        "policy": policy(0.5),
        "mutant_runs": mutant_dirs(tmp_path, PTR, [run_record(1)] * 5),  # one missing
        "post_runs": [post_dir(tmp_path, run_record(0))],
        "judge": JUDGE,
    }
    try:
        mutation_gate(cfg)
    except ValueError as exc:
        assert "m006" in str(exc)
    else:
        raise AssertionError("a missing mutant run must not be scored")


def coverage_file(tmp: Path, files: dict[str, Any], tools: list[str]) -> str:
    p = tmp / "coverage.json"
    p.write_text(
        json.dumps({"schema": "trace.coverage/v1", "build": "ok", "tools": tools, "files": files})
    )
    return str(p)


def test_coverage_share_of_executable_changed_lines(tmp_path: Path) -> None:
    # cparse-ptr adds lines 14 and 15 of cparse.c; say 14 ran and 15 did not
    files = {"cparse.c": {"executable": [10, 14, 15], "executed": [10, 14]}}
    cfg = {
        "patches": [str(PTR)],
        "policy": policy(0.8),
        "coverage": coverage_file(tmp_path, files, ["gcov"]),
    }
    rec = coverage_gate(cfg)
    GateRecord.model_validate(rec)
    assert (rec["score"], rec["passed"], rec["reasons"]) == (
        0.5,
        False,
        ["coverage-below-threshold"],
    )
    assert rec["details"]["files"][0]["missed"] == [15]
    assert coverage_gate({**cfg, "policy": policy(0.5)})["passed"] is True


def test_coverage_not_measurable(tmp_path: Path) -> None:
    none = coverage_gate(
        {"patches": [str(PTR)], "policy": policy(0.8), "coverage": coverage_file(tmp_path, {}, [])}
    )
    assert (none["passed"], none["measurable"], none["reasons"]) == (
        False,
        False,
        ["coverage-not-measurable"],
    )
    # the wrong fix changes only a #define: no executable changed line
    files = {"cparse.c": {"executable": [10, 14], "executed": [10, 14]}}
    wrong = coverage_gate(
        {
            "patches": [str(WRONG / "fix.patch")],
            "policy": policy(0.8),
            "coverage": coverage_file(tmp_path, files, ["gcov"]),
        }
    )
    assert wrong["reasons"] == ["coverage-not-measurable"]
    assert wrong["details"]["rules"] == ["coverage.no-executable-lines"]


def test_coverage_helpers() -> None:
    assert changed_lines([PTR.read_text()]) == {"cparse.c": [14, 15]}
    src = "import os\n\n\ndef f(a):\n    '''doc'''\n    if a:\n        return 1\n    return 2\n"
    assert python_executable_lines(src) == {1, 4, 6, 7, 8}  # not the docstring
    assert match_path("pager/__init__.py", ["lib/python/pager/__init__.py", "x.py"]) == (
        "lib/python/pager/__init__.py"
    )
    assert match_path("src/cparse.c", ["cparse.c"]) == "cparse.c"
    assert match_path("a.c", ["b.c"]) is None


def test_every_gate_code_is_declared_in_the_policy_catalogue() -> None:
    catalogue = tomli.loads((REPO / "policy" / "reasons.toml").read_text())
    declared = {r["code"] for r in catalogue["reasons"]}
    assert set(codes.codes()) <= declared, set(codes.codes()) - declared


def test_sandbox_code_imports_only_the_standard_library() -> None:
    core = REPO / "trace_sandbox"
    for path in sorted(core.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: inside the package
                    continue
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                own = top in ("__future__", "trace_sandbox")  # the package itself
                assert top in sys.stdlib_module_names or own, f"{path}: {name}"


def test_gates_apply_the_policy_they_are_given_and_say_so(tmp_path: Path) -> None:
    runs = [run_record(0)] * 2 + [run_record(1)] * 2 + [run_record(0)] * 2  # score 1/3
    cfg = {
        "patches": [str(PTR)],
        "policy": policy(0.8),
        "mutant_runs": mutant_dirs(tmp_path, PTR, runs),
        "post_runs": [post_dir(tmp_path, run_record(0))],
        "judge": JUDGE,
    }
    strict = mutation_gate(cfg)
    assert (strict["score"], strict["passed"]) == (round(1 / 3, 6), False)
    assert strict["details"]["policy"] == {
        "name": "test-signing",
        "version": "1.0",
        "thresholds": {"min_score": 0.8},
    }
    # a policy without min_score sets no threshold: the same runs pass, the score stays
    lenient = mutation_gate({**cfg, "policy": policy(None)})
    assert (lenient["score"], lenient["passed"], lenient["reasons"]) == (round(1 / 3, 6), True, [])
    assert lenient["details"]["policy"]["thresholds"] == {}
    # a gate that is not told its policy refuses to judge
    try:
        mutation_gate({k: v for k, v in cfg.items() if k != "policy"})
    except ValueError as exc:
        assert "names no signing policy" in str(exc)
    else:
        raise AssertionError("a gate without a policy must not write a record")


TWO_FILES = """\
--- a/a.c
+++ b/a.c
@@ -3,0 +4 @@
+    x = check(n);
--- a/b.c
+++ b/b.c
@@ -10,0 +11,4 @@
+    if (n > cap)
+        return -1;
+    n = clamp(n);
+    /* clamp: see above */
"""


def test_coverage_an_unmeasured_changed_file_is_not_measurable(tmp_path: Path) -> None:
    """a.c measured and covered, b.c (3 of 4 changed lines executable) not reported: the share
    of a.c alone is not the patch's coverage, so the gate is not measurable, not a pass."""
    patch = tmp_path / "two.patch"
    patch.write_text(TWO_FILES)
    files = {"a.c": {"executable": [4], "executed": [4]}}
    rec = coverage_gate(
        {
            "patches": [str(patch)],
            "policy": policy(0.8),
            "coverage": coverage_file(tmp_path, files, ["gcov"]),
        }
    )
    GateRecord.model_validate(rec)
    assert (rec["passed"], rec["measurable"], rec["score"]) == (False, False, None)
    assert rec["reasons"] == ["coverage-not-measurable"]
    assert rec["details"]["rules"] == ["coverage.file-not-measured"]
    assert rec["details"]["unmeasured_files"] == ["b.c"]
    b = next(f for f in rec["details"]["files"] if f["file"] == "b.c")
    assert b["may_execute"] == [11, 12, 13]  # not the comment line
    # once b.c is reported too, the share is over both files
    files["b.c"] = {"executable": [11, 12, 13], "executed": [11]}
    both = coverage_gate(
        {
            "patches": [str(patch)],
            "policy": policy(0.8),
            "coverage": coverage_file(tmp_path, files, ["gcov"]),
        }
    )
    assert (both["score"], both["reasons"]) == (0.5, ["coverage-below-threshold"])


def test_coverage_an_unmeasured_file_without_code_does_not_block(tmp_path: Path) -> None:
    patch = tmp_path / "hdr.patch"
    patch.write_text(
        "--- a/a.c\n+++ b/a.c\n@@ -3,0 +4 @@\n+    x = check(n);\n"
        "--- a/a.h\n+++ b/a.h\n@@ -1,0 +2,3 @@\n+#define CAP 16\n+/* the cap */\n+\n"
    )
    files = {"a.c": {"executable": [4], "executed": [4]}}
    rec = coverage_gate(
        {
            "patches": [str(patch)],
            "policy": policy(0.8),
            "coverage": coverage_file(tmp_path, files, ["gcov"]),
        }
    )
    assert (rec["passed"], rec["score"], rec["details"]["unmeasured_files"]) == (True, 1.0, [])


def test_may_execute_errs_towards_yes() -> None:
    from trace_sandbox.gates.coverage import may_execute

    assert [may_execute(t, "c") for t in ("  x = 1;", "#define A 1", "  } else {", " * c")] == [
        True,
        False,
        False,
        False,
    ]
    assert [may_execute(t, "python") for t in ("    pass", "    else:", '    """doc"""')] == [
        True,
        False,
        False,
    ]
    assert may_execute("echo hi", "shell") and may_execute("x = 1;", "other")
    assert not may_execute("# a comment", "shell")
