"""One Nix realise or build per store among a user's trace processes (engine/storelock.py): a
second acquirer waits while the first holds the lock, says why after NOTICE_AFTER seconds, ends
cleanly on Ctrl-C while waiting, and proceeds once the lock is released; Nix.realise and
Nix.build take it (Nix.build(wait=False) returns at once when it is taken), Nix.instantiate does
not; and two real `trace run`s of graphs sharing derivations, started at once, both finish.
Every wait has a deadline."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine import storelock
from engine.graphtypes import NixConfig
from engine.nix import Nix
from tests.enginekit import make_project

ROOT = Path(__file__).resolve().parent.parent
DEADLINE = 60.0  # seconds: generous for a loaded machine; every wait below is bounded by it

# A process that takes the lock of store "s", prints `held <monotonic time>`, keeps it until its
# stdin closes, then prints `released`. Ctrl-C while it waits: prints `interrupted`, exits 130.
HOLDER = textwrap.dedent(
    """
    import sys, time
    from engine.storelock import store_lock
    try:
        with store_lock("s"):
            print("held", time.monotonic(), flush=True)
            sys.stdin.read()
        print("released", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        sys.exit(130)
    """
)


@pytest.fixture()
def lock_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setenv("TRACE_STORE_LOCK_DIR", str(tmp_path / "locks"))
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def start_holder(env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", HOLDER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )


def read_line(proc: subprocess.Popen[str], timeout: float = DEADLINE) -> str:
    """The next stdout line of `proc`, or fail after `timeout` seconds."""
    assert proc.stdout is not None
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(timeout)
    assert got, f"no line from the process within {timeout} s"
    return got[0]


@pytest.fixture()
def holder(lock_env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    proc = start_holder(lock_env)
    assert read_line(proc).startswith("held")
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait(DEADLINE)


def test_the_second_acquirer_waits_says_why_and_proceeds_after_release(
    holder: subprocess.Popen[str], lock_env: dict[str, str]
) -> None:
    waiter = start_holder(lock_env)
    try:
        # still waiting well past the notice: it must not hold while the first does
        time.sleep(storelock.NOTICE_AFTER + 1.5)
        assert waiter.poll() is None
        assert holder.stdin is not None
        released_at = time.monotonic()
        holder.stdin.close()
        assert read_line(holder) == "released\n"
        line = read_line(waiter)
        assert line.startswith("held") and float(line.split()[1]) >= released_at
        assert waiter.stdin is not None
        waiter.stdin.close()
        assert read_line(waiter) == "released\n"
        assert waiter.wait(DEADLINE) == 0
        assert waiter.stderr is not None
        err = waiter.stderr.read()
        assert "waiting for another trace process's Nix build on this store" in err
        assert str(storelock.lock_path("s")) in err
    finally:
        if waiter.poll() is None:
            waiter.kill()


def test_a_free_lock_is_taken_at_once_and_silently(lock_env: dict[str, str]) -> None:
    said: list[str] = []
    started = time.monotonic()
    with storelock.store_lock("s", notify=said.append):
        pass
    with storelock.store_lock("s", notify=said.append):  # released on leaving: again at once
        pass
    assert said == [] and time.monotonic() - started < storelock.NOTICE_AFTER


def test_a_short_wait_says_nothing(lock_env: dict[str, str]) -> None:
    """Released before NOTICE_AFTER: taken without a message (the notice is for real waits)."""
    fd = hold_elsewhere("s")
    threading.Timer(0.3, os.close, (fd,)).start()
    said: list[str] = []
    with storelock.store_lock("s", notify=said.append):
        pass
    assert said == []


def hold_elsewhere(store: str) -> int:
    """Lock `store` on another open file (flock conflicts between open files as between
    processes); the caller closes the returned fd to release it."""
    storelock.lock_dir().mkdir(parents=True, exist_ok=True)
    fd = os.open(storelock.lock_path(store), os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def test_ctrl_c_while_waiting_ends_cleanly(
    holder: subprocess.Popen[str], lock_env: dict[str, str]
) -> None:
    waiter = start_holder(lock_env)
    try:
        time.sleep(storelock.NOTICE_AFTER + 1.0)  # in the blocking flock by now
        assert waiter.poll() is None
        waiter.send_signal(signal.SIGINT)
        assert read_line(waiter) == "interrupted\n"
        assert waiter.wait(DEADLINE) == 130
        assert holder.poll() is None  # the holder keeps its lock
    finally:
        if waiter.poll() is None:
            waiter.kill()


def test_stores_are_told_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NIX_REMOTE", raising=False)
    monkeypatch.delenv("NIX_STORE_DIR", raising=False)
    local = storelock.store_of(["--realise", "/nix/store/x.drv"])
    assert local == "default:/nix/store"
    monkeypatch.setenv("NIX_REMOTE", "daemon")  # the same store through its daemon
    assert storelock.store_of(["--realise"]) == local
    assert storelock.store_of(["--store", "ssh://b", "--realise"]) == "ssh://b"
    assert storelock.store_of(["--option", "store", "local?root=/r"]) == "local?root=/r"
    monkeypatch.setenv("NIX_STORE_DIR", "/other/store")
    assert storelock.store_of([]) != local
    assert storelock.lock_path("ssh://b") != storelock.lock_path(local)


def test_the_lock_file_is_the_account_s_whatever_its_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A process of the same user started with another HOME or XDG_CACHE_HOME (tests/test_demo.py
    runs scripts/demo with HOME in a temp dir) takes the same lock: with a lock of its own, its
    Nix calls ran beside another test worker's, and a `--check` of a derivation both used
    read "nondeterministic" in a two-worker run of the suite."""
    import pwd

    monkeypatch.delenv("TRACE_STORE_LOCK_DIR", raising=False)
    account = Path(pwd.getpwuid(os.getuid()).pw_dir) / ".cache" / "trace"
    assert storelock.lock_path("x").parent == account
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert storelock.lock_path("x").parent == account
    monkeypatch.setenv("TRACE_STORE_LOCK_DIR", str(tmp_path / "own"))
    assert storelock.lock_path("x").parent == tmp_path / "own"


def test_the_lock_is_shared_with_a_process_started_with_another_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Held here, a child process with HOME and XDG_CACHE_HOME in a temp dir cannot take it."""
    monkeypatch.delenv("TRACE_STORE_LOCK_DIR", raising=False)
    store = f"test-{os.getpid()}-{time.monotonic_ns()}"
    fd = hold_elsewhere(store)
    try:
        code = (
            "import fcntl, os\nfrom engine import storelock\n"
            f"fd = os.open(storelock.lock_path({store!r}), os.O_RDWR)\n"
            "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept BlockingIOError:\n"
            "    print('held')\nelse:\n    print('free')\n"
        )
        env = {**os.environ, "HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "c")}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=DEADLINE
        )
        assert out.stdout == "held\n", out.stdout + out.stderr
    finally:
        os.close(fd)
        storelock.lock_path(store).unlink(missing_ok=True)


def fake_nix(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """nix-store, nix-build and nix-instantiate that log their start time and succeed."""
    folder.mkdir()
    log = folder / "started"
    for name in ("nix-store", "nix-build", "nix-instantiate"):
        (folder / name).write_text(f'#!/bin/sh\necho "{name}" >> {log}\n')
        (folder / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    monkeypatch.delenv("NIX_REMOTE", raising=False)
    return log


def fake_nix_and_expression(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, Nix, Path]:
    """`fake_nix`'s log, a Nix of the default settings, and an expression file to build."""
    log = fake_nix(tmp_path / "bin", monkeypatch)
    expr = tmp_path / "e.nix"
    expr.write_text("[]")
    return log, Nix(NixConfig()), expr


def test_nix_realise_and_build_wait_for_the_lock_instantiate_does_not(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    lock_env: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    log, nix, expr = fake_nix_and_expression(tmp_path, monkeypatch)
    fd = hold_elsewhere(storelock.store_of([]))
    try:
        assert nix.instantiate(expr)[0] == 0  # evaluation: not serialised
        calls = [lambda: nix.realise(["/nix/store/a.drv"]), lambda: nix.build(expr)]
        workers = [threading.Thread(target=c, daemon=True) for c in calls]
        for w in workers:
            w.start()
        time.sleep(storelock.NOTICE_AFTER + 1.0)
        assert log.read_text() == "nix-instantiate\n"  # neither Nix build started
        waiting = "waiting for another trace process's Nix build on this store"
        assert capsys.readouterr().err.count(waiting) == 2
    finally:
        os.close(fd)
    for w in workers:
        w.join(DEADLINE)
        assert not w.is_alive()
    assert sorted(log.read_text().split()) == ["nix-build", "nix-instantiate", "nix-store"]


def test_a_build_that_need_not_wait_starts_nothing_while_the_lock_is_held(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    lock_env: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`Nix.build(wait=False)` (engine/run.py `_build`): with the lock taken, None at once and no
    Nix started, so the run evaluates first (unlocked) and finds bad input without waiting; with
    the lock free, nix-build runs as with `wait=True`."""
    log, nix, expr = fake_nix_and_expression(tmp_path, monkeypatch)
    fd = hold_elsewhere(storelock.store_of([]))
    try:
        started = time.monotonic()
        assert nix.build(expr, wait=False) is None
        assert time.monotonic() - started < storelock.NOTICE_AFTER
        assert not log.exists() and capsys.readouterr().err == ""
        with storelock.store_lock("s", wait=False) as held:
            assert held  # another store's lock is free
    finally:
        os.close(fd)
    report = nix.build(expr, wait=False)
    assert report is not None and report.returncode == 0
    assert log.read_text() == "nix-build\n"


def test_fetching_claims_waits_for_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lock_env: dict[str, str]
) -> None:
    """The determinism claims' download-only realise (engine/remote/attest.py) takes Nix's
    output locks as a build does: it waits for the store's lock like Nix.realise."""
    from engine.remote import attest

    log = fake_nix(tmp_path / "bin", monkeypatch)
    fd = hold_elsewhere(storelock.store_of([]))
    try:
        fetch = threading.Thread(
            target=attest.fetch_missing, args=(["/nix/store/x-trace-check-a"], []), daemon=True
        )
        fetch.start()
        time.sleep(storelock.NOTICE_AFTER + 1.0)
        assert not log.exists()  # nix-store has not started
    finally:
        os.close(fd)
    fetch.join(DEADLINE)
    assert not fetch.is_alive()
    assert log.read_text() == "nix-store\n"


@pytest.mark.nix
def test_two_trace_runs_of_shared_derivations_both_finish(tmp_path: Path) -> None:
    """Two real `trace run`s started at once on two projects whose graphs render the same new
    derivations (a layered graph: shared upstream steps) both finish, with the same outputs."""
    salt = uuid.uuid4().hex
    steps = "\n".join(
        f'[steps.s{i}]\nkind = "text"\nparams = {{ message = "{salt} {i}" }}\n'
        + (f'needs = ["s{i - 1}", "s{i - 2}"]\n' if i >= 2 else "")
        for i in range(12)
    )
    graphs = [make_project(tmp_path / f"p{k}", steps) for k in (1, 2)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "engine.cli",
                "run",
                str(g),
                "--root",
                str(g.parent),
                "-q",
                "--json",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        for g in graphs
    ]
    try:
        outs = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [0, 0], outs
    drvs = [{k: v["drv"] for k, v in json.loads(out)["steps"].items()} for out, _ in outs]
    assert drvs[0] == drvs[1] and len(drvs[0]) == 12  # the same derivations, both runs


@pytest.mark.nix
def test_trace_run_waiting_for_the_lock_says_why_and_ends_cleanly_on_sigterm(
    lock_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real `trace run` whose build finds the store's lock held prints the waiting line and,
    terminated while it waits, exits 143 through the engine's own handling (engine/cli).
    SIGTERM, not SIGINT: a shell that starts the suite in the background makes its children
    ignore SIGINT; the waiting flock is interrupted the same way by both."""
    graph = make_project(
        tmp_path / "p", f'[steps.a]\nkind = "text"\nparams = {{ message = "{uuid.uuid4()}" }}\n'
    )
    monkeypatch.delenv("NIX_REMOTE", raising=False)
    held = hold_elsewhere(storelock.store_of([]))
    run = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "run", str(graph), "--root", str(graph.parent), "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**lock_env, "NIX_REMOTE": ""},
        cwd=ROOT,
    )
    try:
        assert run.stderr is not None
        got: list[str] = []

        def follow() -> None:
            for line in run.stderr:  # type: ignore[union-attr]
                got.append(line)
                if "waiting for another trace process" in line:
                    return

        reader = threading.Thread(target=follow, daemon=True)
        reader.start()
        reader.join(DEADLINE)
        assert got and "waiting for another trace process's Nix build" in got[-1], got
        run.send_signal(signal.SIGTERM)
        assert run.wait(DEADLINE) == 143
        assert "trace: terminated" in run.stderr.read()
    finally:
        os.close(held)
        if run.poll() is None:
            run.kill()
