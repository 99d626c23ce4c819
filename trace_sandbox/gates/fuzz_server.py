"""The fuzz loop's end of the fork server in trace's coverage runtime (trace_fuzz_rt.c).

One server per instrumented executable: the program is started once with
`TRACE_FUZZ_SERVER=CTL,STATUS,PATH` and two pipes; its last constructor says hello and then,
for each request, forks itself at that point (everything before main done: dynamic loading,
the sanitizer's start-up) and runs main with the request's arguments, directory and standard
streams. A run costs a fork instead of an exec.

Each run is limited by its own CPU time, not the clock (`limit`): RLIMIT_CPU sends SIGXCPU after
`cpu` seconds of the run's CPU time and SIGKILL a second later (a program that catches or blocks
SIGXCPU), so an input that loops is a hang after the same work on an idle and on a loaded
machine. Only a run that blocks without using CPU (sleep, a read on a pipe) is stopped by the
clock: `wall` seconds, a long backstop. The exec way (fuzz_runner.py) sets the same limit and
reads a death by it the same way (`ended`).

A program that is not such an executable (a script, a build without the runtime, a runtime
from before the server) never says hello: `start` returns None with the reason, and the
caller runs that target by exec (`why` is recorded in the fuzz plan). A server that dies
mid-run is reported the same way (`run` returns None), and that run is done again by exec.
"""

from __future__ import annotations

import contextlib
import os
import resource
import select
import signal
import struct
import subprocess

from ._dataclasses import dataclass

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

HELLO = 0x31534654  # "TFS1", little-endian as written by the runtime
START_TIMEOUT = 10.0  # seconds for the hello: a loaded machine starts an ASan binary slowly
# the deaths the limits cause: a hang, never a crash (ASan does not handle SIGXCPU)
LIMIT_SIGNALS = (signal.SIGXCPU, signal.SIGKILL)
_U32 = struct.Struct("=I")
_I32 = struct.Struct("=i")


@dataclass(frozen=True)
class Ran:
    """One program run: its wait status decoded as subprocess does, or a hang."""

    returncode: int
    hung: bool = False


def by_limit(code: int) -> bool:
    """Whether a return code (-signal, as subprocess reports it) is a death by the CPU limit."""
    return code < 0 and -code in LIMIT_SIGNALS


def ended(code: int, stopped: bool = False) -> Ran:
    """A run's outcome from its return code: a hang when the wall backstop stopped it
    (`stopped`) or a limit's signal ended it."""
    return Ran(code, hung=stopped or by_limit(code))


def limit(pid: int, cpu: int) -> None:
    """Limit process `pid` (0: this one, as in a child before its exec) to `cpu` seconds of its
    own CPU time: SIGXCPU then, SIGKILL a second later; no core file (SIGXCPU's default action
    would dump one into the work directory). A process that has ended already needs none."""
    with contextlib.suppress(ProcessLookupError):
        resource.prlimit(pid, resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.prlimit(pid, resource.RLIMIT_CORE, (0, 0))


def run_limited(
    argv: list[str], cpu: int, wall: float, **kwargs: Any
) -> subprocess.CompletedProcess[bytes] | None:
    """`subprocess.run(argv, **kwargs)` of one exec'd run under the limits: `cpu` seconds of its
    CPU time (set before the exec, so a script's children are limited too), `wall` seconds of
    the clock; None when the wall backstop stopped it (a hang). A death by the CPU limit is in
    the return code (`by_limit`)."""
    try:
        return subprocess.run(
            argv, timeout=wall, check=False, preexec_fn=lambda: limit(0, cpu), **kwargs
        )
    except subprocess.TimeoutExpired:
        return None


def _read(fd: int, n: int, timeout: float | None) -> bytes | None:
    """Exactly n bytes, or None at EOF or when `timeout` seconds pass first."""
    out = b""
    while len(out) < n:
        if timeout is not None and not select.select([fd], [], [], timeout)[0]:
            return None
        chunk = os.read(fd, n - len(out))
        if not chunk:
            return None
        out += chunk
    return out


def returncode(status: int) -> int:
    """A wait status as subprocess reports it: -signal, or the exit status."""
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else status


class ForkServer:
    """A started server for one executable (`start`), serving runs until `close`."""

    def __init__(self, proc: subprocess.Popen[bytes], ctl: int, status: int) -> None:
        self.proc, self.ctl, self.status = proc, ctl, status

    @classmethod
    def start(
        cls, path: str, cwd: str, env: dict[str, str]
    ) -> tuple[ForkServer | None, str | None]:
        """(the server, None), or (None, why it could not start)."""
        ctl_r, ctl_w = os.pipe()
        st_r, st_w = os.pipe()
        try:
            proc = subprocess.Popen(
                [path],
                cwd=cwd,
                env=dict(env, TRACE_FUZZ_SERVER=f"{ctl_r},{st_w},{path}"),
                pass_fds=(ctl_r, st_w),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        except OSError as e:
            for fd in (ctl_r, ctl_w, st_r, st_w):
                os.close(fd)
            return None, f"could not start: {e.strerror}"
        os.close(ctl_r)
        os.close(st_w)
        server = cls(proc, ctl_w, st_r)
        hello = _read(st_r, 4, START_TIMEOUT)
        if hello is None or _U32.unpack(hello)[0] != HELLO:
            server.close()
            return None, "no fork server in it (not an executable built with trace's runtime)"
        return server, None

    def run(
        self, argv: list[str], cwd: str, stdin: str, stdout: str, stderr: str, cpu: int, wall: float
    ) -> Ran | None:
        """One run of main, limited to `cpu` seconds of its CPU time and `wall` seconds of the
        clock (see above); None when the server is gone (the caller runs it by exec)."""
        strings = [cwd, stdin, stdout, stderr, *argv]
        payload = b"".join(os.fsencode(s) + b"\0" for s in strings)
        try:
            os.write(self.ctl, _U32.pack(len(payload)) + payload)
        except OSError:
            return None
        pid_raw = _read(self.status, 4, START_TIMEOUT)
        if pid_raw is None or _I32.unpack(pid_raw)[0] <= 0:
            return None
        pid = _I32.unpack(pid_raw)[0]
        limit(pid, cpu)  # the child's CPU time counts from its fork: none is missed
        raw = _read(self.status, 4, wall)
        stopped = raw is None
        if stopped:
            with contextlib.suppress(ProcessLookupError):  # it may have ended just now
                os.kill(pid, signal.SIGKILL)  # not reaped yet: the server waits for it
            raw = _read(self.status, 4, START_TIMEOUT)
        if raw is None:
            return None
        return ended(returncode(_I32.unpack(raw)[0]), stopped)

    def close(self) -> None:
        for fd in (self.ctl, self.status):
            if fd >= 0:
                os.close(fd)
        self.ctl = self.status = -1  # closed once: the numbers may be reused
        if self.proc.poll() is None:  # EOF on its control pipe ends it; a stray one is killed
            try:
                self.proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
