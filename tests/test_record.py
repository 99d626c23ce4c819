"""`trace record` (issue 32), the parts that are pure logic, against explicit fakes: capturing a
call (files by content, redaction, refusals), the reproducer it writes, the failure signature and
`[expect]` read from a harness record, minimisation by the shared delta debugging (trials played
by a Python predicate instead of Nix builds), the skeleton a strict candidate load accepts, and
the command line's bad input. The real builds: tests/test_record_nix.py."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from engine.candidate import load_candidate
from engine.cli import main
from engine.errors import StepFailed, UsageError
from engine.record.capture import Redactions, capture
from engine.record.failure import failure_of, run_summary
from engine.record.interaction import Arg, Interaction, command_line
from engine.record.minimise import Shrinker, minimise
from engine.record.skeleton import Skeleton, write_skeleton
from trace_sandbox.ddmin import shrink
from trace_sandbox.harness.faults import python_frames, sanitizer_frames

REPO = Path(__file__).resolve().parent.parent
KEY_OVERFLOW = REPO / "tests" / "fixtures" / "fork" / "trace" / "candidates" / "cparse-key-overflow"

ASAN = """=================================================================
==PID==ERROR: AddressSanitizer: heap-buffer-overflow on address 0xADDR at pc 0xADDR bp 0xADDR sp 0xADDR
WRITE of size 40 at 0xADDR thread T0
    #0 0xADDR in __interceptor_memcpy ../../../../src/libsanitizer/sanitizer_common/sanitizer_common_interceptors.inc:827
    #1 0xADDR in parse_line <tmp>/source/cparse.c:18
    #2 0xADDR in main <tmp>/source/cparse.c:52

SUMMARY: AddressSanitizer: heap-buffer-overflow ../../../../src/libsanitizer/sanitizer_common/sanitizer_common_interceptors.inc:827 in __interceptor_memcpy
==PID==ABORTING
"""  # noqa: E501

TRACEBACK = """Traceback (most recent call last):
  File "<target>/bin/tcols", line 3, in <module>
  File "<target>/lib/python3.11/site-packages/textcols/core.py", line 9, in widths
    return max(len(c) for c in cols) // 0
