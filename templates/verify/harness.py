"""Run one reproducer against one build, inside the Nix sandbox, and record how the TARGET ended.

Stdlib only: it runs under the package set's python3 in the build sandbox. Inputs come from the
derivation's environment: `target` (the package's store path), `script` (the reproducer),
`data` (space-separated store paths copied into the working directory), `run`, `tools` (bin
directories put on the reproducer's PATH), `timeout` (seconds) and `out`. The derivation is not
told which side (pre-fix or post-fix) it runs on, and neither is the reproducer: the engine knows
the side from the step and adds it to the record.

Evidence comes from the target's own processes, never from the reproducer's account:

* `$TARGET` is a view of the package whose `bin/*` are wrappers, and `python3`/`python` on PATH
  are shims. A wrapper does not run the program itself: it hands its argv, working directory,
  environment and stdin/stdout/stderr descriptors over a Unix socket to this harness, which runs
  the real program (only names from its own table: a wrapper cannot name another binary), tees
  the program's stdout and stderr through to the wrapper's descriptors while keeping its own copy
  in memory, and records the program's exit status or signal. The wrapper then exits the same
  way. So each invocation's exit, signal, sanitizer report and output are what the harness saw
  the program do; the reproducer cannot write them. The environment the program gets is the
  wrapper's minus `LD_*` and `PYTHON*` (no preloaded code), with the harness's own `PYTHONPATH`.
* Python packages: the interpreter that runs the package's code is the target. A python started
  through the shim gets an audit hook (sitecustomize) that lists the package's module files it
  opens; such a process counts as a target invocation, with the exit, signal and output the
  harness saw. A python that opened none of the package's modules is not a target (its output
  still reaches the reproducer). The audit list itself is written from inside that process, so
  for Python packages the rule is: the process that ran the package's code, as a whole, is the
  target (the reproducer's own code in that process included).

The record (`$out/outcome.json`, trace.run/v1) has one entry per target invocation
(`invocations`, in a canonical order, not start order: parallel targets start by timing; an
entry's `ended` says when the harness, not the target, ended it: `killed-by-harness` when it
was still running as the reproducer ended, `timed-out` on a reproducer timeout, `broken-pipe`
when it died of SIGPIPE after its reader went away; the gate's rules say what each counts as),
`timed_out`, `target_ran`, `target_failed` (some invocation exited non-zero, died of a
signal or printed a sanitizer report on its own stderr), `sanitizer` (the first such report of a
target invocation), and the reproducer script's own exit code, signal and output digests/tails
for reviewers. It is deterministic: output is normalised (addresses, pids, temp paths) and holds
no timings. This derivation always succeeds; the record says how the target ended.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

TAIL_CHARS = 4000
INVOCATION_TAIL_CHARS = 2000
CAPTURE_HEAD = 1 << 20  # bytes of a stream kept from its start ...
CAPTURE_TAIL = 1 << 20  # ... and from its end (fixed sizes: independent of read sizes)
COLLECT_GRACE = 2.0  # seconds to drain the reproducer's pipes once it ended or was killed
SANITIZER_RE = re.compile(r"ERROR: (\w+Sanitizer): ([A-Za-z][\w-]*)")
AUDIT_VAR = "TRACE_TARGET_LOG"
DROPPED_ENV = ("LD_", "PYTHON", "DYLD_")

WRAPPER = """#!{python} -IS
import json, os, signal, socket, sys
SOCK, NAME = {sock!r}, {name!r}
fds = []
for fd in (0, 1, 2):
    try:
        os.fstat(fd)
        fds.append(fd)
    except OSError:
        fds.append(os.open(os.devnull, os.O_RDWR))
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    req = json.dumps({{"name": NAME, "argv0": sys.argv[0], "args": sys.argv[1:],
                      "cwd": os.getcwd(), "env": dict(os.environ)}}).encode()
    s.connect(SOCK)
    socket.send_fds(s, [b"F"], fds)
    s.sendall(len(req).to_bytes(8, "big") + req)
    reply = b""
    while True:
        chunk = s.recv(4096)
        if not chunk:
            break
        reply += chunk
    status = json.loads(reply)
except (OSError, ValueError) as exc:
    sys.stderr.write("trace: the target could not be run: %s\\n" % exc)
    sys.exit(127)
