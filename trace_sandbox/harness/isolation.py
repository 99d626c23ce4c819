"""The reproducer's own namespaces: a user + PID + mount namespace, a fresh /proc, a root of
its own.

Stdlib only and self-contained (no sibling imports): the harness runs this file by path (its
compiled copy when the harness was byte-compiled: `launcher()`), as the reproducer's launcher
(`python3 -I -S isolation.py --isolated-reproducer CONFIG`), once per reproducer run, so the
launcher imports only what it uses, nothing that pulls in `re` or `enum` (json, signal,
subprocess, shutil would cost more than its own work): its CONFIG is a `marshal` file, and
`_signal` is the C module behind `signal`. A batch of runs in one harness process is served by
ONE launcher process instead (`serving`, `--serve`), which forks the same launcher per run.
"""

from __future__ import annotations

import _signal
import marshal
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from typing import Any

ISOLATED = "--isolated-reproducer"

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


def _unescape(v: str) -> str:
    """A mountinfo field: `\\NNN` (octal) stands for a space, tab, newline or backslash."""
    out, i = [], 0
    while i < len(v):
        code = v[i + 1 : i + 4]
        if v[i] == "\\" and len(code) == 3 and all(c in "01234567" for c in code):
            out.append(chr(int(code, 8)))
            i += 4
        else:
            out.append(v[i])
            i += 1
    return "".join(out)


def _mounts() -> dict[str, str]:
    """mount point -> the mount's root within its file system (this mount namespace)."""
    found: dict[str, str] = {}
    unescape = _unescape

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
            with open(src, "rb") as fh:
                data = fh.read()
            with open(dest, "wb") as fh:
                fh.write(data)
            os.chmod(dest, os.stat(src).st_mode & 0o7777)
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
            os.write(status_w, str(status).encode())
            os.close(status_w)
    # leftovers are gone; stay until the harness ends the namespace (it kills the targets first)
    _signal.pause()


def run_isolated(cfg_path: str) -> int:
    """The reproducer's launcher: unshare, start PID 1, and end the way the reproducer did."""
    with open(cfg_path, "rb") as fh:
        cfg = marshal.load(fh)
    return _launch(cfg)


def _launch(cfg: dict[str, Any], libc: Any = None) -> int:
    try:
        libc = libc or _libc()
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
    rc = os.waitstatus_to_exitcode(int(report))
    if rc < 0:
        _signal.signal(-rc, _signal.SIG_DFL)
        os.kill(os.getpid(), -rc)
    return rc if rc >= 0 else 128 - rc


def isolated_reproducer(
    python: str, private: str, cfg: dict[str, Any], **popen: Any
) -> subprocess.Popen[bytes] | Launched:
    """Start the reproducer (cfg: argv, cwd, env, expose, hide, only) in its own namespaces:
    by the batch's launcher server when one serves this process (`serving`), else by a
    launcher of its own."""
    import subprocess

    cfg = {**cfg, "root": os.path.join(private, "root")}
    os.makedirs(cfg["root"])
    server = _SERVER[-1] if _SERVER else None
    if server is not None and server.python == python:
        return server.launch(cfg, **popen)
    cfg_path = os.path.join(private, "reproducer.cfg")
    with open(cfg_path, "wb") as fh:
        marshal.dump(cfg, fh)
    # an empty environment: the launcher and PID 1 hold nothing naming the build (`target`, `out`)
    return subprocess.Popen([python, "-I", "-S", launcher(), ISOLATED, cfg_path], env={}, **popen)


# --- one launcher serving a batch of runs ----------------------------------------------------
# A batch of runs in one harness process (the variants gate's, trace_sandbox/gates/variant_runs.py)
# would start one launcher interpreter per run: its start-up and imports (ctypes) cost more than
# the rest of the launcher's work. `serving` starts ONE launcher for the batch instead, the same
# program with the same empty environment, which forks a launcher per run: each fork is exactly
# what a launcher of its own would have been (a single-threaded process that unshares, starts
# PID 1 and ends the way the reproducer did), in a session of its own, its stdin, stdout and
# stderr the run's own (passed as SCM_RIGHTS). The server reaps it and reports its wait status.
# Nothing in it names a build: it holds only the configurations it was sent (as each launcher
# holds its own). SERVE is its flag; a request is one SOCK_SEQPACKET message, the marshal'd
# configuration, with four descriptors: stdin, stdout, stderr, and the pipe the server writes
# the launcher's pid ("PID\n") and then its wait status ("STATUS\n") to.

SERVE = "--serve"
_SERVER: list[Server] = []
REQUEST_MAX = 1 << 20


