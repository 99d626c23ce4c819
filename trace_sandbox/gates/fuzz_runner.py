"""One execution of the fuzz loop: the PoC's program invocations with one unit replaced.

`ProgramRunner(unit, data)` writes the PoC's data files (one of them, or an invocation's stdin,
or an argument, replaced by `data`), zeroes the coverage map, runs each program invocation in
order and reads the map: a fuzz.Outcome (features, the crash signature, a hang). Each
invocation runs through its executable's fork server (fuzz_server.py: a fork of the program
stopped before main), or by exec when that executable has none (`fallback` says why, per
target). Both ways see the same thing: the same arguments, directory, environment, stdin from
a file, stdout discarded, stderr read for the sanitizer's report, and the same map (the
runtime adds what the constructors counted before the fork), and the same limits: a run past
CPU_LIMIT seconds of its own CPU time, or WALL_LIMIT seconds blocked, is a hang (fuzz_server.py:
`limit`, `ended`), so an exploration's inputs, corpus, crashes and hangs depend neither on the
way nor on how loaded the machine is.

An input that gives a unit its own value back (the PoC's seeds: every unit's original) is the
PoC's own execution: it runs once, and every later such input is its outcome (`reused`), not a
new run (issue 30: a script target with 3 arguments in each of 35 calls paid 105 x 35
interpreter starts for the same execution). It still counts as an execution of the budget.
"""

from __future__ import annotations

import mmap
import os
import re
import shutil
import signal
import subprocess
import tempfile
from types import TracebackType

from .fuzz import MAP_SIZE, Outcome, features
from .fuzz_server import ForkServer, Ran, ended, run_limited
from .scratch import scratch_root
from .variants import Invocation, Unit

# A hang is measured in the run's own CPU time, not the clock (issue 25: a 2 s wall timeout
# made other inputs hangs on a loaded machine, and the fuzz plan differed between builders):
CPU_LIMIT = 2  # seconds of CPU time per invocation (RLIMIT_CPU): longer is a hang, not a crash
WALL_LIMIT = 60.0  # seconds of the clock: the backstop for a run blocked without using CPU
FORK_SERVER = "fork-server"
EXEC = "exec"
_SUMMARY = re.compile(r"SUMMARY: (\w+Sanitizer): (\S+)")
_FRAME0 = re.compile(r"#0 0x[0-9a-f]+\s+(?:in (\S+))?\s*(?:\(([^()\s]+?)(\+0x[0-9a-f]+)\))?")
_FATAL = (signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGILL, signal.SIGFPE)


def crash_of(stderr: str, returncode: int) -> str | None:
    """A crash's signature: `Tool: kind @ innermost frame`, or the fatal signal's name."""
    m = _SUMMARY.search(stderr)
    if m:
        f = _FRAME0.search(stderr)
        where = f"{f.group(1) or os.path.basename(f.group(2))}{f.group(3) or ''}" if f else "?"
        return f"{m.group(1)}: {m.group(2)} @ {where}"
    if returncode < 0 and -returncode in _FATAL:
        return signal.Signals(-returncode).name
    return None


def _same_file(path: str, then: os.stat_result) -> bool:
    try:
        now = os.stat(path)
    except OSError:
        return False
    keys = ("st_ino", "st_size", "st_mtime_ns")
    return all(getattr(now, k) == getattr(then, k) for k in keys)


def write_unless_held(
    written: dict[str, tuple[bytes, os.stat_result]], path: str, content: bytes
) -> None:
    """Write a file unless it holds `content` already: written so by this runner (`written`) and
    not touched since (a run may edit its input; a truncation costs on some disks)."""
    last = written.get(path)
    if last is not None and last[0] == content and _same_file(path, last[1]):
        return
    with open(path, "wb") as fh:
        fh.write(content)
        written[path] = (content, os.fstat(fh.fileno()))


class _ServerGone(Exception):
    """A fork server stopped answering in the middle of an execution."""