sig = status.get("signal")
if sig:
    try:
        signal.signal(sig, signal.SIG_DFL)
    except (OSError, ValueError):
        pass  # SIGKILL, SIGSTOP: already the default
    os.kill(os.getpid(), sig)
    sys.exit(128 + sig)
sys.exit(status.get("exit_code", 127))
"""

# sitecustomize for python processes: list the package files they open (module imports) into
# the per-invocation file the harness names in $TRACE_TARGET_LOG. Kept a str.format template
# that defines _PKG and imports json/os/sys: the coverage gate appends its tracer to it.
AUDIT_HOOK = """import json, os, sys
_PKG, _SEEN = {pkg!r}, set()
_LOG = os.environ.pop("TRACE_TARGET_LOG", None)
def _trace_hook(event, args):
    if _LOG is None or event != "open" or not isinstance(args[0], str):
        return
    path = args[0]
    if not path.startswith(_PKG + "/") or path in _SEEN:
        return
    _SEEN.add(path)
    fd = os.open(_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.write(fd, (json.dumps(path[len(_PKG) + 1:]) + "\\n").encode())
    os.close(fd)
sys.addaudithook(_trace_hook)
"""


def store_name(path: str) -> str:
    """`/nix/store/<hash>-crash.txt` -> `crash.txt`."""
    base = os.path.basename(path.rstrip("/"))
    return base.split("-", 1)[1] if re.match(r"^[0-9a-z]{32}-", base) else base


def write_wrapper(path: str, python: str, sock: str, name: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(WRAPPER.format(python=python, sock=sock, name=name))
    os.chmod(path, 0o755)


def make_view(pkg: str, view: str, python: str, sock: str) -> dict[str, str]:
    """$TARGET: the package with every bin/* replaced by a wrapper. Returns name -> real path."""
    programs: dict[str, str] = {}
    os.makedirs(view)
    for entry in sorted(os.listdir(pkg)):
        src = os.path.join(pkg, entry)
        if entry != "bin" or not os.path.isdir(src):
            os.symlink(src, os.path.join(view, entry))
            continue
        os.makedirs(os.path.join(view, "bin"))
        for prog in sorted(os.listdir(src)):
            name = f"bin/{prog}"
            programs[name] = os.path.join(src, prog)
            write_wrapper(os.path.join(view, "bin", prog), python, sock, name)
    return programs


def python_paths(pkg: str) -> list[str]:
    """Where the package keeps Python modules (nixpkgs: lib/python3.X/site-packages)."""
    found: list[str] = []
    lib = os.path.join(pkg, "lib")
    if os.path.isdir(lib):
        for entry in sorted(os.listdir(lib)):
            base = os.path.join(lib, entry)
            if entry == "python":
                found.append(base)
            elif entry.startswith("python") and os.path.isdir(os.path.join(base, "site-packages")):
                found.append(os.path.join(base, "site-packages"))
    return found


def normalise(text: str, subs: list[tuple[str, str]]) -> str:
    for old, new in subs:
        if old:
            text = text.replace(old, new)
    text = re.sub(r"==\d+==", "==PID==", text)
    text = re.sub(r"0x[0-9a-fA-F]{4,}", "0xADDR", text)
    text = re.sub(r"\b(pid|PID|process) \d+", r"\1 N", text)
    return text


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise OSError("connection closed early")
        buf += chunk
    return buf


def signal_name(n: int) -> str:
    """`9` -> `SIGKILL`; real-time and unknown signals have no name in `signal.Signals`."""
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"SIG{n}"


class Capture:
    """A stream kept as its first CAPTURE_HEAD and last CAPTURE_TAIL bytes. What is kept depends
    only on the bytes (never on how reads split them), so records stay deterministic."""

    def __init__(self) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = CAPTURE_HEAD - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        self.tail += chunk
        if len(self.tail) > 2 * CAPTURE_TAIL:
            del self.tail[: len(self.tail) - CAPTURE_TAIL]

    def value(self) -> bytes:
        kept = len(self.head) + min(len(self.tail), CAPTURE_TAIL)
        if self.total <= kept:
            return bytes(self.head + self.tail)
        skipped = f"\n[trace: {self.total - kept} bytes omitted]\n".encode()
        return bytes(self.head) + skipped + bytes(self.tail[-CAPTURE_TAIL:])


def _tee(src: int, dest: int | None, keep: Capture, broken: threading.Event | None = None) -> None:
    """Copy a stream to `dest` (None: only keep it), keeping a copy (head + tail). When the
    reader of `dest` goes away (EPIPE), stop reading and close `src` as a real pipe would: the
    writer's next write gets SIGPIPE/EPIPE instead of running on unseen."""
    while True:
        try:
            chunk = os.read(src, 65536)
        except OSError:
            break
        if not chunk:
            break
        keep.add(chunk)
        view = memoryview(chunk)
        try:
            while dest is not None and view:
                view = view[os.write(dest, view) :]
        except BrokenPipeError:
            if broken is not None:
                broken.set()
            break
        except OSError:
            dest = None  # the descriptor is unusable otherwise: keep capturing
    os.close(src)


class Harness:
    """Runs target programs on behalf of wrappers and shims, and remembers how each ended."""

    def __init__(self, private: str, programs: dict[str, str], python: str, pypath: str) -> None:
        self.private = private
        self.sock = os.path.join(private, "s")
        self.programs = programs
        self.python = python
        self.pypath = pypath
        self.lock = threading.Lock()
        self.seq = 0
        self.entries: list[tuple[int, dict[str, Any]]] = []
        self.live: dict[int, subprocess.Popen[bytes]] = {}
        self.killed: dict[int, str] = {}  # seq -> why the harness ended it
        self.handlers: list[threading.Thread] = []
        self.stopped = threading.Event()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.sock)
        self.listener.listen(64)
        self.listener.settimeout(0.1)
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            t = threading.Thread(target=self._handle, args=(conn,), daemon=True)
            with self.lock:
                self.handlers.append(t)
            t.start()

    def _env(self, env: dict[str, str], log: str) -> dict[str, str]:
        clean = {k: v for k, v in env.items() if not k.startswith(DROPPED_ENV) and k != AUDIT_VAR}
        clean["PYTHONPATH"] = self.pypath
        clean[AUDIT_VAR] = log
        return clean

    def _handle(self, conn: socket.socket) -> None:
        fds: list[int] = []
        try:
            _, fds, _, _ = socket.recv_fds(conn, 1, 3)
            size = int.from_bytes(_recv_exact(conn, 8), "big")
            req = json.loads(_recv_exact(conn, size))
            name = str(req["name"])
            python = name in ("python", "python3")
            real = self.python if python else self.programs.get(name)
            if real is None or len(fds) != 3:
                conn.sendall(json.dumps({"exit_code": 127}).encode())
                return
            with self.lock:
                seq = self.seq
                self.seq += 1
            log = os.path.join(self.private, f"audit-{seq}.jsonl")
            out, err = Capture(), Capture()
            broken = threading.Event()
            proc = subprocess.Popen(
                [str(req["argv0"]), *[str(a) for a in req["args"]]],
                executable=real,
                cwd=str(req["cwd"]),
                env=self._env({str(k): str(v) for k, v in req["env"].items()}, log),
                stdin=fds[0],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
            with self.lock:
                self.live[seq] = proc
            assert proc.stdout is not None and proc.stderr is not None
            tees = [
                threading.Thread(
                    target=_tee, args=(os.dup(proc.stdout.fileno()), fds[1], out, broken)
                ),
                threading.Thread(
                    target=_tee, args=(os.dup(proc.stderr.fileno()), fds[2], err, broken)
                ),
            ]
            proc.stdout.close()
            proc.stderr.close()
            for t in tees:
                t.start()
            rc = proc.wait()
            for t in tees:
                t.join()
            with self.lock:
                self.live.pop(seq, None)
                killed = self.killed.get(seq) if rc == -signal.SIGKILL else None
            ended = killed
            if ended is None and rc == -signal.SIGPIPE and broken.is_set():
                ended = "broken-pipe"
            opened = read_opened(log)
            if not python or opened:
                entry: dict[str, Any] = {
                    "target": name if not python else module_name(opened[0]),
                    "kind": "python" if python else "program",
                    "args": [str(a) for a in req["args"]],
                    "exit_code": rc if rc >= 0 else None,
                    # the harness's own kill is not the target dying of a signal
                    "signal": signal_name(-rc) if rc < 0 and killed is None else None,
                    "ended": ended,
                    "opened": opened,
                    "stdout": out.value(),
                    "stderr": err.value(),
                }
                with self.lock:
                    self.entries.append((seq, entry))
            reply = {"signal": -rc} if rc < 0 else {"exit_code": rc}
            conn.sendall(json.dumps(reply).encode())
        except (OSError, ValueError, KeyError, TypeError) as exc:
            sys.stderr.write(f"trace harness: a target request failed: {exc}\n")
        finally:
            for fd in fds:
                os.close(fd)
            conn.close()

    def kill_targets(self, why: str = "killed-by-harness") -> None:
        """End every target still running; its record says the harness ended it (`why`)."""
        with self.lock:
            procs = list(self.live.values())
            for seq in self.live:
                self.killed.setdefault(seq, why)
        for proc in procs:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)

    def stop(self) -> list[dict[str, Any]]:
        """Stop serving, end targets still running, and return every entry (start order; the
        record sorts them canonically)."""
        self.stopped.set()
        self.thread.join()
        self.listener.close()
        self.kill_targets()
        with self.lock:
            handlers = list(self.handlers)
        for t in handlers:
            t.join()
        return [e for _, e in sorted(self.entries, key=lambda x: x[0])]


def read_opened(log: str) -> list[str]:
    if not os.path.exists(log):
        return []
    with open(log, encoding="utf-8") as fh:
        return [str(json.loads(line)) for line in fh if line.strip()]


def module_name(path: str) -> str:
    """`lib/python/pager/__pycache__/__init__.cpython-311.pyc` -> `lib/python/pager/__init__.py`
    (nixpkgs ships compiled modules: an import opens the .pyc, not the source)."""
    m = re.match(r"^(.*/)?__pycache__/([^/.]+)\.[^/]+\.pyc$", path)
    return f"{m.group(1) or ''}{m.group(2)}.py" if m else path


