"""One execution of the fuzz loop for a Python target: the PoC's invocations, in this interpreter.

The C path (fuzz_runner.py) reads an edge map a coverage runtime fills. A Python target needs no
build of its own: `PythonRunner(unit, data)` runs each of the PoC's Python invocations (a
`python3 script.py ARGS`, `python3 -m module`, `python3 -c CODE` the harness recorded as
`kind: python`, or an executable of the package that is a Python script, `#!…python…`) with one
unit (a data file, a stdin, an argument) replaced by `data`, and reads its coverage from
`sys.settrace` (fuzz_python_arcs.py): every *arc* (the line before, the line now) run in the
package's own files, counted, the counts bucketed as the C map's are (fuzz.BUCKETS), one 8-bit
slot per arc. So the loop (fuzz.py) and its mutators are the C path's, unchanged.

By default every execution runs in this interpreter (`in-process`): a fresh `runpy` of the entry
script or module with its own argv, working directory, stdin (the unit's bytes or the recorded
stdin) and captured stdout and stderr; the modules the run imported from the package or the work
directory are dropped afterwards (the next run imports them afresh: module-level state does not
leak between inputs; what a run changes elsewhere, it keeps, but the recursion limit and the
interpreter's streams are put back), and a run is a *hang* when it goes past STEPS traced events
(a line run in the package's files, a function called anywhere): a count, not a time, so the
same input is a hang on every machine and the exploration (its corpus, its crashes) is the same
on a fast and a slow builder. WALL_LIMIT seconds (SIGALRM) stop a run stuck where no event
comes (a blocking call, C code): the only hang measured by the clock. An invocation the runner
cannot run so (python options it does not know, such as `-X` or `-O`), or a runner made with
`in_process=False`, runs each execution in a fresh `python3` of its own (`per-process`: the same
code in the child, its outcome sent back as JSON), at an interpreter start per invocation.

A *crash* is what a Python target does where a C one dies of a signal: an exception escapes
the entry script (a traceback, exit 1), other than SystemExit (a clean exit, whatever its
code, is a rejection, never a crash) and KeyboardInterrupt. Its signature is
`Python: <exception type> @ <innermost frame in the package>`. A finding is judged later, as
the C path's are, by running it under the verify harness against both builds (fuzz_gate.py).
"""

from __future__ import annotations

import base64
import io
import json
import os
import runpy
import signal
import subprocess
import sys
import traceback
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

from . import fuzz_runner
from ._dataclasses import dataclass, field
from .fuzz import Outcome
from .fuzz_python_arcs import Arc, ArcMap, ArcTracer, _Hang
from .fuzz_runner import write_unless_held
from .fuzz_server import by_limit, run_limited
from .variants import Invocation, Unit

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# traced events past which a run is a hang: ~12x the sqlparse PoC nested to its recursion limit
# (80,000 events; a million take ~1.3 s traced on an idle machine of ours)
STEPS = 1_000_000
WALL_LIMIT = 60.0  # seconds: a run that stops producing events (blocked, in C code) is stopped
IN_PROCESS = "in-process"
PER_PROCESS = "per-process"
CRASH_PREFIX = "Python: "


@dataclass(frozen=True)
class Entry:
    """How one invocation starts: a script (path), a module (name) or code, and its argv."""

    how: str  # script | module | code
    what: str
    argv: tuple[str, ...]


@dataclass
class Ran:
    """One invocation's end: exit code, the crash signature, hung, what it printed."""

    exit_code: int = 0
    crash: str | None = None
    hung: bool = False
    stdout: bytes = b""
    stderr: bytes = b""
    arcs: dict[Arc, int] = field(default_factory=dict)


def python_script(path: str) -> bool:
    """A file whose first line is a `#!` naming python (an installed Python script)."""
    try:
        with open(path, "rb") as fh:
            first = fh.readline(256)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


