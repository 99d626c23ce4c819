"""The harness's robustness: canonical invocation order, its own kills are not target signals,
broken pipes, real-time signals, a deleted cwd, leftovers holding the reproducer's pipes, and
fixed-size output capture. The harness runs outside the sandbox against a tiny fake package."""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from engine.build_records import RunRecord
from tests.test_verify_gate import ASAN, EXPECT, inv, load_harness, rec, run_harness
from trace_sandbox.gates import expectation, oracle

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def gate() -> ModuleType:
    return expectation


@pytest.fixture(scope="module")
def harness() -> ModuleType:
    return load_harness()


def test_parallel_targets_are_recorded_in_canonical_order(
    harness: ModuleType, gate: ModuleType, tmp_path: Path
) -> None:
    script = (
        "for i in 1 2 3 4; do ok $i & done\ncrash x &\nfor i in 5 6 7 8; do ok $i & done\nwait\n"
    )
    rec1 = run_harness(tmp_path, "par1", script)
    rec2 = run_harness(tmp_path, "par2", script)
    assert rec1["invocations"] == rec2["invocations"]
    args = [i["args"] for i in rec1["invocations"]]
    assert args == [["x"], *[[str(n)] for n in range(1, 9)]]  # bin/crash sorts first
    assert rec1["invocations"][0]["signal"] == "SIGSEGV"
    keys = [harness.canonical_key(i) for i in rec1["invocations"]]
    assert keys == sorted(keys)
    assert gate.signature(rec1) == gate.signature(rec2)


def test_signature_ignores_invocation_order(gate: ModuleType) -> None:
    crash = inv(exit_code=1, sanitizer=ASAN, args=["long"])
    invs = [inv(args=[str(n)]) for n in range(6)] + [crash]
    shuffled = invs[:]
    random.Random(1).shuffle(shuffled)
    a = rec(invocations=invs, target_failed=True)
    b = rec(run=2, invocations=shuffled, target_failed=True)
    assert gate.signature(a) == gate.signature(b)
    assert gate.judge_side("pre", [a, b], {"expect": EXPECT})["reason"] == "ok"
    c = rec(run=3, invocations=[*invs[:-1], inv(exit_code=2, args=["long"])])
    assert gate.signature(c) != gate.signature(a)  # a different ending still counts


def test_a_background_target_left_running_is_killed_by_the_harness_not_a_crash(
    gate: ModuleType, tmp_path: Path
) -> None:
    script = 'sleep 30 | "$TARGET/bin/reader" >/dev/null 2>&1 &\nsleep 0.5\n"$TARGET/bin/ok"\n'
    start = time.monotonic()
    record = run_harness(tmp_path, "bg", script)
    assert time.monotonic() - start < 10
    reader = [i for i in record["invocations"] if i["target"] == "bin/reader"]
    assert [(i["ended"], i["signal"], i["exit_code"]) for i in reader] == [
        ("killed-by-harness", None, None)
    ]
    assert not record["target_failed"] and not record["timed_out"]
    parsed = RunRecord.model_validate({**record, "side": "post"})
    assert not parsed.failed and not parsed.script_failed
    assert gate.judge_side("post", [record], {"expect": EXPECT})["reason"] == "ok"
    assert gate.judge_side("pre", [record], {"expect": EXPECT})["reason"] == "pre-fix-did-not-fail"


def test_a_reproducer_timeout_fails_the_run_but_is_no_target_signal(
    gate: ModuleType, tmp_path: Path
) -> None:
    script = 'sleep 30 | "$TARGET/bin/reader" &\nsleep 30\n'
    record = run_harness(tmp_path, "to", script, timeout=3)
    [reader] = record["invocations"]
    assert (reader["ended"], reader["signal"], reader["exit_code"]) == ("timed-out", None, None)
    assert record["timed_out"] is True and record["signal"] == "SIGKILL"
    assert not record["target_failed"]
    post = gate.judge_side("post", [record], {"expect": EXPECT})
    assert (post["reason"], "timed out" in post["detail"]) == ("post-fix-still-fails", True)
    assert RunRecord.model_validate(record).script_failed


def test_a_closed_pipe_reaches_the_target_as_sigpipe(gate: ModuleType, tmp_path: Path) -> None:
    start = time.monotonic()
    record = run_harness(tmp_path, "pipe", '"$TARGET/bin/big" | head -1\n', timeout=20)
    assert time.monotonic() - start < 10  # not run on unseen until the timeout
    [big] = record["invocations"]
    assert (big["signal"], big["ended"]) == ("SIGPIPE", "broken-pipe")
    assert record["stdout_tail"] == "line\n" and not record["timed_out"]
    assert not record["target_failed"]
    assert gate.judge_side("post", [record], {"expect": EXPECT})["reason"] == "ok"