def find_python(tools: list[str]) -> str:
    for d in tools:
        candidate = os.path.join(d, "python3")
        if os.path.exists(candidate):
            return os.path.realpath(candidate)
    return os.path.realpath(sys.executable)


def invocation_record(entry: dict[str, Any], subs: list[tuple[str, str]]) -> dict[str, Any]:
    """One trace.run/v1 invocation: how the target ended, its own sanitizer report, its output."""
    stdout = normalise(entry["stdout"].decode("utf-8", "replace"), subs)
    stderr = normalise(entry["stderr"].decode("utf-8", "replace"), subs)
    match = SANITIZER_RE.search(stderr)  # head + tail kept at fixed sizes: deterministic
    record = {k: v for k, v in entry.items() if k not in ("stdout", "stderr")}
    record["args"] = [normalise(str(a), subs) for a in entry["args"]]
    record["sanitizer"] = {"tool": match.group(1), "kind": match.group(2)} if match else None
    record["stdout_tail"] = stdout[-INVOCATION_TAIL_CHARS:]
    record["stderr_tail"] = stderr[-INVOCATION_TAIL_CHARS:]
    return record


# how the harness (not the target) ended an invocation, or a pipeline's normal end: not failures
NOT_FAILURES = ("killed-by-harness", "timed-out", "broken-pipe")


