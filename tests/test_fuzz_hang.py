"""Issue 25: a C target's hang is its own CPU time, not the clock, so the fuzz plan does not
depend on how loaded the builder is (fuzz_server.limit, run_limited, ended; fuzz_runner.CPU_LIMIT).

A real program, compiled as the fuzzing build compiles it (gcc trace-pc, ASan -g, trace's
runtime linked last), runs each input by its fork server and by exec; both ways must give the
same outcome. 'L' loops on the CPU (a hang, by SIGXCPU: ASan does not take it for a crash), 'I'
ignores SIGXCPU and loops (a hang, by the hard limit's SIGKILL), 'Z' sleeps past the old 2 s
wall timeout using no CPU and exits 0 (not a hang), 'W' does a fixed amount of CPU work and
exits 0 (not a hang, also with the machine loaded so that it takes longer than 2 s of wall
time), 'S' dies of SIGSEGV (a crash). A run blocked without using CPU is stopped by the wall
backstop (WALL_LIMIT) and is a hang.

The fast tier (docs/performance.md, "Test tiers") keeps a CPU loop is a hang, a SIGSEGV is a
crash, the wall backstop and the limit deaths; the tests marked `slow` (~37 s together here: the
2.2 s sleeps, the replay's and the Python fallback's repeat of the same limits, and ten busy
processes for ~20 s) run in --all."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.fuzzbuild import fuzz_binary
from trace_sandbox.gates import fuzz_runner
from trace_sandbox.gates.corpus_replay import Replayer, behaviour
from trace_sandbox.gates.fuzz import Outcome
from trace_sandbox.gates.fuzz_python import run_plain
from trace_sandbox.gates.fuzz_runner import ProgramRunner
from trace_sandbox.gates.fuzz_server import ended
from trace_sandbox.gates.variants import Invocation, units_of

pytestmark = pytest.mark.skipif(not shutil.which("gcc"), reason="needs gcc")

SPIN = r"""
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
int main(void) {
    char c = 0;
    if (read(0, &c, 1) != 1)
        return 2;
    volatile unsigned long x = 0;
    switch (c) {
    case 'I':
        signal(SIGXCPU, SIG_IGN);
        /* fall through */
    case 'L':
        for (;;)
            x++;
    case 'Z':
        usleep(2200000);
        return 0;
    case 'W':
        for (unsigned long i = 0; i < WORK; i++)
            x += i;
        return 0;
    case 'B':
        pause();
        return 0;
    case 'S':
        raise(SIGSEGV);
    }
    return 0;
}
"""
WORK = 100_000_000  # 'W': iterations, ~0.3 s of CPU here (each counts its edge): 3x below 1 s


@pytest.fixture(scope="module")
def spin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """$TARGET with bin/spin, built as the fuzzing build builds (its fork server works)."""
    tmp = tmp_path_factory.mktemp("spin")
    (tmp / "spin.c").write_text(SPIN)
    out = fuzz_binary(tmp, tmp / "target" / "bin" / "spin", [tmp / "spin.c"], f"-DWORK={WORK}UL")
    return out.parent.parent


@pytest.fixture
def tight(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tightest CPU limit (RLIMIT_CPU counts whole seconds); the wall backstop as is."""
    monkeypatch.setattr(fuzz_runner, "CPU_LIMIT", 1)


def _run(target: Path, tmp: Path, data: bytes, fork_server: bool) -> tuple[Outcome, str, float]:
    """The outcome of one execution with `data` on stdin, the way it ran, its wall time."""
    invs = [Invocation("bin/spin", "program", (), stdin=b"a")]
    work = tmp / f"work-{len(list(tmp.iterdir()))}"
    work.mkdir()
    units = units_of(invs, {})
    with ProgramRunner(str(target), invs, {}, units, str(work), fork_server=fork_server) as run:
        start = time.monotonic()
        outcome = run(0, data)
        return outcome, run.mode(), time.monotonic() - start


def _brief(out: Outcome) -> tuple[bool, str | None, int, int]:
    """An outcome to compare and show (its features are a 2^19-bit integer): hung, crash, and
    the features' bit count and a digest of them."""
    return out.hung, out.crash, bin(out.features).count("1"), out.features % (2**61 - 1)


def _both(target: Path, tmp: Path, data: bytes) -> Outcome:
    """The outcome by the fork server and by exec: they must be the same."""
    served, mode, _ = _run(target, tmp, data, True)
    execd, mode_exec, _ = _run(target, tmp, data, False)
    assert (mode, mode_exec) == ("fork-server", "exec")
    assert _brief(served) == _brief(execd), data
    return served


@pytest.mark.usefixtures("tight")
def test_a_cpu_loop_is_a_hang_by_its_cpu_time_both_ways(spin: Path, tmp_path: Path) -> None:
    for data in (b"L", b"I"):  # SIGXCPU at the soft limit; SIGKILL at the hard one
        out = _both(spin, tmp_path, data)
        assert out.hung and out.crash is None, data