def entry_of(inv: Invocation, target: str, work: str) -> Entry | None:
    """The invocation's entry point, its `$TARGET` and `<work>` placeholders resolved; None
    when it is no Python invocation this runner can start in-process (an unknown option)."""
    args = [a.replace("$TARGET", target).replace("<work>", work) for a in inv.args]
    if inv.kind != "python":
        path = os.path.join(target, inv.target)
        return Entry("script", path, (path, *args)) if python_script(path) else None
    if len(args) >= 2 and args[0] in ("-m", "-c"):
        how = "module" if args[0] == "-m" else "code"
        return Entry(how, args[1], (args[1] if how == "module" else "-c", *args[2:]))
    if args and not args[0].startswith("-"):
        return Entry("script", os.path.join(work, args[0]), tuple(args))
    return None


def is_python_target(inv: Invocation, target: str) -> bool:
    """A Python invocation, or a program of the package that is a Python script."""
    return inv.kind == "python" or python_script(os.path.join(target, inv.target))


def script_names(invocations: list[Invocation]) -> set[str]:
    """The data files a Python invocation runs as its script: code, not an input to vary."""
    out = set()
    for inv in invocations:
        if inv.kind == "python" and inv.args and not inv.args[0].startswith("-"):
            out.add(inv.args[0].removeprefix("./").removeprefix("<work>/"))
    return out


# --- one invocation, in this interpreter -----------------------------------------------------


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    raise _Hang


def crash_signature(exc: BaseException, roots: tuple[str, ...]) -> str:
    """`Python: <type> @ <function> (<file>)`: the innermost frame in the package's files or
    the entry script (any frame when none is)."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if os.path.realpath(f.filename).startswith(roots)] or frames
    where = f"{ours[-1].name} ({os.path.basename(ours[-1].filename)})" if ours else "?"
    return f"{CRASH_PREFIX}{type(exc).__name__} @ {where}"


def _exit_code(exc: SystemExit, err: Any) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=err)  # as the interpreter does: the message, exit 1
    return 1


def _dirs(paths: list[str]) -> tuple[str, ...]:
    """Directory prefixes (real paths, a trailing separator) to test a file's real path by."""
    return tuple(os.path.join(os.path.realpath(p), "") for p in paths)


class Place:
    """Where a target runs in-process, worked out once per runner: its work directory, its
    module directories, the traced roots (the package), a cache of compiled entry scripts and
    the pycache directory its modules' bytecode goes to (a store path is read-only)."""

    def __init__(self, work: str, paths: list[str], roots: list[str], pycache: str) -> None:
        self.work, self.paths, self.pycache = work, paths, pycache
        self.roots = _dirs(roots)
        self.dropped = _dirs([work, *paths])  # whose modules a run's end forgets
        self.mine: dict[str, bool] = {}
        self.codes: dict[str, Any] = {}

    def code(self, path: str) -> Any:
        if path not in self.codes:
            with open(path, "rb") as fh:
                self.codes[path] = compile(fh.read(), path, "exec")
        return self.codes[path]


@contextmanager
def _process_state(entry: Entry, place: Place, stdin: bytes) -> Iterator[Ran]:
    """The interpreter as the invocation would see it (argv, cwd, streams, sys.path), and
    everything put back afterwards, the modules the run imported from the work directory or
    the package dropped (the next run imports them afresh: no module state leaks)."""
    saved = (sys.argv, sys.stdin, sys.stdout, sys.stderr, list(sys.path), os.getcwd())
    flags = (sys.dont_write_bytecode, sys.pycache_prefix, sys.getrecursionlimit())
    before = set(sys.modules)
    out, err = io.BytesIO(), io.BytesIO()
    ran = Ran()
    head = os.path.dirname(entry.what) if entry.how == "script" else place.work
    sys.argv = list(entry.argv)
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(out, encoding="utf-8", errors="surrogateescape")
    sys.stderr = io.TextIOWrapper(err, encoding="utf-8", errors="backslashreplace")
    sys.path[:0] = [head, *place.paths]
    sys.dont_write_bytecode, sys.pycache_prefix = False, place.pycache
    os.chdir(place.work)
    try:
        yield ran
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        ran.stdout, ran.stderr = out.getvalue(), err.getvalue()
        sys.argv, sys.stdin, sys.stdout, sys.stderr, sys.path[:], cwd = saved
        sys.dont_write_bytecode, sys.pycache_prefix, limit = flags
        sys.setrecursionlimit(limit)  # a target may lower it (sqlparse's PoC application does)
        os.chdir(cwd)
        _drop_modules(before, place.dropped)


