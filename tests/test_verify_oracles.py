"""Declared oracles ([expect], [accept], per-invocation): the judge's rules on records, and the
candidate's checks of bad declarations (exit 2 naming file, key and fix). Issue 9."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from engine.candidate import load_candidate
from engine.cli import main
from engine.errors import InputError
from engine.verify.verdict import _unmatched
from tests.test_verify_gate import ASAN, inv, rec
from trace_sandbox.gates import expectation, faultsite, oracle
from trace_sandbox.gates.diff import parse_series

REPO = Path(__file__).resolve().parent.parent
FORK = REPO / "tests" / "fixtures" / "fork"
CANDS = FORK / "trace" / "candidates"
GOOD = "greeting -> hello world\nname -> demo\n"


def golden(text: str, name: str = "good.out") -> dict[str, Any]:
    sha = hashlib.sha256(text.encode()).hexdigest()
    return {"file": name, "sha256": sha, "text": text, "truncated": False}


def run_inv(args: list[str], **kw: Any) -> dict[str, Any]:
    out = kw.pop("stdout", "")
    return inv(args=args, stdout=out, stdout_sha256=hashlib.sha256(out.encode()).hexdigest(), **kw)


# the reject-long-key candidate's oracles, as engine/candidate.py hands them to the judge
ORACLES: dict[str, Any] = {
    "expect": {"sanitizer": "AddressSanitizer: heap-buffer-overflow", "exit_code": [1]},
    "accept": {
        "invocation": [
            {
                "key": "accept.invocation.0",
                "args": "long-key",
                "exit_code": [2],
                "stderr": "input rejected",
            },
            {"key": "accept.invocation.1", "args": r"good\.conf", "golden": golden(GOOD)},
        ]
    },
}
CRASH = run_inv(["long-key.conf"], exit_code=1, sanitizer=ASAN)
GOOD_RUN = run_inv(["good.conf"], stdout=GOOD)
REJECTED = run_inv(["long-key.conf"], exit_code=2, stderr="cparse: input rejected\n")


def post(*invs: dict[str, Any]) -> list[dict[str, Any]]:
    return [rec("post", run=n, invocations=list(invs)) for n in (1, 2)]


def test_a_clean_rejection_is_an_accepted_post_fix_behaviour() -> None:
    # issue 9, item 1: before, any non-zero exit of a target was post-fix-still-fails
    row = expectation.judge_side("post", post(GOOD_RUN, REJECTED), ORACLES)
    assert (row["holds"], row["reason"]) == (True, "ok"), row
    # with no [accept], the default stays: every target invocation exits 0
    row = expectation.judge_side("post", post(GOOD_RUN, REJECTED), {"expect": {}})
    assert (
        row["reason"] == "post-fix-still-fails" and "expected exit code 0, got 2" in row["detail"]
    )


def test_a_fix_that_rejects_every_input_is_refused_by_the_good_invocation() -> None:
    rejected_good = run_inv(["good.conf"], exit_code=2, stderr="cparse: input rejected\n")
    row = expectation.judge_side("post", post(rejected_good, REJECTED), ORACLES)
    assert row["reason"] == "post-fix-still-fails"
    assert "accept.invocation.1: bin/cparse good.conf: exit 2" in row["detail"]
    # exit 0 but the wrong output: the golden file says so, with the first differing line
    wrong = run_inv(["good.conf"], stdout="greeting -> hello\n")
    row = expectation.judge_side("post", post(wrong, REJECTED), ORACLES)
    assert (
        "stdout differs from good.out: line 1: expected 'greeting -> hello world'" in row["detail"]
    )


@pytest.mark.parametrize(
    "fatal",
    [
        run_inv(["long-key.conf"], exit_code=2, sanitizer=ASAN),
        run_inv(["long-key.conf"], exit_code=None, signal="SIGSEGV"),
    ],
)
def test_a_sanitizer_report_or_a_signal_is_never_acceptable(fatal: dict[str, Any]) -> None:
    anything = {"accept": {"invocation": [{"key": "k", "args": ".", "exit_code": [0, 1, 2]}]}}
    row = expectation.judge_side("post", post(fatal), anything)
    assert row["reason"] == "post-fix-still-fails" and "never acceptable" in row["detail"]
    ok, detail = oracle.post_fix_acceptable(post(fatal)[0], anything)
    assert not ok and "never acceptable" in detail


def test_post_fix_acceptable_is_the_mutation_gates_rule() -> None:
    assert oracle.post_fix_acceptable(post(GOOD_RUN, REJECTED)[0], ORACLES) == (
        True,
        "every target invocation is acceptable",
    )
    timed_out = rec("post", invocations=[GOOD_RUN, REJECTED], timed_out=True)
    assert oracle.post_fix_acceptable(timed_out, ORACLES)[0] is False
    assert oracle.post_fix_acceptable(rec("post", target_ran=False), ORACLES)[0] is False


def test_the_reproducer_scripts_own_exit_never_counts() -> None:
    # a script that reports a failure (exit 1) while every target behaved: it is not evidence
    runs = [rec("post", run=n, invocations=[GOOD_RUN, REJECTED], exit_code=1) for n in (1, 2)]
    assert expectation.judge_side("post", runs, ORACLES)["holds"] is True


def test_a_wrong_output_bug_is_shown_on_the_pre_fix_side() -> None:
    # issue 9, item 2: the target exits 0 and prints the wrong field
    want = "alice <alice@example.org>\n"
    expect = {
        "invocation": [
            {
                "key": "expect.invocation.0",
                "args": "people",
                "exit_code": [0],
                "not_golden": golden(want, "want.txt"),
                "stdout": "^alice <555",
            }
        ]
    }
    wrong = run_inv(["people.txt"], stdout="alice <555-0101>\n")
    rows = expectation.judge_side("pre", [rec(invocations=[wrong])], {"expect": expect})
    assert rows["holds"] is True, rows
    right = run_inv(["people.txt"], stdout=want)
    row = expectation.judge_side("pre", [rec(invocations=[right])], {"expect": expect})
    assert row["reason"] == "pre-fix-did-not-fail"
    assert "stdout is exactly want.txt (the correct output)" in row["detail"]
    # a regex alone over the target's own stdout also declares a wrong output
    only_regex = {"stdout": "^alice <555"}
    assert expectation.judge_side("pre", [rec(invocations=[wrong])], {"expect": only_regex})[
        "holds"
    ]


def test_the_old_output_field_still_needs_a_failing_target() -> None:
    ok = run_inv([], stdout="page 11 holds 0 items\n")
    row = expectation.judge_side("pre", [rec(invocations=[ok])], {"expect": {"output": "page 11"}})
    assert row["reason"] == "pre-fix-did-not-fail"


def test_an_oracle_for_an_invocation_that_never_happened_is_reported_by_key(
    tmp_path: Path,
) -> None:
    row = expectation.judge_side("post", post(GOOD_RUN), ORACLES)  # no long-key invocation
    assert row["unmatched"] == ["accept.invocation.0"] and not row["holds"]
    cand_dir = tmp_path / "c"
    shutil.copytree(CANDS / "cparse-reject-long-key", cand_dir)
    cand = load_candidate(cand_dir / "candidate.toml")
    with pytest.raises(InputError) as info:
        _unmatched(cand, dict(row))
    err = info.value
    assert err.key == "accept.invocation.0" and str(err.file) == str(cand.path)
    assert err.line is not None
    assert "selected no target invocation" in err.message and "selector" in (err.hint or "")


def test_an_index_selects_in_canonical_order() -> None:
    by_index = {"accept": {"invocation": [{"key": "k", "index": 2, "exit_code": [2]}]}}
    assert expectation.judge_side("post", post(GOOD_RUN, REJECTED), by_index)["holds"] is True
    assert expectation.judge_side("post", post(REJECTED, GOOD_RUN), by_index)["holds"] is False


# ---- bad declarations: exit 2 naming file, key and fix ----


def _write(cand: Path, extra: str) -> Path:
    path = cand / "candidate.toml"
    path.write_text(path.read_text() + extra)
    return path


SEL = '\n[[accept.invocation]]\nargs = "x"\n'
BAD = [
    (SEL + "exitcode = 2\n", "accept.invocation.2.exitcode", "unknown key 'exitcode'"),
    ('\n[[accept.invocation]]\nargs = "([a-z"\n', "accept.invocation.2.args", "regular expression"),
    (SEL + 'golden = "nope.out"\n', "accept.invocation.2.golden", "does not exist"),
    ("\n[[accept.invocation]]\nexit_code = 2\n", "accept.invocation.2", "needs a selector"),
    (SEL + 'signal = "SIGSEGV"\n', "accept.invocation.2.signal", "never acceptable"),
    ('\n[accept]\nstdout = "("\n', "accept.stdout", "regular expression"),
]


@pytest.mark.parametrize(("extra", "key", "words"), BAD)
def test_bad_oracle_declarations_name_file_key_and_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: str, key: str, words: str
) -> None:
    shutil.copytree(CANDS / "cparse-reject-long-key", tmp_path / "c")
    path = _write(tmp_path / "c", extra)
    with pytest.raises(InputError) as info:
        load_candidate(path)
    assert info.value.key == key and words in info.value.message, info.value
    assert str(info.value.file) == str(path.resolve()) and info.value.hint
    code = main(["verify", str(path), "--state-dir", str(tmp_path / "s")])
    err = capsys.readouterr().err
    assert code == 2 and key in err and str(path) in err, err
    assert not (tmp_path / "s" / "verify").exists()  # nothing half-written


def test_expect_must_name_a_failure_or_a_wrong_output(tmp_path: Path) -> None:
    shutil.copytree(CANDS / "roster-wrong-field", tmp_path / "c")
    path = tmp_path / "c" / "candidate.toml"
    text = path.read_text()
    path.write_text(text.replace('not_golden = "want.txt"\nstdout = "^alice <555-0101>$"\n', ""))
    with pytest.raises(InputError) as info:
        load_candidate(path)
    assert (
        info.value.key == "expect" and "names no failure and no wrong output" in info.value.message
    )


def test_schema_candidate_describes_every_oracle_field(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "candidate"]) == 0
    defs = json.loads(capsys.readouterr().out)["$defs"]
    for model in ("Expectation", "Acceptance", "InvocationOracle"):
        props = defs[model]["properties"]
        for field in ("exit_code", "signal", "sanitizer", "output", "stdout", "stderr"):
            assert props[field].get("description"), (model, field)
        assert props["golden"]["description"] and props["not_golden"]["description"]
    for field in ("target", "args", "index"):
        assert defs["InvocationOracle"]["properties"][field]["description"]
    assert defs["Acceptance"]["properties"]["invocation"]["description"]


# ---- the fault site ----

ASAN_REPORT = """==12==ERROR: AddressSanitizer: heap-buffer-overflow on address 0xADDR
WRITE of size 40 at 0xADDR thread T0
    #0 0xADDR in __interceptor_memcpy ../../../../src/libsanitizer/sanitizer_common/x.inc:827
    #1 0xADDR in parse_line /build/source/cparse.c:18
    #2 0xADDR in main /build/source/cparse.c:52
    #3 0xADDR in __libc_start_main (/nix/store/abc-glibc/lib/libc.so.6+0xADDR)