def invocation_failed(inv: dict[str, Any]) -> bool:
    if inv.get("ended") in NOT_FAILURES and not inv.get("sanitizer"):
        return False
    return inv.get("exit_code") not in (0, None) or bool(inv.get("signal") or inv.get("sanitizer"))


def canonical_key(inv: dict[str, Any]) -> str:
    """Invocations are recorded in this order, not in the order they started: targets run in
    parallel (`cparse & ... wait`) start in an order that depends on timing."""
    output = (inv["stdout_tail"] + "\0" + inv["stderr_tail"]).encode()
    s = inv.get("sanitizer")
    return json.dumps(
        [
            inv["target"],
            inv["args"],
            inv.get("exit_code"),
            inv.get("signal"),
            f"{s['tool']}: {s['kind']}" if s else None,
            inv.get("ended"),
            hashlib.sha256(output).hexdigest(),
        ]
    )


def collect(
    proc: subprocess.Popen[bytes], harness: Harness, timeout: int
) -> tuple[int, bytes, bytes, bool]:
    """Wait for the reproducer (at most `timeout` s), then end what it left running in its
    process group, and read its output (capped like a target's). Returns (returncode, stdout,
    stderr, timed_out). A process that left the group (`setsid`) and keeps the pipes open cannot
    hold the run: the pipes are drained for COLLECT_GRACE seconds at most."""
    assert proc.stdout is not None and proc.stderr is not None
    caps = (Capture(), Capture())
    readers = [
        threading.Thread(target=_tee, args=(os.dup(f.fileno()), None, c), daemon=True)
        for f, c in zip((proc.stdout, proc.stderr), caps, strict=True)
    ]
    for t in readers:
        t.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
    # targets first (still running: the harness ends them), then the reproducer's leftovers:
    # killing those first could end a target's input and let it finish by timing
    harness.kill_targets("timed-out" if timed_out else "killed-by-harness")
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)  # the reproducer (on timeout) and its leftovers
    rc = proc.wait()
    deadline = time.monotonic() + COLLECT_GRACE
    for t in readers:
        t.join(max(0.0, deadline - time.monotonic()))
    proc.stdout.close()
    proc.stderr.close()
    return rc, caps[0].value(), caps[1].value(), timed_out