def _drop_modules(before: set[str], prefixes: tuple[str, ...]) -> None:
    for name in set(sys.modules) - before:
        path = getattr(sys.modules[name], "__file__", None) or ""
        if not path or os.path.realpath(path).startswith(prefixes):
            del sys.modules[name]


def _start(entry: Entry, place: Place) -> None:
    """Run the entry as `__main__` (a script as runpy.run_path would, its code compiled once)."""
    if entry.how == "module":
        runpy.run_module(entry.what, run_name="__main__", alter_sys=True)
        return
    main = types.ModuleType("__main__")
    if entry.how == "script":
        main.__file__ = entry.what
        code = place.code(entry.what)
    else:
        code = compile(entry.what, "<string>", "exec")
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    try:
        exec(code, main.__dict__)
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved


def run_in_process(entry: Entry, place: Place, stdin: bytes) -> Ran:
    """Run one invocation here, traced over the package: how it ended and the arcs it ran."""
    tracer = ArcTracer(place.roots, place.mine, steps=STEPS)
    old = signal.signal(signal.SIGALRM, _on_alarm)
    with _process_state(entry, place, stdin) as ran:
        ended = _traced(entry, place, tracer)
        signal.signal(signal.SIGALRM, old)
        if isinstance(ended, SystemExit):
            ran.exit_code = _exit_code(ended, sys.stderr)
        elif isinstance(ended, _Hang):
            ran.hung = True
        elif isinstance(ended, KeyboardInterrupt):
            ran.exit_code = 130
        elif ended is not None:  # any other escaping exception is the crash
            ran.exit_code = 1
            ran.crash = crash_signature(ended, place.roots)
            traceback.print_exception(ended, file=sys.stderr)
        ran.arcs = tracer.counts
    return ran


def _traced(entry: Entry, place: Place, tracer: ArcTracer) -> BaseException | None:
    """The entry run under the tracer and the alarm, both off again before anything else runs:
    how it ended is judged afterwards (printing a deep traceback is no part of the run, and an
    alarm that fires while the tracer and timer are being turned off is still the run's hang)."""
    ended: BaseException | None = None
    try:
        try:
            sys.settrace(tracer)
            signal.setitimer(signal.ITIMER_REAL, WALL_LIMIT)
            _start(entry, place)
        except BaseException as exc:
            ended = exc
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            sys.settrace(None)
    except _Hang as exc:
        ended = exc
    return ended


# --- one invocation, in a python3 of its own -------------------------------------------------


def _child_main(spec_path: str) -> None:
    """`python3 fuzz_python.py SPEC`: run_in_process as the spec says, the outcome to stdout."""
    with open(spec_path, encoding="utf-8") as fh:
        spec = json.load(fh)
    with open(spec["stdin"], "rb") as fh:
        stdin = fh.read()
    entry = Entry(spec["how"], spec["what"], tuple(spec["argv"]))
    place = Place(spec["work"], spec["paths"], spec["roots"], spec["pycache"])
    ran = run_in_process(entry, place, stdin)
    doc = {
        "exit_code": ran.exit_code,
        "crash": ran.crash,
        "hung": ran.hung,
        "arcs": [[f, a, b, n] for (f, a, b), n in sorted(ran.arcs.items())],
        "stdout": base64.b64encode(ran.stdout).decode(),
        "stderr": base64.b64encode(ran.stderr).decode(),
    }
    print(json.dumps(doc), file=sys.__stdout__)