class ProgramRunner:
    """fuzz.Runner over the PoC's program invocations in a work directory. `fork_server`
    False runs every invocation by exec (the fallback's way, for comparing). Use it as a
    context manager, or `close` it: the servers are processes."""

    def __init__(
        self,
        target: str,
        invocations: list[Invocation],
        files: dict[str, bytes],
        units: list[Unit],
        work: str,
        *,
        fork_server: bool = True,
    ) -> None:
        self.target, self.invocations, self.files, self.units = target, invocations, files, units
        self.work = work
        self.scratch = tempfile.mkdtemp(prefix="trace-fuzz-", dir=scratch_root())
        self.stdin = os.path.join(self.scratch, "stdin")
        self.stderr = os.path.join(self.scratch, "stderr")
        map_path = os.path.join(self.scratch, "map")
        with open(map_path, "wb") as fh:
            fh.write(bytes(MAP_SIZE))
        with open(map_path, "r+b") as fh:
            self.map = mmap.mmap(fh.fileno(), MAP_SIZE)
        self.env = dict(
            os.environ,
            TRACE_FUZZ_MAP=map_path,
            ASAN_OPTIONS="detect_leaks=0:symbolize=0:abort_on_error=0",
        )
        self.use_servers = fork_server
        self.servers: dict[str, ForkServer | None] = {}
        self.fallback: dict[str, str] = {}  # target (as the PoC names it) -> why by exec
        self.runs = {FORK_SERVER: 0, EXEC: 0}
        self.written: dict[str, tuple[bytes, os.stat_result]] = {}  # what each file holds
        self.poc: Outcome | None = None  # the PoC's own execution's outcome, once run
        self.reused = 0  # inputs answered by it

    def __enter__(self) -> ProgramRunner:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        for server in self.servers.values():
            if server is not None:
                server.close()
        self.servers.clear()
        self.map.close()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def _write(self, path: str, content: bytes) -> None:
        write_unless_held(self.written, path, content)

    def mode(self) -> str:
        """How the executions ran: fork-server, exec, or fork-server+exec."""
        used = [m for m in (FORK_SERVER, EXEC) if self.runs[m]]
        return "+".join(used) or (FORK_SERVER if self.use_servers else EXEC)

    def _argv(self, i: int, inv: Invocation, unit: Unit, data: bytes) -> list[str] | None:
        args = list(inv.args)
        if unit.kind == "arg" and unit.name.startswith(f"arg:{i}:"):
            text = data.decode("utf-8", "surrogateescape")
            if "\0" in text:
                return None
            args[int(unit.name.split(":")[2])] = text
        subst = [a.replace("$TARGET", self.target).replace("<work>", self.work) for a in args]
        return [os.path.join(self.target, inv.target), *subst]

    def __call__(self, index: int, data: bytes) -> Outcome:
        unit = self.units[index]
        own = data == unit.data  # the PoC's own execution (see above)
        if own and self.poc is not None:
            self.reused += 1
            return self.poc
        try:
            outcome = self._execute(unit, data)
        except _ServerGone:  # the whole execution again, that target by exec
            outcome = self._execute(unit, data)
        if own:
            self.poc = outcome
        return outcome

    def _execute(self, unit: Unit, data: bytes) -> Outcome:
        self.map[:] = bytes(MAP_SIZE)
        for name, content in self.files.items():
            mine = unit.kind == "file" and unit.name == name
            self._write(os.path.join(self.work, name), data if mine else content)
        for i, inv in enumerate(self.invocations):
            if inv.kind != "program":
                continue
            argv = self._argv(i, inv, unit, data)
            if argv is None:
                return Outcome(0)
            self._write(self.stdin, data if unit.name == f"stdin:{i}" else inv.stdin or b"")
            ran = self._run(argv)
            if ran.hung:
                return Outcome(self._features(), hung=True)
            with open(self.stderr, "rb") as fh:
                crash = crash_of(fh.read().decode("utf-8", "replace"), ran.returncode)
            if crash is not None:
                return Outcome(self._features(), crash=crash)
        return Outcome(self._features())

    def _server(self, path: str) -> ForkServer | None:
        if not self.use_servers:
            return None
        if path not in self.servers:
            counted = self.map[:]  # this execution's so far (an earlier invocation's)
            self.map[:] = bytes(MAP_SIZE)  # the server keeps what its constructors count
            server, why = ForkServer.start(path, self.work, self.env)
            self.map[:] = counted
            self.servers[path] = server
            if why:
                self.fallback[os.path.relpath(path, self.target)] = why
        return self.servers[path]

    def _run(self, argv: list[str]) -> Ran:
        server = self._server(argv[0])
        if server is not None:
            ran = server.run(argv, self.work, self.stdin, "", self.stderr, CPU_LIMIT, WALL_LIMIT)
            if ran is not None:
                self.runs[FORK_SERVER] += 1
                return ran
            server.close()  # gone mid-run: this target runs by exec from here on
            self.servers[argv[0]] = None
            self.fallback[os.path.relpath(argv[0], self.target)] = (
                "the fork server stopped answering"
            )
            raise _ServerGone
        self.runs[EXEC] += 1
        return self._exec(argv)

    def _exec(self, argv: list[str]) -> Ran:
        with open(self.stdin, "rb") as fin, open(self.stderr, "wb") as ferr:
            p = run_limited(
                argv,
                CPU_LIMIT,
                WALL_LIMIT,
                stdin=fin,
                cwd=self.work,
                env=self.env,
                stdout=subprocess.DEVNULL,
                stderr=ferr,
            )
        return ended(-signal.SIGKILL, stopped=True) if p is None else ended(p.returncode)

    def _features(self) -> int:
        return features(self.map[:])
