"""Run one reproducer against one build, inside the Nix sandbox, and record how the TARGET ended.

Stdlib only: it runs under the package set's python3 in the build sandbox. Inputs come from the
derivation's environment: `target` (the package's store path), `script` (the reproducer),
`data` (space-separated store paths copied into the working directory), `run`, `tools` (bin
directories put on the reproducer's PATH), `timeout` (seconds) and `out`. The derivation is not
told which side (pre-fix or post-fix) it runs on, and neither is the reproducer: the engine knows
the side from the step and adds it to the record.

Evidence comes from the target's own processes, never from the reproducer's account:

* The reproducer runs in a user + PID + mount namespace of its own (see `run_isolated`): it
  cannot see, signal or write into the targets, and nothing it can read names the build under
  test. `$TARGET` is a copy of the package (its store path rewritten to a fixed one) whose
  `bin/*` are wrappers, and `python3`/`python` on PATH are shims. A wrapper does not run the
  program itself: it hands its argv, working directory, environment and stdin/stdout/stderr
  descriptors over a Unix socket to this harness, which runs
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
HIDDEN_HASH = "0" * 32
ISOLATED = "--isolated-reproducer"

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


def hidden_path(pkg: str) -> str:
    """The path the reproducer's copies say instead of the package's own store path: the same
    length (binaries stay valid) and the same on both sides, so it names neither build."""
    base = os.path.basename(pkg)
    if re.match(r"^[0-9a-z]{32}-", base):
        return os.path.join(os.path.dirname(pkg), HIDDEN_HASH + base[32:])
    return pkg


def copy_hidden(src: str, dest: str, pkg: str) -> None:
    """Copy `src` (a file, symlink or tree of the package) to `dest`, every mention of the
    package's store path rewritten to `hidden_path(pkg)` (modes and mtimes kept: .pyc stay
    valid)."""
    old, new = pkg.encode(), hidden_path(pkg).encode()
    if os.path.islink(src):
        target = os.readlink(src)
        os.symlink(target.replace(pkg, hidden_path(pkg)), dest)
    elif os.path.isdir(src):
        os.makedirs(dest)
        for entry in sorted(os.listdir(src)):
            copy_hidden(os.path.join(src, entry), os.path.join(dest, entry), pkg)
        shutil.copystat(src, dest)
    elif os.path.isfile(src):
        with open(src, "rb") as fh:
            data = fh.read()
        with open(dest, "wb") as fh:
            fh.write(data.replace(old, new))
        shutil.copystat(src, dest)


def make_view(pkg: str, view: str, python: str, sock: str) -> dict[str, str]:
    """$TARGET: a copy of the package (its store path rewritten away) with every bin/* replaced
    by a wrapper. Nothing in it links or names the package's store path, so the reproducer
    cannot tell the pre-fix build from the post-fix one by it. Returns name -> real path."""
    programs: dict[str, str] = {}
    os.makedirs(view)
    for entry in sorted(os.listdir(pkg)):
        src = os.path.join(pkg, entry)
        if entry != "bin" or not os.path.isdir(src):
            copy_hidden(src, os.path.join(view, entry), pkg)
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

    def __init__(
        self, private: str, sock: str, programs: dict[str, str], python: str, pypath: str
    ) -> None:
        self.private = private
        self.sock = sock
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


# --- the reproducer's own namespaces -------------------------------------------------------
# The reproducer runs as PID 1's child in a user + PID + mount namespace of its own, with a
# fresh /proc and a root of its own (pivot_root): it sees only its own processes (not the
# targets, which the harness runs out here, nor the harness), cannot signal or write to them,
# and its file system holds no path naming the build under test: the package's store path, the
# run's own output path, the harness's private files (audit hook, audit logs, sockets' peers)
# are left out, and parts of the Nix sandbox's chroot (named after the side-specific run
# derivation) are copied, not bind-mounted, so /proc/self/mountinfo names none of them.

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID = 0x00020000, 0x10000000, 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 8, 4096, 16384, 1 << 18
MNT_DETACH = 2
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
INNER_ID = 1000  # the reproducer's uid/gid inside (never 0: exec drops its capabilities)


def _libc() -> Any:
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _ok(result: int, what: str) -> None:
    if result != 0:
        import ctypes

        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(libc: Any, src: str | None, dest: str, fstype: str | None, flags: int) -> None:
    def enc(value: str | None) -> bytes | None:
        return value.encode() if value is not None else None

    _ok(libc.mount(enc(src), enc(dest), enc(fstype), flags, None), f"mount {src} on {dest}")


def _mounts() -> dict[str, str]:
    """mount point -> the mount's root within its file system (this mount namespace)."""
    found: dict[str, str] = {}

    def unescape(v: str) -> str:
        return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), v)

    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        for line in fh:
            fields = line.split()
            found[unescape(fields[4])] = unescape(fields[3])
    return found


def _inside(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


class RootPlan:
    """What the reproducer's root holds: `expose` bound as they are, `hide` left out, `only`
    directories holding nothing but what is exposed in them."""

    def __init__(self, expose: list[str], hide: list[str], only: list[str]) -> None:
        self.expose, self.hide, self.only = set(expose), set(hide), set(only)
        self.mounts = _mounts()

    def chroot_part(self, path: str) -> bool:
        """Is `path` part of (or a whole) mount whose root names the Nix sandbox's chroot (the
        run derivation's name: it differs between the sides)?"""
        best = max((m for m in self.mounts if _inside(path, m)), key=len, default="/")
        return ".drv.chroot" in self.mounts.get(best, "")

    def replicate(self, libc: Any, src: str, dest: str) -> None:
        if src in self.hide:
            return
        special = self.expose | self.hide
        below = any(_inside(p, src) and p != src for p in special)
        if src in self.expose or not (below or self.chroot_part(src)):
            self._bind(libc, src, dest)
        elif os.path.islink(src):
            os.symlink(os.readlink(src), dest)
        elif os.path.isdir(src):
            os.mkdir(dest, 0o755)
            for entry in sorted(os.listdir(src)):
                child = os.path.join(src, entry)
                if src in self.only and not any(_inside(p, child) for p in self.expose):
                    continue
                self.replicate(libc, child, os.path.join(dest, entry))
        elif os.path.isfile(src) and src not in self.mounts:
            shutil.copyfile(src, dest)
            shutil.copymode(src, dest)
        elif src in self.mounts:
            self._bind(libc, src, dest)

    def _bind(self, libc: Any, src: str, dest: str) -> None:
        if os.path.islink(src):
            os.symlink(os.readlink(src), dest)
            return
        if os.path.isdir(src):
            os.mkdir(dest, 0o755)
        elif os.path.exists(src):
            with open(dest, "w", encoding="utf-8"):
                pass
        else:
            return
        _mount(libc, src, dest, None, MS_BIND | MS_REC)


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def _init(libc: Any, cfg: dict[str, Any], status_w: int) -> None:
    """PID 1 of the reproducer's namespace: build its root, start it, report how it ended."""
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
    root = cfg["root"]
    _mount(libc, "tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV)
    plan = RootPlan(cfg["expose"], [*cfg["hide"], "/proc", root], cfg["only"])
    for entry in sorted(os.listdir("/")):
        plan.replicate(libc, os.path.join("/", entry), os.path.join(root, entry))
    os.makedirs(os.path.join(root, "proc"), exist_ok=True)
    _mount(libc, "proc", os.path.join(root, "proc"), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    os.chdir(root)
    arch = os.uname().machine
    _ok(libc.syscall(SYS_PIVOT_ROOT[arch], b".", b"."), "pivot_root")
    _ok(libc.umount2(b".", MNT_DETACH), "detaching the old root")
    os.chdir("/")
    pid = os.fork()
    if pid == 0:
        try:
            os.chdir(cfg["cwd"])
            os.execve(cfg["argv"][0], cfg["argv"], cfg["env"])
        finally:
            os._exit(127)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)  # the reproducer's pipes close when it and its children do
    while True:
        try:
            done, status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        if done == pid:
            os.write(status_w, json.dumps({"status": status}).encode())
            os.close(status_w)
    # leftovers are gone; stay until the harness ends the namespace (it kills the targets first)
    signal.pause()


def run_isolated(cfg_path: str) -> int:
    """The reproducer's launcher: unshare, start PID 1, and end the way the reproducer did."""
    with open(cfg_path, encoding="utf-8") as fh:
        cfg = json.load(fh)
    try:
        libc = _libc()
        uid, gid = os.getuid(), os.getgid()
        _ok(libc.unshare(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS), "unshare")
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{INNER_ID} {uid} 1\n")
        _write("/proc/self/gid_map", f"{INNER_ID} {gid} 1\n")
    except OSError as exc:
        sys.stderr.write(f"trace: could not isolate the reproducer (it did not run): {exc}\n")
        return 125
    status_r, status_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(status_r)
        try:
            _init(libc, cfg, status_w)
        except BaseException as exc:  # any failure: the reproducer did not run
            sys.stderr.write(f"trace: could not isolate the reproducer (it did not run): {exc}\n")
            os._exit(125)
        os._exit(0)
    os.close(status_w)
    report = b""
    while chunk := os.read(status_r, 4096):
        report += chunk
    if not report:
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 125
    rc = os.waitstatus_to_exitcode(int(json.loads(report)["status"]))
    if rc < 0:
        signal.signal(-rc, signal.SIG_DFL)
        os.kill(os.getpid(), -rc)
    return rc if rc >= 0 else 128 - rc


def isolated_reproducer(
    python: str, private: str, cfg: dict[str, Any], **popen: Any
) -> subprocess.Popen[bytes]:
    """Start the reproducer (cfg: argv, cwd, env, expose, hide, only) in its own namespaces."""
    cfg = {**cfg, "root": os.path.join(private, "root")}
    os.makedirs(cfg["root"])
    cfg_path = os.path.join(private, "reproducer.json")
    _write(cfg_path, json.dumps(cfg))
    me = os.path.abspath(__file__)
    # an empty environment: the launcher and PID 1 hold nothing naming the build (`target`, `out`)
    return subprocess.Popen([python, "-I", "-S", me, ISOLATED, cfg_path], env={}, **popen)


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
    sockets = os.path.join(tmp, "sockets")
    os.makedirs(sockets)
    sock = os.path.join(sockets, "s")
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
    harness = Harness(private, sock, programs, find_python(tools), pypath)
    harness.start()

    child_env = {
        "TARGET": view,
        "PATH": ":".join([os.path.join(view, "bin"), shims, *tools]),
        "HOME": work,
        "TMPDIR": tmp,
        "TRACE_RUN": env.get("run", "1"),
        "LC_ALL": "C",
    }
    shell = shutil.which("sh", path=":".join(tools)) or "/bin/sh"
    timeout = int(env.get("timeout", "60"))
    # Namespaces of its own (see run_isolated), in a session of its own, so a timeout kills the
    # reproducer and everything it started; the targets run in sessions of their own (the
    # harness starts them, out here) and are killed with it.
    isolation = {
        "argv": [shell, script],
        "cwd": work,
        "env": child_env,
        "expose": [work, view, shims, sockets],
        "hide": [pkg, os.path.realpath(out), out, private, hook],
        "only": [tmp],
    }
    proc = isolated_reproducer(
        python,
        private,
        isolation,
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
    if len(sys.argv) == 3 and sys.argv[1] == ISOLATED:
        sys.exit(run_isolated(sys.argv[2]))
    sys.exit(main())