def run_per_process(
    entry: Entry, work: str, paths: list[str], roots: list[str], stdin: bytes, scratch: str
) -> Ran:
    """The same run in a fresh interpreter (PYTHONHASHSEED 0: the same on every run)."""
    stdin_path = os.path.join(scratch, "stdin")
    spec = {"how": entry.how, "what": entry.what, "argv": list(entry.argv), "work": work}
    spec |= {"paths": paths, "roots": roots, "stdin": stdin_path}
    spec["pycache"] = os.path.join(scratch, "pycache")
    with open(stdin_path, "wb") as fh:
        fh.write(stdin)
    spec_path = os.path.join(scratch, "spec.json")
    with open(spec_path, "w", encoding="utf-8") as fh:
        json.dump(spec, fh)
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=here, PYTHONDONTWRITEBYTECODE="1")
    cmd = [sys.executable, "-m", "trace_sandbox.gates.fuzz_python", spec_path]
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, timeout=WALL_LIMIT * 2, check=False)
    except subprocess.TimeoutExpired:
        return Ran(hung=True)
    try:
        doc = json.loads(p.stdout)
    except ValueError:  # it died before it could say (os._exit, a signal)
        return Ran(exit_code=p.returncode, crash=_signal_crash(p.returncode))
    arcs = {(str(f), int(a), int(b)): int(n) for f, a, b, n in doc["arcs"]}
    ran = Ran(int(doc["exit_code"]), doc["crash"], bool(doc["hung"]), arcs=arcs)
    ran.stdout, ran.stderr = (base64.b64decode(doc[k]) for k in ("stdout", "stderr"))
    return ran


def run_plain(inv: Invocation, work: str, paths: list[str], stdin: bytes, scratch: str) -> Ran:
    """`python3 ARGS` as recorded (no tracer: no coverage); a traceback on its stderr is the
    crash (its last line's exception type). No events counted: a hang is its CPU time (issue 25:
    RLIMIT_CPU, the C loop's fuzz_runner.CPU_LIMIT), the clock only for a run blocked."""
    args = [a.replace("<work>", work) for a in inv.args]
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=os.pathsep.join(paths))
    p = run_limited(
        [sys.executable, *args],
        fuzz_runner.CPU_LIMIT,
        WALL_LIMIT,
        input=stdin,
        cwd=work,
        env=env,
        capture_output=True,
    )
    if p is None:
        return Ran(hung=True)
    if by_limit(p.returncode):  # SIGXCPU, or SIGKILL at the hard limit
        return Ran(p.returncode, hung=True)
    crash = traceback_crash(p.stderr.decode("utf-8", "replace")) or _signal_crash(p.returncode)
    return Ran(p.returncode, crash, stdout=p.stdout, stderr=p.stderr)


def traceback_crash(stderr: str) -> str | None:
    """`Python: <type>` of the last traceback a Python program printed (None: none)."""
    head = stderr.rfind("Traceback (most recent call last):")
    if head < 0:
        return None
    for line in reversed(stderr[head:].splitlines()):
        name = line.split(":", 1)[0].strip()
        if line[:1].strip() and name.replace(".", "").replace("_", "").isalnum():
            return f"{CRASH_PREFIX}{name.rsplit('.', 1)[-1]}"
    return None


def _signal_crash(returncode: int) -> str | None:
    if returncode < 0:
        return signal.Signals(-returncode).name
    return None


# --- the runner ------------------------------------------------------------------------------


