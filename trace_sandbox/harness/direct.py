"""Trace's own reproducer scripts run without a shell: the requests their wrappers would send.

A variant of the PoC (the variants gate's plan, the fuzzing gate's minimised crashes) is a
reproducer trace wrote itself (trace_sandbox/gates/variants.py `script_of`): one line per target
invocation, `"$TARGET/bin/prog" 'arg' ...` or `python3 'arg' ...`, a `< stdin-N.bin` at most.
Run like the PoC's own reproducer, each costs a launcher fork with its namespaces, a shell and,
per invocation, the wrapper's interpreter (targetview.WRAPPER), most of a variant run's CPU.
None of that protects anything here: the shell runs no code but trace's, and the targets run
out in the harness's namespace either way.

So a script of exactly that form (`parse`; any other byte and it runs as ever) is run by a
thread of the harness's process (`DirectRun`) that does what the shell and the wrappers would
have done, and nothing else: for each line in order it opens what the wrapper would have held
(the run's /dev/null or its `stdin-N.bin` as descriptor 0, the reproducer's stdout and stderr
pipes as 1 and 2) and sends the harness, over the harness's own socket, the request that
line's wrapper would have sent: the same program name, argv[0] (the path the shell executes:
`$TARGET/bin/prog`, or the first `python3` on the reproducer's PATH), working directory,
arguments and environment (the reproducer's, with what busybox's sh adds and in its order:
`shell_environment`). The harness runs and records the target as it records any, and the
thread takes its answer as the wrapper would; the script's exit status is the last line's,
as the shell's is. The record is the one the shell would have given, byte for byte
(tests/test_harness_direct.py runs both ways and compares).

One thing the shell does that this does not: it reports a command that died of a signal on
its stderr (`Segmentation fault`), in its own words. A direct run whose target died of a
signal is therefore not kept (`fallback`): the caller runs the variant again the usual way.
A timeout ends a direct run as it ends the shell: the running target is killed by the
harness, no further line starts, and the run ends as if SIGKILLed.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from .targets import Harness

    Dirs = tuple[str, str, str]  # the working directory, $TARGET's view, the python shims

# a program's path in the package, as script_of writes it: nothing the shell would expand
_PROGRAM = re.compile(rb'"\$TARGET/(bin/[A-Za-z0-9._+-]+)"')
_STDIN = re.compile(rb" < (stdin-[0-9]+\.bin)\Z")
_VARS = ((b'"$TARGET"', "TARGET"), (b'"$PWD"', "PWD"))


class Line:
    """One line of a script: its program (`bin/...` in the package, or `python3`), its
    arguments (each a list of pieces: bytes, or the name of a variable the shell expands) and
    the stdin file it redirects from (None: the reproducer's own stdin)."""

    __slots__ = ("args", "program", "stdin")

    def __init__(self, program: str, args: list[list[bytes | str]], stdin: str | None) -> None:
        self.program, self.args, self.stdin = program, args, stdin


def parse(script: bytes) -> list[Line] | None:
    """The script's lines when it is exactly of script_of's form, else None."""
    lines: list[Line] = []
    for raw in script.split(b"\n"):
        if not raw or raw.startswith(b"#"):
            continue
        line = _line(raw)
        if line is None:
            return None
        lines.append(line)
    return lines


def _line(raw: bytes) -> Line | None:
    stdin = None
    found = _STDIN.search(raw)
    if found:
        stdin, raw = found.group(1).decode(), raw[: found.start()]
    first, space, rest = raw.partition(b" ")
    program = _PROGRAM.fullmatch(first)
    if program is not None:
        name = program.group(1).decode()
    elif first == b"python3":
        name = "python3"
    else:
        return None
    args: list[list[bytes | str]] = []
    i = 0
    while space and i <= len(rest):
        pieces, i = _word(rest, i)
        if not pieces or (i < len(rest) and rest[i : i + 1] != b" "):
            return None
        args.append(pieces)
        i += 1  # the space between words; past the end once the last word is read
    return Line(name, args, stdin)


def _word(text: bytes, i: int) -> tuple[list[bytes | str], int]:
    """The word at `text[i:]` up to an unquoted space or the end: its pieces (single-quoted
    text, `\\'`, `"$TARGET"`, `"$PWD"`) and where it ends; no pieces for anything else."""
    pieces: list[bytes | str] = []
    while i < len(text) and text[i : i + 1] != b" ":
        var = next((name for word, name in _VARS if text.startswith(word, i)), None)
        if var is not None:
            pieces.append(var)
            i += len(var) + 3
        elif text.startswith(b"\\'", i):
            pieces.append(b"'")
            i += 2
        elif text[i : i + 1] == b"'":
            end = text.find(b"'", i + 1)
            if end < 0:
                return [], i
            pieces.append(text[i + 1 : end])
            i = end + 1
        else:
            return [], i
    return pieces, i


# --- the shell's environment ------------------------------------------------------------------
# busybox's sh passes its children the environment it was given plus SHLVL and PWD, in the
# order of its own variable table: asked once per process and environment shape (a shell
# started to print it), not assumed.
_SHAPES: dict[tuple[str, tuple[str, ...]], tuple[list[str], dict[str, str]] | None] = {}
_PROBE = (
    "import posix,sys;"
    "sys.stdout.buffer.write(b'\\0'.join(k+b'='+v for k,v in posix.environ.items()))"
)


def shell_environment(sh: str, env: Mapping[str, str], cwd: str) -> dict[str, str] | None:
    """The environment `sh` gives a command it runs in `cwd` (None: not learnt)."""
    shape = (sh, tuple(env))
    if shape not in _SHAPES:
        _SHAPES[shape] = _probe(sh, env, cwd)
    learnt = _SHAPES[shape]
    if learnt is None:
        return None
    order, added = learnt
    values = {**env, **added, "PWD": cwd}
    return {k: values[k] for k in order}


def _probe(sh: str, env: Mapping[str, str], cwd: str) -> tuple[list[str], dict[str, str]] | None:
    python = os.path.realpath(sys.executable)
    try:
        done = subprocess.run(
            [sh, "-c", 'exec "$0" -I -S -c "$1"', python, _PROBE],
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    pairs = [os.fsdecode(e).split("=", 1) for e in done.stdout.split(b"\0") if b"=" in e]
    seen = dict(pairs)
    added = {k: v for k, v in seen.items() if k not in env}
    if not set(added) <= {"PWD", "SHLVL"}:
        return None  # something but the shell added it (the interpreter's locale coercion)
    if any(k not in seen or seen[k] != v for k, v in env.items()) or added.get("PWD") != cwd:
        return None  # the shell changed a value it was given: not the shape assumed here
    added.pop("PWD")
    return list(seen), added


class DirectFallback(Exception):
    """A direct run's record is not the shell's (`DirectRun.fallback` says why): run the
    script the usual way, in a fresh directory."""


# --- the run ------------------------------------------------------------------------------------


class DirectRun:
    """A reproducer script run by a thread of this process (see above), as much of a process
    as the harness's `collect` uses: stdout, stderr, wait, poll, returncode, `end` (its kill)
    and `exited_within`. `fallback` says why its record must not be kept (None: keep it)."""

    def __init__(
        self, lines: list[Line], harness: Harness, env: Mapping[str, str], dirs: Dirs
    ) -> None:
        """`harness`: the run's, serving its socket; `env`: the shell's environment
        (`shell_environment`); `dirs`: the working directory, $TARGET's view, the shims."""
        self.lines, self.harness, self.env, self.dirs = lines, harness, env, dirs
        self.returncode: int | None = None
        self.fallback: str | None = None
        self.ended = threading.Event()
        out_r, self.out_w = os.pipe()
        err_r, self.err_w = os.pipe()
        self.stdout, self.stderr = os.fdopen(out_r, "rb"), os.fdopen(err_r, "rb")
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        status = 0
        try:
            for line in self.lines:
                if self.ended.is_set():
                    break
                kind, status = self._invoke(line)
                if kind == "signal" and self.harness.ending is not None:
                    self.ended.set()  # the harness killed it: the timeout's SIGKILL follows
                elif kind == "signal":
                    self.fallback = f"a target died of signal {status}: the shell reports it"
                    break
        except OSError as exc:
            self.fallback = f"a request to the harness failed: {exc}"
        finally:
            os.close(self.out_w)
            os.close(self.err_w)
        self.returncode = -9 if self.ended.is_set() else status

    def _invoke(self, line: Line) -> tuple[str, int]:
        (cwd, view, shims), env = self.dirs, self.env
        name, argv0 = resolve(line.program, view, shims, self.harness.programs)
        args = [os.fsencode(expand(a, env)) for a in line.args]
        path = os.path.join(cwd, line.stdin) if line.stdin else os.devnull
        stdin = os.open(path, os.O_RDONLY)
        try:
            fields = [name.encode(), os.fsencode(argv0), os.fsencode(cwd), b"%d" % len(args)]
            fields += args + [os.fsencode(f"{k}={v}") for k, v in env.items()]
            fds = [stdin, self.out_w, self.err_w]
            return _request(self.harness.sock, b"\0".join(fields), fds)
        finally:
            os.close(stdin)

    def end(self) -> None:
        """The shell's SIGKILL: no further line starts (the harness ends the running target)."""
        if self.thread.is_alive():
            self.ended.set()

    def exited_within(self, timeout: float) -> bool:
        self.thread.join(timeout)
        return not self.thread.is_alive()

    def poll(self) -> int | None:
        return self.returncode if not self.thread.is_alive() else None

    def wait(self, timeout: float | None = None) -> int:
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise subprocess.TimeoutExpired("direct run", timeout or 0)
        assert self.returncode is not None
        return self.returncode


def resolve(program: str, view: str, shims: str, programs: Mapping[str, str]) -> tuple[str, str]:
    """(the wrapper's name, the path the shell executes) for a line's program: `bin/x` is
    $TARGET/bin/x; `python3` the first on the reproducer's PATH (the package's own bin/python3
    before the shim, as the shell looks)."""
    if program == "python3":
        own = os.path.join(view, "bin", "python3")
        if "bin/python3" in programs and os.path.isfile(own):
            return "bin/python3", own
        return "python3", os.path.join(shims, "python3")
    if program not in programs:
        raise OSError(f"{program} is not one of the package's programs")
    return program, os.path.join(view, program)


def expand(pieces: list[bytes | str], env: Mapping[str, str]) -> str:
    return "".join(os.fsdecode(p) if isinstance(p, bytes) else env[p] for p in pieces)


def _request(sock_path: str, req: bytes, fds: list[int]) -> tuple[str, int]:
    """What a wrapper sends (targetview.WRAPPER) and the harness's answer: ("exit" or
    "signal", the number)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(sock_path)
        socket.send_fds(s, [b"F"], fds)
        s.sendall(len(req).to_bytes(8, "big") + req)
        reply = b""
        while chunk := s.recv(4096):
            reply += chunk
    kind, _, value = reply.partition(b" ")
    if kind not in (b"exit", b"signal") or not value.isdigit():
        raise OSError(f"the harness answered {reply[:40]!r}")
    return kind.decode(), int(value)