def serve(fd: int) -> int:
    """The server's loop (in the launcher process): until the harness closes its end."""
    import _socket
    import select

    sock = _socket.socket(fileno=fd)
    libc = _libc()  # loaded once: every launcher forked from here has it (ctypes is most of a
    # launcher interpreter's imports)
    children: dict[int, tuple[int, int]] = {}  # pidfd -> (pid, the run's status pipe)
    room = _socket.CMSG_SPACE(4 * 4)
    open_ = True
    while open_ or children:
        ready, _, _ = select.select(([fd] if open_ else []) + list(children), [], [])
        for r in ready:
            if r != fd:
                pid, status_w = children.pop(r)
                os.close(r)
                _, status = os.waitpid(pid, 0)
                _send_line(status_w, status)
                os.close(status_w)
                continue
            msg, ancdata, _, _ = sock.recvmsg(REQUEST_MAX, room)
            fds = [
                int.from_bytes(data[i : i + 4], sys.byteorder, signed=True)
                for level, kind, data in ancdata
                if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS
                for i in range(0, len(data) - len(data) % 4, 4)
            ]
            if not msg:
                open_ = False
                continue
            stdio, status_w = fds[:3], fds[3]
            pid = os.fork()
            if pid == 0:  # the run's launcher
                code = 125
                try:
                    os.setsid()
                    for i, f in enumerate(stdio):
                        os.dup2(f, i)
                    os.closerange(3, 1 << 16)  # the socket, every other run's pipes
                    code = _launch(marshal.loads(msg), libc)
                except BaseException as exc:  # any failure: the reproducer did not run
                    sys.stderr.write(f"trace: could not isolate the reproducer: {exc}\n")
                finally:
                    sys.stderr.flush()
                    os._exit(code)
            for f in stdio:
                os.close(f)
            _send_line(status_w, pid)
            children[os.pidfd_open(pid)] = (pid, status_w)
    return 0


def _send_line(fd: int, value: int) -> None:
    os.write(fd, b"%d\n" % value)


class Launched:
    """A run's launcher started by the server, as much of a subprocess.Popen as the harness uses
    (pid, stdout, stderr, poll, wait): its returncode is the server's report of its wait status."""

    def __init__(self, pid: int, status: Any, stdout: Any, stderr: Any) -> None:
        self.pid, self.stdout, self.stderr = pid, stdout, stderr
        self._status = status
        self.returncode: int | None = None

    def poll(self) -> int | None:
        import select

        if self.returncode is None and select.select([self._status], [], [], 0)[0]:
            return self.wait()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        import select
        import subprocess

        if self.returncode is None:
            if timeout is not None and not select.select([self._status], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(str(self.pid), timeout)
            line = self._status.readline()
            self._status.close()
            self.returncode = os.waitstatus_to_exitcode(int(line)) if line else 125
        return self.returncode


class Server:
    """The harness's end of a launcher server (see above)."""

    def __init__(self, python: str) -> None:
        import threading

        self.python = python
        self.lock = threading.Lock()
        self.sock: Any = None
        self.proc: subprocess.Popen[bytes] | None = None

    def _started(self) -> Any:
        """The server's socket, the process started on the first launch (under `lock`): a
        batch whose runs all go without a launcher (trace's own scripts, direct.py) starts
        none."""
        if self.sock is None:
            import socket
            import subprocess

            self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            fd = theirs.fileno()
            cmd = [self.python, "-I", "-S", launcher(), SERVE, str(fd)]
            self.proc = subprocess.Popen(cmd, env={}, pass_fds=[fd], stdin=subprocess.DEVNULL)
            theirs.close()
        return self.sock

    def launch(self, cfg: dict[str, Any], **popen: Any) -> Launched:
        import socket
        import subprocess

        # what the harness asks of a launcher (isolated_reproducer's callers): these only
        if popen != {
            "stdin": subprocess.DEVNULL,
            "stdout": subprocess.PIPE,
            "stderr": subprocess.PIPE,
            "start_new_session": True,
        }:
            raise ValueError(f"a served launcher takes no such options: {sorted(popen)}")
        msg = marshal.dumps(cfg)
        if len(msg) > REQUEST_MAX:
            raise ValueError("the reproducer's configuration is too large")
        null = os.open(os.devnull, os.O_RDONLY)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        status_r, status_w = os.pipe()
        try:
            with self.lock:
                socket.send_fds(self._started(), [msg], [null, out_w, err_w, status_w])
        finally:
            for f in (null, out_w, err_w, status_w):
                os.close(f)
        status = os.fdopen(status_r, "rb")
        line = status.readline()
        if not line:
            status.close()
            os.close(out_r)
            os.close(err_r)
            raise OSError("the launcher server did not start the reproducer")
        return Launched(int(line), status, os.fdopen(out_r, "rb"), os.fdopen(err_r, "rb"))

    def close(self) -> None:
        with self.lock:
            if self.sock is None or self.proc is None:
                return  # never started
            self.sock.close()  # the server ends once its runs have ended
            proc = self.proc
        proc.wait()


class serving:
    """While active, isolated_reproducer starts every reproducer of this process through ONE
    launcher server (for `python`), not a launcher interpreter per run."""

    def __init__(self, python: str) -> None:
        self.python = python

    def __enter__(self) -> Server:
        server = Server(self.python)
        _SERVER.append(server)
        return server

    def __exit__(self, *exc: object) -> None:
        server = _SERVER.pop()
        server.close()


def launcher() -> str:
    """This file as the launcher runs it: its byte-compiled copy when the harness was compiled
    (templates/lib/sandbox.nix; the interpreter runs a .pyc given as the script
    without compiling anything; a .py script is compiled on every start, once per reproducer
    run), else the source."""
    me = os.path.abspath(__file__)
    tag = sys.implementation.cache_tag
    pyc = os.path.join(os.path.dirname(me), "__pycache__", f"isolation.{tag}.pyc")
    return pyc if tag and os.path.isfile(pyc) else me


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == SERVE:
        sys.exit(serve(int(sys.argv[2])))
    if len(sys.argv) == 3 and sys.argv[1] == ISOLATED:
        code = run_isolated(sys.argv[2])
        # out at once: the launcher holds nothing to flush or finalize (it wrote with os.write
        # and sys.stderr only), and the run waits for its exit
        sys.stderr.flush()
        os._exit(code)
    sys.exit(2)
