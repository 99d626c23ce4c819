"""Issue 26: sanitizer reports read fully (the kind from the SUMMARY line, a lifetime bug's three
stacks), the fault site of a double free fixed at its first free, and a `set -e` reproducer whose
post-fix crash is a verdict, not a bad declaration."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from engine.cli import main
from tests.test_verify_gate import inv, rec
from trace_sandbox.gates import expectation, faultsite, oracle

REPO = Path(__file__).resolve().parent.parent
FORK = REPO / "tests" / "fixtures" / "fork"
CANDS = FORK / "trace" / "candidates"

# what gcc 12's AddressSanitizer prints for kvset's double free (unset.conf), paths normalised
DOUBLE_FREE = """\
=================================================================
==PID==ERROR: AddressSanitizer: attempting double-free on 0xADDR in thread T0:
    #0 0xADDR in __interceptor_free ../../../../src/libsanitizer/asan/asan_malloc_linux.cpp:52
    #1 0xADDR in cleanup /build/kvset-src/kvset.c:64
    #2 0xADDR in main /build/kvset-src/kvset.c:86
    #3 0xADDR in __libc_start_call_main ../sysdeps/nptl/libc_start_call_main.h:58

0xADDR is located 0 bytes inside of 5-byte region [0xADDR,0xADDR)
freed by thread T0 here:
    #0 0xADDR in __interceptor_free ../../../../src/libsanitizer/asan/asan_malloc_linux.cpp:52
    #1 0xADDR in unset /build/kvset-src/kvset.c:28
    #2 0xADDR in assign /build/kvset-src/kvset.c:42
    #3 0xADDR in apply_line /build/kvset-src/kvset.c:59
    #4 0xADDR in main /build/kvset-src/kvset.c:81

previously allocated by thread T0 here:
    #0 0xADDR in __interceptor_strdup ../../../../src/libsanitizer/asan/asan_interceptors.cpp:439
    #1 0xADDR in assign /build/kvset-src/kvset.c:46
    #2 0xADDR in apply_line /build/kvset-src/kvset.c:59
    #3 0xADDR in main /build/kvset-src/kvset.c:81

SUMMARY: AddressSanitizer: double-free ../asan_malloc_linux.cpp:52 in __interceptor_free
==PID==ABORTING
"""
SEGV = """\
==PID==ERROR: AddressSanitizer: SEGV on unknown address 0x000000000000 (pc 0xADDR T0)
==PID==The signal is caused by a READ memory access.
    #0 0xADDR in main /build/x.c:5
SUMMARY: AddressSanitizer: SEGV /build/x.c:5 in main
"""
UAF = """\
==PID==ERROR: AddressSanitizer: heap-use-after-free on address 0xADDR at pc 0xADDR
READ of size 1 at 0xADDR thread T0
    #0 0xADDR in show /build/x.c:9
freed by thread T0 here:
    #0 0xADDR in __interceptor_free x.cpp:52
    #1 0xADDR in drop /build/x.c:4
previously allocated by thread T0 here:
    #0 0xADDR in __interceptor_malloc x.cpp:69
    #1 0xADDR in make /build/x.c:2