def test_realtime_signals_get_a_name(tmp_path: Path) -> None:
    record = run_harness(tmp_path, "rt", "rt\n")
    [rt] = record["invocations"]
    import signal

    name = f"SIG{int(signal.SIGRTMIN) + 2}"
    assert (rt["signal"], rt["ended"]) == (name, None)
    assert record["signal"] is None and record["exit_code"] == 128 + int(signal.SIGRTMIN) + 2
    record = run_harness(tmp_path, "rt2", f"kill -{int(signal.SIGRTMIN) + 3} $$\n")
    assert record["signal"] == f"SIG{int(signal.SIGRTMIN) + 3}"


def test_a_deleted_cwd_is_a_clean_error_not_a_traceback(tmp_path: Path) -> None:
    record = run_harness(tmp_path, "cwd", 'mkdir d && cd d && rmdir ../d\n"$TARGET/bin/ok"\n')
    assert record["exit_code"] == 127
    assert "trace: the target could not be run" in record["stderr_tail"]
    assert "Traceback" not in record["stderr_tail"]


def test_a_setsid_leftover_holding_the_pipes_does_not_hang_the_run(tmp_path: Path) -> None:
    start = time.monotonic()
    record = run_harness(tmp_path, "setsid", "setsid sleep 15 &\necho done\n", timeout=1)
    assert time.monotonic() - start < 8
    assert (record["exit_code"], record["timed_out"], record["stdout_tail"]) == (0, False, "done\n")


