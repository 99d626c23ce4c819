"""The fuzzing gate's fork server (trace_fuzz_rt.c + fuzz_server.py + fuzz_runner.py).

A toy program, compiled as the fuzzing build compiles (gcc trace-pc, ASan, trace's runtime
linked after the program's objects) plus an object with a constructor linked after the
runtime, runs every input both ways, by its fork server and by exec: the outcomes (coverage
features, crash signature, hang) must be identical, through a data file, stdin and an argument.
A program that is not such an executable (a script in front of it) falls back to exec and says
why; a server killed mid-run falls back too, with the same results; a hang is killed and the
server serves on."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from tests.fuzzbuild import fuzz_binary
from trace_sandbox.gates import fuzz_runner
from trace_sandbox.gates.fuzz import fuzz
from trace_sandbox.gates.fuzz_runner import ProgramRunner
from trace_sandbox.gates.fuzz_server import ForkServer
from trace_sandbox.gates.variants import Invocation, units_of

pytestmark = pytest.mark.skipif(not shutil.which("gcc"), reason="needs gcc")

# Reads its input from `-f FILE`, `-a TEXT` or stdin. 'H' hangs, "BUG" overflows a heap
# buffer, 'S' dies of SIGSEGV; other bytes take a branch each (coverage). Both constructors
# must have run before main (the early one is instrumented: counted before the fork).
TOY = r"""
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
extern int late_ready;
static int early;
__attribute__((constructor)) static void early_init(void) {
    for (int i = 0; i < 3; i++)
        early += i;
}
int main(int argc, char **argv) {
    if (early != 3 || late_ready != 1)
        abort();
    char buf[256] = {0};
    if (argc == 3 && strcmp(argv[1], "-a") == 0) {
        strncpy(buf, argv[2], sizeof buf - 1);
    } else {
        FILE *f = argc == 3 && strcmp(argv[1], "-f") == 0 ? fopen(argv[2], "rb") : stdin;
        if (f == NULL)
            return 2;
        fread(buf, 1, sizeof buf - 1, f);
    }
    if (buf[0] == 'H')
        for (;;)
            pause();
    if (buf[0] == 'S')
        raise(SIGSEGV);
    if (strncmp(buf, "BUG", 3) == 0) {
        char *p = malloc(4);
        p[strlen(buf)] = 1;
        free(p);
    }
    int score = 0;
    for (char *c = buf; *c; c++) {
        if (*c == 'a') score += 1;
        else if (*c == 'b') score += 2;
        else if (*c == '%') score *= 2;
    }
    printf("%d\n", score);
    fprintf(stderr, "done\n");
    return 0;
}
"""
LATE = "int late_ready;\n__attribute__((constructor)) static void late(void) { late_ready = 1; }\n"


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """$TARGET with bin/toy (the server), bin/toy-script (a script in front of it)."""
    tmp = tmp_path_factory.mktemp("toy")
    (tmp / "toy.c").write_text(TOY)
    (tmp / "late.c").write_text(LATE)
    out = tmp / "target" / "bin"
    late = tmp / "late.o"
    subprocess.run(["gcc", "-O0", "-c", str(tmp / "late.c"), "-o", str(late)], check=True)
    fuzz_binary(tmp, out / "toy", [tmp / "toy.c", late])
    script = out / "toy-script"
    script.write_text(f'#!/bin/sh\nexec "{out / "toy"}" "$@"\n')
    script.chmod(0o755)
    return out.parent


INPUTS = [b"", b"a", b"ab%", b"aaab%b", b"BUG-and-more", b"S", b"bbbbbbbb%%%"]


def _runner(
    target: Path, tmp: Path, invs: list[Invocation], files: dict[str, bytes], **kw: bool
) -> ProgramRunner:
    work = tmp / f"work-{len(list(tmp.iterdir()))}"
    work.mkdir()
    return ProgramRunner(str(target), invs, files, units_of(invs, files), str(work), **kw)


SHAPES = {
    "file": ([Invocation("bin/toy", "program", ("-f", "in.txt"))], {"in.txt": b"a"}),
    "stdin": ([Invocation("bin/toy", "program", (), stdin=b"a")], {}),
    "arg": ([Invocation("bin/toy", "program", ("-a", "a"))], {}),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_fork_server_sees_what_an_exec_sees(toy: Path, tmp_path: Path, shape: str) -> None:
    invs, files = SHAPES[shape]
    with (
        _runner(toy, tmp_path, invs, files) as forked,
        _runner(toy, tmp_path, invs, files, fork_server=False) as execd,
    ):
        (unit,) = [k for k, u in enumerate(forked.units) if u.kind == shape]
        crashed = set()
        for data in INPUTS:
            got, want = forked(unit, data), execd(unit, data)
            assert got == want, (data, got, want)
            assert got.features, data  # coverage came back
            if got.crash:
                crashed.add(data)
        assert forked.mode() == "fork-server" and forked.fallback == {}
        assert execd.mode() == "exec"
    assert crashed == {b"BUG-and-more", b"S"}


def test_both_ways_find_the_same_crashes_and_corpus_from_one_seed(
    toy: Path, tmp_path: Path
) -> None:
    invs, files = SHAPES["file"]
    results = []
    for fork_server in (True, False):
        with _runner(toy, tmp_path, invs, files, fork_server=fork_server) as run:
            r = fuzz([(0, b"aBU")], run, executions=60, seed=5, tokens=[b"BUG"])
            results.append((r.corpus, [(c.data, c.signature, c.found_at) for c in r.crashes]))
    assert results[0] == results[1]
    assert any("heap-buffer-overflow" in s for _, s, _ in results[0][1]), results[0][1]


def test_a_crash_is_read_from_the_sanitizer_report(toy: Path, tmp_path: Path) -> None:
    invs, files = SHAPES["file"]
    with _runner(toy, tmp_path, invs, files) as run:
        out = run(0, b"BUG-and-more")
        assert out.crash is not None and out.crash.startswith(
            "AddressSanitizer: heap-buffer-overflow @ "
        )
        assert run(0, b"a").crash is None and run.runs == {"fork-server": 2, "exec": 0}


def test_a_script_in_front_of_the_program_runs_by_exec_and_says_why(
    toy: Path, tmp_path: Path
) -> None:
    """The script passes the server's variable and pipes on to the real program, whose argv[0]
    is not the path asked for: it must not serve (it would skip the script)."""
    invs = [Invocation("bin/toy-script", "program", ("-f", "in.txt"))]
    with _runner(toy, tmp_path, invs, {"in.txt": b"a"}) as run:
        assert run(0, b"BUG!").crash is not None
        assert run(0, b"ab").crash is None
        assert run.mode() == "exec"
        assert list(run.fallback) == ["bin/toy-script"]
        assert "no fork server" in run.fallback["bin/toy-script"]


def test_a_server_killed_mid_run_falls_back_to_exec_with_the_same_results(
    toy: Path, tmp_path: Path
) -> None:
    invs, files = SHAPES["file"]
    with (
        _runner(toy, tmp_path, invs, files) as run,
        _runner(toy, tmp_path, invs, files, fork_server=False) as ref,
    ):
        before = run(0, b"ab%")
        (server,) = [s for s in run.servers.values() if s is not None]
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait()
        after = run(0, b"ab%")
        assert before == after == ref(0, b"ab%")
        assert run.mode() == "fork-server+exec"
        assert run.fallback == {"bin/toy": "the fork server stopped answering"}


def test_a_hang_is_killed_and_the_server_serves_on(
    toy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fuzz_runner, "WALL_LIMIT", 0.5)  # 'H' waits in pause(): no CPU used
    invs, files = SHAPES["stdin"]
    with _runner(toy, tmp_path, invs, files) as run:
        assert run(0, b"H").hung
        assert not run(0, b"ab").hung and run.mode() == "fork-server"


def test_a_program_without_the_runtime_never_says_hello(tmp_path: Path) -> None:
    server, why = ForkServer.start(shutil.which("true") or "/bin/true", str(tmp_path), {})
    assert server is None and why and "no fork server" in why


def test_the_pocs_own_execution_runs_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 30: the PoC's seeds give each unit its own value back, so every one of them is the
    PoC's execution: the first runs the invocations, the others are its outcome. An input that
    changes a unit (another unit's value included) runs; the fuzz loop's corpus and crashes are
    what a runner that runs everything finds."""
    log = tmp_path / "runs.log"
    monkeypatch.setenv("RUNS_LOG", str(log))
    (tmp_path / "t" / "bin").mkdir(parents=True)
    tool = tmp_path / "t" / "bin" / "tool"
    tool.write_text('#!/bin/sh\necho "$*" >> "$RUNS_LOG"\n[ "$1" = 13 ] && kill -SEGV $$\nexit 0\n')
    tool.chmod(0o755)
    invs = [Invocation("bin/tool", "program", (a, b)) for a, b in (("1", "2"), ("3", "4"))]
    work = tmp_path / "work"
    work.mkdir()
    with ProgramRunner(str(tmp_path / "t"), invs, {}, units_of(invs, {}), str(work)) as run:
        assert [u.name for u in run.units] == ["arg:0:0", "arg:0:1", "arg:1:0", "arg:1:1"]
        seeds = [(k, u.data) for k, u in enumerate(run.units)]
        outcomes = [run(k, d) for k, d in seeds]
        ran = lambda: [x for x in log.read_text().splitlines() if x]  # noqa: E731 ("": a probe)
        assert ran() == ["1 2", "3 4"] and run.reused == 3
        assert len(set(outcomes)) == 1 and outcomes[0].crash is None
        assert run(1, b"1").crash is None  # unit 0's value in unit 1: not the PoC, it runs
        assert run(2, b"13").crash == "SIGSEGV"
        assert ran() == ["1 2", "3 4", "1 1", "3 4", "1 2", "13 4"]
        assert run.mode() == "exec" and list(run.fallback) == ["bin/tool"]