SUMMARY: AddressSanitizer: heap-use-after-free /build/x.c:9 in show
"""


@pytest.fixture(scope="module")
def faults() -> Any:
    from trace_sandbox.harness import faults as mod  # the harness's own module

    return mod


@pytest.mark.parametrize(
    ("report", "kind"),
    [
        (DOUBLE_FREE, "double-free"),  # the ERROR line says "attempting double-free"
        (SEGV, "SEGV"),
        (UAF, "heap-use-after-free"),
        # no SUMMARY (a report cut short): the ERROR line's word, "attempting" dropped
        ("==1==ERROR: AddressSanitizer: attempting double-free on 0x1\n", "double-free"),
        ("==1==ERROR: AddressSanitizer: stack-buffer-overflow on address 0x1\n", None),
    ],
)
def test_the_kind_is_the_summary_lines(faults: Any, report: str, kind: str | None) -> None:
    got = faults.sanitizer_report(report)
    assert got == {"tool": "AddressSanitizer", "kind": kind or "stack-buffer-overflow"}
    assert faults.sanitizer_report("cparse: input rejected\n") is None


def test_a_lifetime_bug_keeps_its_freed_and_allocated_stacks(faults: Any) -> None:
    access = faults.frames(DOUBLE_FREE, python=False)
    assert [f["function"] for f in access] == [
        "__interceptor_free",
        "cleanup",
        "main",
        "__libc_start_call_main",
    ]  # the first stack only, as before
    other = faults.lifetime_frames(DOUBLE_FREE)
    assert [f["function"] for f in other["freed"]][:3] == ["__interceptor_free", "unset", "assign"]
    assert [(f["function"], f["line"]) for f in other["allocated"]][1] == ("assign", 46)
    assert faults.lifetime_frames(SEGV) == {}


@pytest.mark.parametrize(
    ("declared", "ok"),
    [
        ("AddressSanitizer: double-free", True),
        ("AddressSanitizer: attempting double-free", True),  # the ERROR line's wording
        ("AddressSanitizer", True),
        ("AddressSanitizer: heap-buffer-overflow", False),
        ("AddressSanitizer: attempting", False),  # what the old harness recorded
    ],
)
def test_a_double_free_can_be_declared(declared: str, ok: bool) -> None:
    i = inv(exit_code=1, sanitizer={"tool": "AddressSanitizer", "kind": "double-free"})
    assert (not oracle.mismatches(i, {"sanitizer": declared, "exit_code": [1]})) is ok
    overflow = inv(
        exit_code=1, sanitizer={"tool": "AddressSanitizer", "kind": "heap-buffer-overflow"}
    )
    assert not oracle.mismatches(overflow, {"sanitizer": "AddressSanitizer: heap-buffer-overflow"})


def _fault_site(tmp_path: Path, candidate: str, lifetime: bool, faults: Any) -> dict[str, Any]:
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    crash = inv(
        exit_code=1,
        sanitizer={"tool": "AddressSanitizer", "kind": "double-free"},
        frames=faults.frames(DOUBLE_FREE, python=False),
    )
    if lifetime:
        crash["lifetime_frames"] = faults.lifetime_frames(DOUBLE_FREE)
    (run / "outcome.json").write_text(json.dumps(rec(invocations=[crash])))
    src = tmp_path / "src"
    shutil.copytree(FORK / "pkgs" / "kvset" / "src", src, dirs_exist_ok=True)
    cfg = {
        "patches": [str(CANDS / candidate / "fix.patch")],
        "pre": [str(run)],
        "policy": {"name": "p", "version": "1", "thresholds": {"frames": 5}},
        "src": str(src),
    }
    return faultsite.evaluate(cfg)


def test_a_double_free_fixed_at_the_first_free_is_at_the_fault(tmp_path: Path, faults: Any) -> None:
    got = _fault_site(tmp_path, "kvset-double-free", True, faults)
    assert (got["passed"], got["reasons"]) == (True, [])
    assert got["details"]["touched"][0] == "unset /build/kvset-src/kvset.c:28"
    # the access stack alone (what the gate read before): the real fix looked away from it
    alone = _fault_site(tmp_path, "kvset-double-free", False, faults)
    assert alone["reasons"] == ["fix-away-from-fault"]
    # the wrong fix changes cleanup(), on the access stack: the fault-site gate passes it (the
    # variants gate denies it: a key unset twice)
    assert _fault_site(tmp_path, "kvset-wrong-fix", True, faults)["passed"] is True


# --- a failed run is a failure, not a bad declaration ---------------------------------------

SET_E = {
    "expect": {"sanitizer": "AddressSanitizer: double-free", "exit_code": [1]},
    "accept": {"invocation": [{"key": "accept.invocation.0", "args": "later", "exit_code": [0]}]},
}
DF = {"tool": "AddressSanitizer", "kind": "double-free"}


def test_an_oracle_that_selects_nothing_after_a_post_fix_crash_is_the_runs_failure() -> None:
    crashed = inv(args=["first.conf"], exit_code=1, sanitizer=DF)
    stopped = [rec("post", run=n, invocations=[crashed], exit_code=1) for n in (1, 2)]
    row = expectation.judge_side("post", stopped, SET_E)
    assert (row["holds"], row["reason"]) == (False, "post-fix-still-fails")
    assert "unmatched" not in row  # no InputError (exit 2) from `trace verify`
    assert "accept.invocation.0: selected no target invocation" in row["detail"]
    # the script stopped after a failure only it saw (exit 1, no target failed): the same
    quiet = [rec("post", run=n, invocations=[inv(args=["first.conf"])], exit_code=1) for n in (1,)]
    assert expectation.judge_side("post", quiet, SET_E)["reason"] == "post-fix-still-fails"
    assert oracle.post_fix_acceptable(quiet[0], SET_E)[0] is False


def test_an_oracle_that_selects_nothing_in_a_run_that_succeeded_is_a_bad_declaration() -> None:
    fine = [rec("post", run=1, invocations=[inv(args=["first.conf"])], exit_code=0)]
    row = expectation.judge_side("post", fine, SET_E)
    assert row["unmatched"] == ["accept.invocation.0"]
    # pre-fix, where a failure is the point, it stays a declaration error too
    entry = {"key": "expect.invocation.0", "args": "later", "exit_code": [1]}
    pre_oracles = {"expect": {**SET_E["expect"], "invocation": [entry]}, "accept": {}}
    crashed = inv(args=["first.conf"], exit_code=1, sanitizer=DF)
    pre = expectation.judge_side("pre", [rec(invocations=[crashed], exit_code=1)], pre_oracles)
    assert pre["unmatched"] == ["expect.invocation.0"]


SET_E_REPRO = """\
# stops at the first failing call: a post-fix crash of twice.conf leaves unset.conf unrun
set -e
"$TARGET/bin/kvset" twice.conf
"$TARGET/bin/kvset" unset.conf
"""


@pytest.mark.nix
def test_a_set_e_reproducer_whose_post_fix_run_crashes_is_denied(tmp_path: Path) -> None:
    """kvset's wrong fix under a `set -e` reproducer: the key unset twice still double-frees
    post-fix, the script stops, and [[accept.invocation]] for unset.conf selects nothing: a
    post-fix-still-fails verdict (exit 1), not "selected no target invocation" (exit 2)."""
    fork = tmp_path / "fork"
    shutil.copytree(FORK, fork, ignore=shutil.ignore_patterns(".trace", "result*"))
    cand = fork / "trace" / "candidates" / "kvset-wrong-fix"
    (cand / "twice.conf").write_text("name=demo\nname=\nname=\n")
    (cand / "repro.sh").write_text(SET_E_REPRO)
    toml = (cand / "candidate.toml").read_text()
    toml = toml.replace('data = ["unset.conf"]', 'data = ["unset.conf", "twice.conf"]')
    toml += '\n[[accept.invocation]]\nargs = "unset"\nexit_code = 0\n'
    (cand / "candidate.toml").write_text(toml)
    state = tmp_path / "state"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        args = ["verify", str(cand / "candidate.toml"), "--fork", str(fork)]
        rc = main([*args, "--state-dir", str(state), "-q"])
    assert rc == 1, buf.getvalue()
    (result,) = (state / "verify").glob("*.json")
    verdict = json.loads(result.read_text())
    assert "post-fix-still-fails" in verdict["reasons"], verdict["reasons"]
    claims = {c["claim"]: c for c in verdict["claims"]}
    assert claims["pre-fix-fails-as-expected"]["holds"] is True
    assert "selected no target invocation, the run stopped" in claims["post-fix-survives"]["detail"]