@pytest.mark.slow
@pytest.mark.usefixtures("tight")
def test_sleeping_past_the_old_wall_timeout_is_not_a_hang(spin: Path, tmp_path: Path) -> None:
    """2.2 s asleep, no CPU: the old 2 s of wall time made it a hang; the CPU limit does not."""
    out = _both(spin, tmp_path, b"Z")
    assert not out.hung and out.crash is None


@pytest.mark.usefixtures("tight")
def test_a_crash_is_a_crash_and_not_a_hang(spin: Path, tmp_path: Path) -> None:
    out = _both(spin, tmp_path, b"S")
    assert out.crash is not None and "SEGV" in out.crash and not out.hung


def test_a_run_blocked_without_cpu_is_a_hang_at_the_wall_backstop(
    spin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fuzz_runner, "WALL_LIMIT", 0.5)
    out = _both(spin, tmp_path, b"B")
    assert out.hung and out.crash is None


def test_a_limit_death_is_a_hang_and_a_fatal_signal_is_not() -> None:
    assert ended(-24).hung and ended(-9).hung  # SIGXCPU, SIGKILL (the hard limit)
    assert not ended(-11).hung and not ended(0).hung and not ended(1).hung
    assert ended(0, stopped=True).hung


@pytest.mark.slow
@pytest.mark.usefixtures("tight")
def test_the_corpus_replay_judges_a_hang_by_the_same_limits(spin: Path, tmp_path: Path) -> None:
    """The mutant-run step's replay of the corpus (corpus_replay.py) ran each invocation with a
    2 s wall timeout too: it uses the loop's limits (a limit death is a hang even after a
    sanitizer's report: the next test)."""
    stdin = {"kind": "stdin", "name": "stdin:0"}
    doc = {"invocations": [{"target": "bin/spin", "kind": "program", "args": []}], "units": [stdin]}
    (tmp_path / "w").mkdir()
    player = Replayer(doc, str(tmp_path / "w"))
    seen = {d: player.run(str(spin), 0, d)[0]["class"] for d in (b"L", b"Z", b"S", b"W")}
    assert seen == {b"L": "hang", b"Z": "ok", b"S": "crash", b"W": "ok"}


def test_the_corpus_replay_takes_a_limit_death_for_a_hang_after_a_sanitizer_report() -> None:
    """The replay's verdict on an ended run (no program: the fast tier's part of the test above)."""
    spin = "bin/spin"
    report = b"SUMMARY: UndefinedBehaviorSanitizer: undefined-behavior x.c:1:1"
    assert behaviour(-24, b"", report, str(spin)) == {"class": "hang"}
    assert behaviour(-11, b"", report, str(spin))["class"] == "crash"


@pytest.mark.slow
@pytest.mark.usefixtures("tight")
def test_the_python_fallback_without_a_tracer_judges_a_hang_by_cpu_time(tmp_path: Path) -> None:
    """A Python invocation with options only the interpreter parses runs untraced (run_plain):
    no events to count, so its hang was 2 s of wall time; it is the CPU limit now."""
    (tmp_path / "prog.py").write_text(
        "import sys, time\nif sys.stdin.read() == 'L':\n    while True: pass\ntime.sleep(2.2)\n"
    )
    inv = Invocation("prog.py", "python", ("-X", "dev", "prog.py"))
    spun = run_plain(inv, str(tmp_path), [], b"L", str(tmp_path))
    slept = run_plain(inv, str(tmp_path), [], b"Z", str(tmp_path))
    assert spun.hung and spun.crash is None
    assert not slept.hung and slept.exit_code == 0 and slept.crash is None


@contextmanager
def _loaded(cpu: int, burners: int) -> Iterator[None]:
    """This process and its children on one CPU, shared with `burners` CPU-bound processes."""
    before = os.sched_getaffinity(0)
    procs = [
        subprocess.Popen(
            ["sh", "-c", "while :; do :; done"],
            preexec_fn=lambda: os.sched_setaffinity(0, {cpu}),
        )
        for _ in range(burners)
    ]
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
        for p in procs:
            p.kill()
            p.wait()


@pytest.mark.slow
@pytest.mark.usefixtures("tight")
def test_the_same_work_is_judged_the_same_on_a_loaded_machine(spin: Path, tmp_path: Path) -> None:
    """A run that does a fixed amount of CPU work is not a hang, idle or loaded (one CPU shared
    with ten busy processes: it took longer than the old 2 s of wall time); a CPU loop is a
    hang either way (loaded, by its fork server only: ~11 s of wall time here). Both ways agree
    on the work under load too."""
    idle = {d: _both(spin, tmp_path, d) for d in (b"W", b"L")}
    with _loaded(min(os.sched_getaffinity(0)), burners=10):
        start = time.monotonic()
        loaded = {b"W": _both(spin, tmp_path, b"W")}
        wall = (time.monotonic() - start) / 2
        loaded[b"L"] = _run(spin, tmp_path, b"L", True)[0]
    assert {d: _brief(o) for d, o in loaded.items()} == {d: _brief(o) for d, o in idle.items()}
    assert not idle[b"W"].hung and idle[b"L"].hung
    print(f"'W' under load: {wall:.2f} s of wall time")  # -s shows it: > 2 s here