ZeroDivisionError: integer division or modulo by zero
"""


def invocation(**fields: Any) -> dict[str, Any]:
    base = {"target": "bin/cparse", "args": ["x.conf"], "exit_code": 0, "signal": None,
            "sanitizer": None, "frames": [], "stdout": "", "stderr": "", "ended": None}  # fmt: skip
    return {**base, **fields}


def asan_record(function: str = "parse_line") -> dict[str, Any]:
    stderr = ASAN.replace("parse_line", function)
    san = {"tool": "AddressSanitizer", "kind": "heap-buffer-overflow"}
    inv = invocation(exit_code=1, stderr=stderr, frames=sanitizer_frames(stderr), sanitizer=san)
    return {"invocations": [inv]}


# --- capture ----------------------------------------------------------------------------------


def test_files_named_in_argv_are_captured_by_content_under_a_safe_unique_name(
    tmp_path: Path,
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "in put.conf").write_bytes(b"k=v\n")
    (tmp_path / "b" / "in put.conf").write_bytes(b"\xff\x00binary")
    call, seen = capture("bin/cparse", ["-v", "a/in put.conf", "b/in put.conf", "missing.conf"],
                         cwd=tmp_path)  # fmt: skip
    assert call.program == "cparse"
    assert call.args == (Arg("-v"), Arg("in_put.conf", file=True),
                         Arg("2-in_put.conf", file=True), Arg("missing.conf"))  # fmt: skip
    assert dict(call.files) == {"in_put.conf": b"k=v\n", "2-in_put.conf": b"\xff\x00binary"}
    assert seen.counts == {}


def test_secrets_in_files_arguments_stdin_and_variables_are_redacted_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    (tmp_path / "cfg").write_text(f"name=demo\ntoken={token}\n")
    monkeypatch.setenv("GH", token)
    call, seen = capture("cparse", ["cfg", f"--auth={token}"], stdin=f"{token}\n".encode(),
                         env=["GH", "MODE=fast"], cwd=tmp_path)  # fmt: skip
    everything = json.dumps([call.args[1].text, call.env, dict(call.files)["cfg"].decode(),
                             (call.stdin or b"").decode()])  # fmt: skip
    assert token not in everything and "[REDACTED:github-token]" in everything
    assert dict(call.env)["MODE"] == "fast"
    assert set(seen.counts) == {"file cfg", "argument 2", "stdin", "variable GH"}


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["."], [], "is a directory"),
        ([], ["TRACE_RECORD_SURELY_UNSET"], "not set in this environment"),
        ([], ["LD_PRELOAD=/x.so"], "not a variable trace can pass"),
        ([], ["1BAD=x"], "not a variable trace can pass"),
    ],
)
def test_a_call_trace_cannot_capture_is_refused_with_a_hint(
    tmp_path: Path, argv: list[str], env: list[str], message: str
) -> None:
    with pytest.raises(UsageError, match=message) as err:
        capture("cparse", argv, env=env, cwd=tmp_path)
    assert err.value.hint


def test_a_program_must_be_a_name_in_bin() -> None:
    for bad in ("../../bin/sh", "/bin/sh", "a b"):
        with pytest.raises(UsageError, match="not a name in the package's bin/"):
            capture(bad, [])


def test_the_command_line_quotes_every_word_and_feeds_stdin_from_its_file() -> None:
    call = Interaction("cparse", (Arg("it's"), Arg("x.conf", file=True)),
                       (("x.conf", b""),), b"in", (("MODE", "a b"),))  # fmt: skip
    assert command_line(call) == "MODE='a b' \"$TARGET/bin/cparse\" 'it'\"'\"'s' x.conf < stdin.bin"
    assert set(call.data()) == {"x.conf", "stdin.bin"}
    assert call.with_args((0,)).files == ()  # a file no argument names is dropped


# --- failure ----------------------------------------------------------------------------------


def test_an_asan_failure_is_its_kind_and_the_packages_own_faulting_function() -> None:
    f = failure_of(asan_record(), "cparse")
    assert f is not None
    assert f.signature() == ("sanitizer", "AddressSanitizer: heap-buffer-overflow", "parse_line")
    assert f.expect() == {"sanitizer": "AddressSanitizer: heap-buffer-overflow", "exit_code": 1,
                          "stderr": r"\bin parse_line\b"}  # fmt: skip
    assert re.search(f.expect()["stderr"], ASAN, re.M)
    other = failure_of(asan_record("main"), "cparse")
    assert other is not None and other.signature() != f.signature()


def test_a_python_exception_is_its_exit_and_innermost_own_frame() -> None:
    inv = invocation(target="bin/tcols", exit_code=1, stderr=TRACEBACK,
                     frames=python_frames(TRACEBACK))  # fmt: skip
    f = failure_of({"invocations": [inv]}, "tcols")
    assert f is not None and f.signature() == ("exit", "1", "widths")
    assert re.search(f.expect()["stderr"], TRACEBACK, re.M)


def test_a_plain_exit_is_stated_with_the_last_line_it_printed() -> None:
    inv = invocation(exit_code=2, stderr="cparse: reading\nusage: cparse FILE\n")
    f = failure_of({"invocations": [inv]}, "cparse")
    assert f is not None and f.expect() == {"exit_code": 2, "stderr": r"usage:\ cparse\ FILE"}


def test_a_run_that_did_not_fail_or_failed_elsewhere_has_no_failure() -> None:
    assert failure_of({"invocations": [invocation()]}, "cparse") is None
    assert failure_of(asan_record(), "other") is None
    killed = invocation(exit_code=None, signal="SIGTERM", ended="killed-by-harness")
    assert failure_of({"invocations": [killed]}, "cparse") is None


# --- minimisation -----------------------------------------------------------------------------


@dataclass
class FakeTrials:
    """Plays the harness: a call crashes in parse_line when a data file holds a line whose key
    (before '=') is 16+ bytes and the call has the `--strict` argument; otherwise in `main` when
    a '!' is in it. Counts engine runs (batches)."""

    runs: int = 0
    seen: list[str] = field(default_factory=list)

    def run(self, calls: list[Interaction]) -> list[dict[str, Any]]:
        self.runs += 1
        return [self.record(c) for c in calls]

    def record(self, call: Interaction) -> dict[str, Any]:
        self.seen.append(call.digest())
        text = b"".join(c for _, c in call.files) + (call.stdin or b"")
        long_key = any(len(line.partition(b"=")[0]) >= 16 and b"=" in line
                       for line in text.splitlines())  # fmt: skip
        if long_key and Arg("--strict") in call.args:
            return asan_record()
        if b"!" in text:
            return asan_record("main")
        return {"invocations": [invocation()]}


def recorded_call() -> Interaction:
    data = b"name=demo\n# comment!\n" + b"k" * 40 + b"=value\nother=1\n"
    return Interaction("cparse", (Arg("-q"), Arg("--strict"), Arg("x.conf", file=True),
                                  Arg("-v")), (("x.conf", data),))  # fmt: skip


def test_minimisation_keeps_the_same_failure_over_argv_lines_and_bytes() -> None:
    fake = FakeTrials()
    call = recorded_call()
    failure = failure_of(fake.record(call), "cparse")
    assert failure is not None and failure.function == "parse_line"
    shrinker = Shrinker(fake, failure, budget=500)  # type: ignore[arg-type]
    small = minimise(call, shrinker)
    assert small.args == (Arg("--strict"), Arg("x.conf", file=True))
    assert dict(small.files)["x.conf"] == b"k" * 16 + b"="  # 1-minimal: any byte less passes
    assert failure_of(fake.record(small), "cparse") == failure
    assert shrinker.used <= 500 and fake.runs < shrinker.used  # trials are batched


def test_minimisation_never_trades_the_failure_for_another_one() -> None:
    """Without the long key, the '!' alone still crashes (in `main`): a minimiser that kept
    "any crash" would shrink to b"!". Not the same failure: the parse_line crash stays."""
    fake = FakeTrials()
    call = Interaction("cparse", (Arg("--strict"), Arg("x.conf", file=True)),
                       (("x.conf", b"!" + b"k" * 20 + b"=\n"),))  # fmt: skip
    failure = failure_of(fake.record(call), "cparse")
    assert failure is not None and failure.function == "parse_line"
    assert failure_of(fake.record(call.with_file("x.conf", b"!")), "cparse") not in (None, failure)
    small = minimise(call, Shrinker(fake, failure, budget=500))  # type: ignore[arg-type]
    assert dict(small.files)["x.conf"] == b"k" * 16 + b"="


def test_the_stdin_and_the_variables_are_minimised_too() -> None:
    fake = FakeTrials()
    stdin = b"a=1\n" + b"k" * 30 + b"=x\nb=2\n"
    call = Interaction("cparse", (Arg("--strict"),), (), stdin, (("A", "1"), ("B", "2")))
    failure = failure_of(fake.record(call), "cparse")
    assert failure is not None
    small = minimise(call, Shrinker(fake, failure, budget=500))  # type: ignore[arg-type]
    assert small.stdin == b"k" * 16 + b"=" and small.args == (Arg("--strict"),)
    assert small.env == ()  # the fake's crash needs neither variable


def test_the_budget_bounds_the_trials() -> None:
    fake = FakeTrials()
    call = recorded_call().with_file("x.conf", b"k" * 40 + b"=v\n")
    failure = failure_of(asan_record(), "cparse")
    assert failure is not None
    shrinker = Shrinker(fake, failure, budget=3)  # type: ignore[arg-type]
    minimise(call, shrinker)
    assert shrinker.used <= 3


def test_shrink_over_indices_is_the_fuzz_gates_ddmin() -> None:
    def first(trials: list[tuple[int, ...]]) -> int | None:
        return next((i for i, t in enumerate(trials) if {2, 5} <= set(t)), None)

    kept, used = shrink(tuple(range(8)), first, 100)
    assert kept == (2, 5) and 0 < used < 100


# --- the skeleton -----------------------------------------------------------------------------


def test_the_skeleton_is_a_candidate_a_strict_load_accepts(tmp_path: Path) -> None:
    failure = failure_of(asan_record(), "cparse")
    assert failure is not None
    call = Interaction("cparse", (Arg("x.conf", file=True),), (("x.conf", b"k" * 16 + b"="),))
    fix = (KEY_OVERFLOW / "fix.patch").read_bytes()
    run = run_summary(asan_record(), "cparse")
    s = Skeleton("rec-1", "cparse", failure, call, call, Redactions(), None,
                 (("fix.patch", fix),), None, run)  # fmt: skip
    cand = load_candidate(write_skeleton(tmp_path / "rec", s))
    assert cand.spec.reproducer.data == ["x.conf"]
    assert cand.spec.expect.sanitizer == "AddressSanitizer: heap-buffer-overflow"
    assert cand.spec.expect.exit_code == 1
    assert (tmp_path / "rec" / "repro.sh").read_text().endswith('"$TARGET/bin/cparse" x.conf\n')
    record = json.loads((tmp_path / "rec" / "record.json").read_text())
    assert record["schema"] == "trace.record/v1" and record["failure"]["function"] == "parse_line"
    [inv] = record["run"]["invocations"]  # what the harness saw, kept for a reviewer
    assert inv["exit_code"] == 1 and inv["sanitizer"]["kind"] == "heap-buffer-overflow"
    assert [f["function"] for f in inv["frames"]] == ["parse_line", "main"]
    assert json.loads((tmp_path / "rec" / "advisory.json").read_text())["id"].startswith("TRACE-")


def test_a_skeleton_that_cannot_be_written_leaves_nothing(tmp_path: Path) -> None:
    failure = failure_of(asan_record(), "cparse")
    assert failure is not None
    call = Interaction("cparse", (Arg("x.conf", file=True),), (("x.conf", b"k"),))
    s = Skeleton("rec-1", "cparse", failure, call, call, Redactions(), None,
                 (("repro.sh/x", b""),), None, {})  # fmt: skip
    with pytest.raises(OSError):
        write_skeleton(tmp_path / "rec", s)
    assert not (tmp_path / "rec").exists()


# --- the command line -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["record", "--package", "cparse"], "no program to record"),
        (["record", "--package", "cparse", "--budget", "3", "--", "cparse"], "--budget limits"),
        (["record", "--package", "cparse", "--stdin", "/nonexistent", "--", "cparse"], "--stdin"),
        (["record", "--package", "cparse", "--advisory", "/nonexistent", "--", "cparse"],
         "--advisory"),
        (["record", "--package", "cparse", "--id", "../x", "--", "cparse"], "not a candidate id"),
        (["record", "--package", "cparse", "--out", "/", "--", "cparse"], "is outside the fork"),
    ],
)  # fmt: skip
def test_bad_command_lines_exit_2_with_a_hint_and_write_nothing(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    fork = tmp_path / "fork"
    skip = shutil.ignore_patterns(".trace", "result*", "pkgs", "candidates")
    shutil.copytree(REPO / "tests" / "fixtures" / "fork", fork, ignore=skip)
    assert main([*argv[:1], "--fork", str(fork), *argv[1:]]) == 2
    err = capsys.readouterr().err
    assert message in err and "hint:" in err
    assert not (fork / ".trace").exists() and not (fork / "trace" / "candidates").exists()


def test_a_package_that_does_not_build_is_exit_1_naming_the_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine's run is played by a fake whose package step failed (no Nix): StepFailed."""
    import engine.evaluation
    import engine.run
    from engine.record.trials import BUILD, Trials
    from engine.run import RunResult, StepResult

    def failed_run(graph: Any, index: Any, **_: Any) -> RunResult:
        steps = {sid: StepResult(id=sid, key="k", status="skipped") for sid in graph.steps}
        steps[BUILD] = StepResult(id=BUILD, key="k", status="failed", log_tail="make: *** Error 1")
        return RunResult(graph="g", steps=steps)

    monkeypatch.setattr(engine.run, "run_graph", failed_run)
    monkeypatch.setattr(engine.evaluation, "evaluate_before_state", lambda *a: None)
    fork = tmp_path / "fork"
    skip = shutil.ignore_patterns(".trace", "result*", "candidates")
    shutil.copytree(REPO / "tests" / "fixtures" / "fork", fork, ignore=skip)
    call = Interaction("cparse", (Arg("x"),), ())
    with pytest.raises(StepFailed, match=r"step package did not build\n  make: \*\*\* Error 1"):
        Trials(fork, tmp_path / "state", "cparse").run([call])