@pytest.mark.parametrize("size", [10, 300_000])
def test_capture_keeps_fixed_head_and_tail_whatever_the_read_sizes(
    harness: ModuleType, monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    capture = sys.modules[harness.Capture.__module__]  # the harness's capture module
    monkeypatch.setattr(capture, "CAPTURE_HEAD", 1000)
    monkeypatch.setattr(capture, "CAPTURE_TAIL", 500)
    data = random.Random(size).randbytes(size)
    values = []
    for seed in range(3):
        cap, rng, pos = harness.Capture(), random.Random(seed), 0
        while pos < size:
            n = rng.randrange(1, 4000)
            cap.add(data[pos : pos + n])
            pos += n
        values.append(cap.value())
    assert values[0] == values[1] == values[2]
    if size <= 1500:
        assert values[0] == data
    else:
        assert values[0].startswith(data[:1000]) and values[0].endswith(data[-500:])
        assert f"[trace: {size - 1500} bytes omitted]".encode() in values[0]


def test_records_without_the_new_fields_still_load(gate: ModuleType) -> None:
    old: dict[str, Any] = rec(invocations=[inv(exit_code=1, sanitizer=ASAN)])
    assert "timed_out" not in old and "ended" not in old["invocations"][0]
    parsed = RunRecord.model_validate(old)
    assert parsed.failed and not parsed.timed_out and parsed.invocations[0].ended is None
    assert oracle.invocation_failed(old["invocations"][0])


def test_a_target_that_registers_after_the_harness_ended_its_targets_is_ended_too(
    tmp_path: Path,
) -> None:
    """A wrapper's request still in flight when the reproducer timed out must not start a
    target that then runs on (or finishes with exit 0) after the harness ended the others."""
    import subprocess
    import sys

    from trace_sandbox.harness import targets, targetview

    reader = tmp_path / "reader"
    reader.write_text("#!/bin/sh\ncat >/dev/null\necho read-all\n")
    reader.chmod(0o755)
    sock = str(tmp_path / "h.sock")
    harness = targets.Harness(str(tmp_path), sock, {"reader": str(reader)}, sys.executable, "")
    harness.start()
    harness.kill_targets("timed-out")  # the reproducer timed out before this request arrived
    wrapper = tmp_path / "wrapper"
    targetview.write_wrapper(str(wrapper), sys.executable, sock, "reader")
    with subprocess.Popen([str(wrapper)], stdin=subprocess.PIPE) as client:
        client.wait(timeout=30)  # stdin stays open: only the harness's kill ends the reader
    [entry] = harness.stop()
    assert (entry["ended"], entry["signal"], entry["exit_code"]) == ("timed-out", None, None)


@pytest.mark.parametrize("pidfd", [True, False])
def test_the_reproducer_wait_wakes_on_exit_and_still_times_out(
    harness: ModuleType, monkeypatch: pytest.MonkeyPatch, pidfd: bool
) -> None:
    """exited_within waits on a pidfd (woken by the exit, not polling up to 50 ms a look);
    without pidfd_open it falls back to Popen's own wait. Both end a sleeper at the deadline."""
    import os
    import subprocess

    from trace_sandbox.harness import collect

    if not pidfd:

        def refuse(pid: int) -> int:
            raise OSError("no pidfd here")

        monkeypatch.setattr(os, "pidfd_open", refuse)
    quick = subprocess.Popen([sys.executable, "-c", "pass"])
    assert collect.exited_within(quick, 30) is True
    assert quick.wait() == 0
    slow = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert collect.exited_within(slow, 0.3) is False
        assert slow.poll() is None  # it came back at the deadline, the sleeper still running
    finally:
        slow.kill()
        slow.wait()


def test_symbolize_0_is_appended_to_every_sanitizers_options(tmp_path: Path) -> None:
    script = 'ASAN_OPTIONS=detect_leaks=0 "$TARGET/bin/showenv"\n'
    off = run_harness(tmp_path, "sym0", script, extra_env={"symbolize": "0"})
    lines = off["invocations"][0]["stdout_tail"].splitlines()
    # after the reproducer's own options (the last value of a flag wins)
    assert "ASAN_OPTIONS=detect_leaks=0:symbolize=0" in lines
    for var in ("UBSAN_OPTIONS", "MSAN_OPTIONS", "TSAN_OPTIONS", "LSAN_OPTIONS"):
        assert f"{var}=symbolize=0" in lines
    on = run_harness(tmp_path, "sym1", script)
    lines = on["invocations"][0]["stdout_tail"].splitlines()
    assert "ASAN_OPTIONS=detect_leaks=0" in lines
    assert not [line for line in lines if "symbolize" in line]


OVERFLOW_C = """#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv) {
    char *buf = malloc(4);
    memcpy(buf, argv[1], strlen(argv[1]) + 1);
    free(buf);
    return 0;
}
"""


def test_an_unsymbolized_asan_report_keeps_the_verdict_fields_not_the_frames(
    tmp_path: Path,
) -> None:
    """A real AddressSanitizer crash (host gcc): with symbolize=0 the record says the same tool,
    kind and ending, without frames; symbolized, the frames carry file:line."""
    import subprocess

    pkg = tmp_path / "pkg"
    (pkg / "bin").mkdir(parents=True)
    (tmp_path / "overflow.c").write_text(OVERFLOW_C)
    subprocess.run(
        ["gcc", "-g", "-fsanitize=address", "-o", str(pkg / "bin" / "overflow"), "overflow.c"],
        cwd=tmp_path,
        check=True,
    )
    script = '"$TARGET/bin/overflow" much-too-long\n'
    runs = {
        "on": run_harness(tmp_path, "asan1", script),
        "off": run_harness(tmp_path, "asan0", script, extra_env={"symbolize": "0"}),
    }
    [on], [off] = (runs[k]["invocations"] for k in ("on", "off"))
    assert on["sanitizer"] == off["sanitizer"] == ASAN
    assert (on["exit_code"], on["signal"]) == (off["exit_code"], off["signal"]) == (1, None)
    assert runs["on"]["target_failed"] and runs["off"]["target_failed"]
    assert any(f["file"] and f["file"].endswith("overflow.c") for f in on["frames"])
    assert off["frames"] == []


def test_arguments_and_environment_reach_the_target_byte_for_byte(tmp_path: Path) -> None:
    """The wrapper hands argv, cwd and environment over as bytes: not UTF-8, `=` and spaces
    inside values, an empty argument all arrive as they were."""
    script = "X='a=b c' \"$TARGET/bin/bytes\" \"$(printf 'a\\377b')\" ''\n"
    record = run_harness(tmp_path, "bytes", script)
    [one] = record["invocations"]
    assert one["stdout_tail"].split() == ["61", "ff", "62", "61", "3d", "62", "20", "63"]
    assert one["args"] == ["a\udcffb", ""]  # the record keeps the undecodable byte escaped
    assert one["exit_code"] == 0 and not record["target_failed"]


def test_a_malformed_wrapper_request_is_refused() -> None:
    from trace_sandbox.harness import targets

    good = targets.request_of(b"bin/x\0/v/bin/x\0/w\0" + b"2\0a\0\0K=v=w\0E=")
    assert good == {
        "name": "bin/x",
        "argv0": "/v/bin/x",
        "cwd": "/w",
        "args": ["a", ""],
        "env": {"K": "v=w", "E": ""},
    }
    for bad in (b"", b"bin/x\0a\0b", b"bin/x\0a\0b\0two\0", b"bin/x\0a\0b\x003\0one"):
        with pytest.raises(ValueError):
            targets.request_of(bad)
    assert (targets.reply_of(3), targets.reply_of(-11)) == (b"exit 3", b"signal 11")