0xADDR is located 0 bytes after 16-byte region
allocated by thread T0 here:
    #0 0xADDR in malloc x.cpp:69
    #1 0xADDR in parse_line /build/source/cparse.c:15
"""
TRACEBACK = """Traceback (most recent call last):
  File "<work>/repro.py", line 3, in <module>
    pager.page(items, 11)
  File "<target>/lib/python/pager/__init__.py", line 9, in page
    return chunk(items)[n]
  File "<target>/lib/python/pager/__init__.py", line 4, in chunk
    raise IndexError
IndexError
"""


@pytest.fixture(scope="module")
def faults() -> Any:
    from trace_sandbox.harness import faults as mod  # the harness's own module

    return mod


def test_the_harness_records_sanitizer_and_traceback_frames(faults: Any) -> None:
    got = faults.frames(ASAN_REPORT, python=False)
    assert [(f["function"], f["file"], f["line"]) for f in got] == [
        ("__interceptor_memcpy", "../../../../src/libsanitizer/sanitizer_common/x.inc", 827),
        ("parse_line", "/build/source/cparse.c", 18),
        ("main", "/build/source/cparse.c", 52),
        ("__libc_start_main", None, None),
    ]  # the first stack only, innermost first
    py = faults.frames(TRACEBACK, python=True)
    assert [(f["function"], f["line"]) for f in py] == [("chunk", 4), ("page", 9), ("<module>", 3)]
    assert faults.frames("cparse: input rejected\n", python=False) == []


def _source(tmp_path: Path) -> Path:
    shutil.copytree(FORK / "pkgs" / "cparse" / "src", tmp_path / "src", dirs_exist_ok=True)
    return tmp_path / "src"


def _gate(tmp_path: Path, patch: Path, report: str, frames: int = 5, src: bool = True) -> Any:
    from trace_sandbox.harness import faults

    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    invocation = inv(exit_code=1, sanitizer=ASAN, frames=faults.frames(report, python=False))
    (run / "outcome.json").write_text(json.dumps(rec(invocations=[invocation])))
    policy = {"name": "p", "version": "1", "thresholds": {"frames": frames}}
    cfg = {"patches": [str(patch)], "pre": [str(run)], "policy": policy}
    if src:
        cfg["src"] = str(_source(tmp_path))
    return faultsite.evaluate(cfg)


def test_fault_site_a_fix_in_the_failing_function_passes(tmp_path: Path) -> None:
    rec_ = _gate(tmp_path, CANDS / "cparse-reject-long-key" / "fix.patch", ASAN_REPORT)
    assert (rec_["passed"], rec_["measurable"], rec_["reasons"]) == (True, True, [])
    assert rec_["details"]["touched"] == ["parse_line /build/source/cparse.c:18"]


def test_fault_site_a_bigger_constant_is_away_from_the_fault(tmp_path: Path) -> None:
    rec_ = _gate(tmp_path, CANDS / "cparse-wrong-fix" / "fix.patch", ASAN_REPORT)
    assert (rec_["passed"], rec_["reasons"]) == (False, ["fix-away-from-fault"])
    assert "parse_line /build/source/cparse.c:18" in rec_["details"]["summary"]
    # without the source, the function comes from the patch alone: the same answer here
    assert _gate(tmp_path, CANDS / "cparse-wrong-fix" / "fix.patch", ASAN_REPORT, src=False)[
        "reasons"
    ] == ["fix-away-from-fault"]


def test_fault_site_only_the_first_k_frames_count(tmp_path: Path) -> None:
    # a fix in main only (frame 2 of the package's own code) passes with K=2, not with K=1
    patch = tmp_path / "main.patch"
    patch.write_text(
        "--- a/cparse.c\n+++ b/cparse.c\n@@ -40,3 +40,4 @@ int main(int argc, char **argv) {\n"
        '     if (argc != 2) {\n+        fprintf(stderr, "x\\n");\n'
        '         fprintf(stderr, "usage: cparse FILE\\n");\n         return 2;\n'
    )
    assert _gate(tmp_path, patch, ASAN_REPORT, frames=2)["passed"] is True
    assert _gate(tmp_path, patch, ASAN_REPORT, frames=1)["reasons"] == ["fix-away-from-fault"]


def test_fault_site_without_a_stack_is_not_measurable(tmp_path: Path) -> None:
    rec_ = _gate(tmp_path, CANDS / "roster-wrong-field" / "fix.patch", "")
    assert (rec_["passed"], rec_["measurable"], rec_["reasons"]) == (True, False, [])
    assert rec_["details"]["summary"].startswith("not measurable")


def test_fault_site_hunk_functions_from_the_patch() -> None:
    [fd] = parse_series([(CANDS / "cparse-reject-long-key" / "fix.patch").read_text()]).files
    functions, lines = faultsite.touched(fd.hunks[0])
    assert lines == {15} and functions == set()  # plain `diff -u`: no section, no def in hunk
    assert faultsite.base_function("ns::Parser::parse(int)") == "parse"


def test_fault_site_python_frames_count_only_under_the_package() -> None:
    """The interpreter's own library frames (a traceback through /usr/lib/python3.x) do not push
    the package's frames past K: textcols' correct fix was called away from the fault."""
    from trace_sandbox.gates.faultsite import own_frames

    frames = [
        {"file": "/usr/lib/python3.11/textwrap.py", "function": "wrap", "line": 1},
        {"file": "/usr/lib/python3.11/textwrap.py", "function": "_wrap_chunks", "line": 2},
        {"file": "<target>/lib/python3.11/site-packages/textcols/cols.py", "function": "cols"},
        {"file": "<work>/repro.py", "function": "<module>", "line": 3},
    ]
    assert [f["function"] for f in own_frames(frames, 1)] == ["cols"]


def test_fault_site_matches_a_src_layout_patch_to_the_installed_file() -> None:
    """textcols' correct fix patches src/textcols/layout.py; its traceback names the installed
    <target>/lib/python3.11/site-packages/textcols/layout.py: the same file."""
    from trace_sandbox.gates.faultsite import same_file

    installed = "<target>/lib/python3.11/site-packages/textcols/layout.py"
    assert same_file(installed, "src/textcols/layout.py")
    assert same_file(installed, "textcols/layout.py")
    assert not same_file(installed, "src/other/layout.py")
    assert same_file("/build/cparse/cparse.c", "cparse.c")
    assert not same_file("/build/cparse/cparse.c", "lib/cparse.h")