def main() -> int:
    env = os.environ
    out, pkg = env["out"], os.path.realpath(env["target"])
    tmp = env.get("TMPDIR", "/tmp")
    work, view, hook = (os.path.join(tmp, d) for d in ("work", "target", "hook"))
    private = tempfile.mkdtemp(prefix="trace-", dir=tmp)
    python = os.path.realpath(sys.executable)
    os.makedirs(work)
    for path in env.get("data", "").split():
        dest = os.path.join(work, store_name(path))
        if os.path.isdir(path):
            shutil.copytree(path, dest)
        else:
            shutil.copyfile(path, dest)
    script = os.path.join(work, ".trace-reproducer.sh")
    shutil.copyfile(env["script"], script)
    sock = os.path.join(private, "s")
    programs = make_view(pkg, view, python, sock)
    os.makedirs(hook)
    with open(os.path.join(hook, "sitecustomize.py"), "w", encoding="utf-8") as fh:
        fh.write(AUDIT_HOOK.format(pkg=pkg))
    tools = [os.path.join(t, "bin") for t in env.get("tools", "").split()]
    shims = os.path.join(tmp, "shims")
    os.makedirs(shims)
    for name in ("python3", "python"):
        write_wrapper(os.path.join(shims, name), python, sock, name)
    pypath = ":".join([hook, *python_paths(pkg)])
    harness = Harness(private, programs, find_python(tools), pypath)
    harness.start()

    child_env = {
        "TARGET": view,
        "PATH": ":".join([os.path.join(view, "bin"), shims, *tools]),
        "PYTHONPATH": pypath,
        "HOME": work,
        "TMPDIR": tmp,
        "TRACE_RUN": env.get("run", "1"),
        "LC_ALL": "C",
    }
    shell = shutil.which("sh", path=":".join(tools)) or "/bin/sh"
    timeout = int(env.get("timeout", "60"))
    # A session of its own, so a timeout kills the reproducer and everything it started; the
    # targets run in sessions of their own (the harness starts them) and are killed with it.
    proc = subprocess.Popen(
        [shell, script],
        cwd=work,
        env=child_env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    rc, stdout_b, stderr_b, timed_out = collect(proc, harness, timeout)
    entries = harness.stop()

    subs = [
        (private, "<trace>"),
        (work, "<work>"),
        (view, "$TARGET"),
        (pkg, "<target>"),
        (tmp, "<tmp>"),
    ]
    stdout = normalise(stdout_b.decode("utf-8", "replace"), subs)
    stderr = normalise(stderr_b.decode("utf-8", "replace"), subs)
    if timed_out:
        stderr += f"\n[trace: reproducer killed after {timeout} s]\n"
    invocations = sorted((invocation_record(e, subs) for e in entries), key=canonical_key)
    reports = [i["sanitizer"] for i in invocations if i["sanitizer"]]
    record = {
        "schema": "trace.run/v1",
        "run": int(env.get("run", "1")),
        "build": "ok",
        "target_ran": bool(invocations),
        "target_failed": any(invocation_failed(i) for i in invocations),
        "invocations": invocations,
        "exit_code": rc if rc >= 0 else None,
        "signal": signal_name(-rc) if rc < 0 else None,
        "timed_out": timed_out,
        "sanitizer": reports[0] if reports else None,
        "stdout_sha256": hashlib.sha256(stdout.encode()).hexdigest(),
        "stderr_sha256": hashlib.sha256(stderr.encode()).hexdigest(),
        "stdout_tail": stdout[-TAIL_CHARS:],
        "stderr_tail": stderr[-TAIL_CHARS:],
    }
    os.makedirs(out)
    with open(os.path.join(out, "outcome.json"), "w", encoding="utf-8") as fh:
        json.dump(record, fh, indent=2, sort_keys=True)
        fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
