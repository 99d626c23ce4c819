"""Every way a command ends is an exit code of its own, in a real `trace` process: an unexpected
exception is an internal error (70, never 1, which says a claim did not hold), SIGINT is 130 and
SIGTERM 143, each with one line on stderr and no traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.interrupt import sigint_default

ROOT = Path(__file__).resolve().parent.parent

# a child `trace schema` whose handler is replaced before the parser binds it
CHILD = """
import sys, time
import engine.cli.schema as command

def handler(args):
{body}

command.cmd_schema = handler
from engine.cli import main
sys.exit(main(["schema"]))
"""


def _child(body: str, **env: str) -> subprocess.Popen[str]:
    code = CHILD.format(body="\n".join("    " + line for line in body.splitlines()))
    return subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_default,  # a Ctrl-C reaches it however pytest was started
        env={**os.environ, **env},
    )


def _run(body: str, **env: str) -> tuple[int, str, str]:
    proc = _child(body, **env)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err


def test_an_unexpected_exception_is_an_internal_error_not_a_failed_claim() -> None:
    rc, out, err = _run("print('partial', end='')\nraise StopIteration('no package set')")
    assert rc == 70
    assert err.splitlines()[0] == "trace: internal error: StopIteration: no package set"
    assert "bug in trace" in err and "report it" in err
    assert "Traceback" not in err
    assert out == "partial"  # what the command printed before; trace adds nothing to stdout


@pytest.mark.parametrize("exc", ["UnicodeDecodeError('utf-8', b'\\xff', 0, 1, 'bad')",
                                 "IsADirectoryError(21, 'Is a directory')",
                                 "RecursionError('deep')"])  # fmt: skip
def test_every_kind_of_crash_exits_70(exc: str) -> None:
    rc, _, err = _run(f"raise {exc}")
    assert (rc, err.count("\n")) == (70, 2), err
    assert err.startswith(f"trace: internal error: {exc.split('(')[0]}: ")


def test_a_real_crash_is_no_traceback_and_writes_nothing(tmp_path: Path) -> None:
    """`package_set = ""` crashed graph loading with StopIteration (exit 1, a traceback): now an
    internal error (70), or, once the loader refuses it, bad input (2); never 1, no traceback,
    no state directory."""
    (tmp_path / "t.nix.j2").write_text('derivation {{ name = "t"; builder = "/bin/sh"; }}\n')
    (tmp_path / "p.toml").write_text(
        'version = 1\n[nix]\npackage_set = ""\n[kinds.k]\ntemplate = "t.nix.j2"\n'
        '[steps.s]\nkind = "k"\n'
    )
    proc = subprocess.run(
        [sys.executable, "-m", "engine.cli", "plan", "--no-eval", str(tmp_path / "p.toml")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode in (2, 70), proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.toml", "t.nix.j2"]


def test_trace_debug_adds_the_traceback() -> None:
    rc, _, err = _run("raise ValueError('boom')", TRACE_DEBUG="1")
    assert rc == 70
    assert "Traceback (most recent call last)" in err and "in handler" in err
    assert "trace: internal error: ValueError: boom" in err


def test_a_trace_error_keeps_its_own_code() -> None:
    rc, _, err = _run(
        "from engine.errors import InputError\nraise InputError('bad', file='x.toml')"
    )
    assert (rc, err) == (2, "trace: error: x.toml: bad\n")


def _signalled(sig: int) -> tuple[int, str]:
    proc = _child("print('ready', flush=True)\ntime.sleep(60)\nreturn 0")
    assert proc.stdout is not None
    assert proc.stdout.readline() == "ready\n"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    return proc.returncode, err


def test_sigterm_exits_143_cleanly() -> None:
    rc, err = _signalled(signal.SIGTERM)
    assert (rc, err) == (143, "trace: terminated\n")


def test_sigint_exits_130_cleanly() -> None:
    rc, err = _signalled(signal.SIGINT)
    assert (rc, err) == (130, "trace: interrupted\n")


def test_sigint_exits_130_when_pytest_itself_ignores_sigint() -> None:
    """As when pytest runs as a background job of a shell without job control (SIGINT ignored,
    and inherited so by every child): the test's child still takes its Ctrl-C (tests/interrupt.py).
    """
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        rc, err = _signalled(signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, before)
    assert (rc, err) == (130, "trace: interrupted\n")


def test_sigterm_runs_the_clean_ups_a_ctrl_c_runs(tmp_path: Path) -> None:
    """Terminated is a KeyboardInterrupt: `except KeyboardInterrupt` clean-ups run on SIGTERM."""
    mark = tmp_path / "cleaned"
    body = (
        "try:\n"
        "    print('ready', flush=True)\n"
        "    time.sleep(60)\n"
        "except KeyboardInterrupt:\n"
        f"    open({str(mark)!r}, 'w').close()\n"
        "    raise\n"
        "return 0"
    )
    proc = _child(body)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode == 143
    assert mark.is_file()


def test_main_puts_the_sigterm_handler_back() -> None:
    from engine.cli import main

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit):
        main(["--version"])
    assert main(["schema", "candidate"]) == 0
    assert signal.getsignal(signal.SIGTERM) is before


def _descendants(pid: int) -> set[int]:
    """Every live process below `pid` (read from /proc, no process names involved)."""
    out: set[int] = set()
    todo = [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                kids = {int(k) for k in task.read_text().split()}
            except OSError:
                continue
            todo.extend(kids - out)
            out |= kids
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.mark.nix
def test_sigterm_mid_build_ends_trace_and_its_nix_children(tmp_path: Path) -> None:
    """A real build sleeping in the sandbox: SIGTERM to trace alone (not its process group) ends
    nix-build and the builder too, trace exits 143, and the state directory is free again."""
    from tests.enginekit import make_project

    graph = make_project(
        tmp_path,
        f'[steps.slow]\nkind = "text"\nparams = {{ message = "{uuid.uuid4()}", sleep = 60 }}\n',
    )
    argv = [sys.executable, "-m", "engine.cli", "run", str(graph), "--root", str(tmp_path)]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)  # fmt: skip
    assert proc.stderr is not None
    for line in proc.stderr:  # wait until nix-build is building
        if "building" in line:
            break
    time.sleep(1)
    below = _descendants(proc.pid)
    assert below, "nix-build runs below trace"
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    rest = proc.stderr.read()
    assert proc.wait(timeout=60) == 143
    assert rest.endswith("trace: terminated\n"), rest
    assert time.monotonic() - started < 30  # not the builder's 60 s
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in below) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in below if _alive(p)]
    plan = [sys.executable, "-m", "engine.cli", "plan", "--no-eval", str(graph), "--root",
            str(tmp_path), "--wait", "0"]  # fmt: skip
    again = subprocess.run(plan, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert again.returncode == 0, again.stderr  # the state directory's lock was released
    assert "slow" in again.stdout and "dirty" in again.stdout


def test_main_runs_in_a_worker_thread_too(capsys: pytest.CaptureFixture[str]) -> None:
    """Only the main thread may set a signal handler: elsewhere main() runs without one."""
    import threading

    from engine.cli import main

    got: list[int] = []
    worker = threading.Thread(target=lambda: got.append(main(["schema", "machine"])))
    worker.start()
    worker.join(timeout=60)
    assert got == [0]
    assert '"title": "MachineConfig"' in capsys.readouterr().out