class PythonRunner:
    """fuzz.Runner over the PoC's Python invocations in a work directory (see the module's
    docstring). `paths`: the package's module directories (harness targetview.python_paths)."""

    # every input runs in this process (cheap): the PoC's own execution is not singled out and
    # reused as fuzz_runner.ProgramRunner does, so the gate record's poc_reused is 0
    reused = 0

    def __init__(
        self,
        target: str,
        invocations: list[Invocation],
        files: dict[str, bytes],
        units: list[Unit],
        work: str,
        paths: list[str],
        *,
        in_process: bool = True,
        refused: Callable[[Ran], bool] | None = None,
    ) -> None:
        self.target, self.files, self.units, self.work = target, files, units, work
        self.paths = paths
        self.roots = [target, *paths]
        self.arcmap = ArcMap()
        self.scratch = os.path.join(work, ".trace-fuzz")
        os.makedirs(self.scratch, exist_ok=True)
        self.calls: list[tuple[int, Invocation, Entry | None]] = [
            (i, inv, entry_of(inv, target, work))
            for i, inv in enumerate(invocations)
            if is_python_target(inv, target)
        ]
        self.fallback: dict[str, str] = {}
        for _, inv, entry in self.calls:
            if entry is None:
                self.fallback[inv.target] = "python options the in-process runner does not know"
            elif not in_process:
                self.fallback[inv.target] = "in-process runs turned off"
        self.runs = {IN_PROCESS: 0, PER_PROCESS: 0}
        # an exception that is the fix refusing the input as [accept] declares: no crash
        self.refused = refused or (lambda ran: False)
        self.written: dict[str, tuple[bytes, os.stat_result]] = {}
        self.place = Place(work, paths, self.roots, os.path.join(self.scratch, "pycache"))

    def _write(self, path: str, content: bytes) -> None:
        write_unless_held(self.written, path, content)

    def mode(self) -> str:
        used = [m for m in (IN_PROCESS, PER_PROCESS) if self.runs[m]]
        return "+".join(used) or (PER_PROCESS if self.fallback else IN_PROCESS)

    def __call__(self, index: int, data: bytes) -> Outcome:
        unit = self.units[index]
        for name, content in self.files.items():
            mine = unit.kind == "file" and unit.name == name
            self._write(os.path.join(self.work, name), data if mine else content)
        counts: dict[Arc, int] = {}
        for i, inv, entry in self.calls:
            ran = self._one(i, inv, entry, unit, data)
            if ran.crash is not None and self.refused(ran):
                ran.crash = None
            for arc, n in ran.arcs.items():
                counts[arc] = counts.get(arc, 0) + n
            if ran.hung or ran.crash is not None:
                return Outcome(self.arcmap.features(counts), crash=ran.crash, hung=ran.hung)
        return Outcome(self.arcmap.features(counts))

    def _one(self, i: int, inv: Invocation, entry: Entry | None, unit: Unit, data: bytes) -> Ran:
        stdin = data if unit.name == f"stdin:{i}" else inv.stdin or b""
        if entry is not None and unit.kind == "arg" and unit.name.startswith(f"arg:{i}:"):
            k = int(unit.name.split(":")[2])
            argv = list(entry.argv)
            argv[len(argv) - len(inv.args) + k] = data.decode("utf-8", "surrogateescape")
            entry = Entry(entry.how, entry.what, tuple(argv))
        if entry is None or inv.target in self.fallback:
            self.runs[PER_PROCESS] += 1
            return self._per_process(inv, entry, unit, data, stdin)
        self.runs[IN_PROCESS] += 1
        return run_in_process(entry, self.place, stdin)

    def _per_process(
        self, inv: Invocation, entry: Entry | None, unit: Unit, data: bytes, stdin: bytes
    ) -> Ran:
        if entry is None:  # options only the interpreter parses: no coverage, its end only
            return run_plain(inv, self.work, self.paths, stdin, self.scratch)
        return run_per_process(entry, self.work, self.paths, self.roots, stdin, self.scratch)


if __name__ == "__main__":
    _child_main(sys.argv[1])
