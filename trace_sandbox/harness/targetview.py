"""$TARGET: the reproducer's view of the package, and the wrappers and hook that hand target
invocations to the harness.

Stdlib only. Nothing in the view links or names the package's store path (it is rewritten to a
fixed path of the same length), so the reproducer cannot tell the pre-fix build from the
post-fix one by it.
"""

from __future__ import annotations

import os
import re
import shutil
import sys

HIDDEN_HASH = "0" * 32

# A wrapper runs once per target invocation, so it starts as little as it can: the C modules
# `posix` (already loaded at start-up: `os` is not, without site) and `_socket`; no `socket`,
# `signal`, `json`, and no `array`, whose import loads `collections` (each costs more than the
# rest of the wrapper's run). The request is NUL-separated bytes (argv, cwd and environment are
# C strings, which hold no NUL): name, argv[0], cwd, the number of arguments, the arguments,
# then the environment's KEY=VALUE entries; the reply is `exit N` or `signal N` (request_of and
# REPLY_* in targets.py read and write them). The descriptors go as SCM_RIGHTS (C ints, native
# order). It ends with `_exit`: nothing of it is buffered, and finalizing the interpreter would
# only delay the reproducer.
WRAPPER = """#!{python} -IS
import _socket, posix, sys
SOCK, NAME = {sock!r}, {name!r}
fds = []
for fd in (0, 1, 2):
    try:
        posix.fstat(fd)
        fds.append(fd)
    except OSError:
        fds.append(posix.open("/dev/null", posix.O_RDWR))
s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
try:
    enc, errors = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()
    argv = [a.encode(enc, errors) for a in sys.argv]
    fields = [NAME.encode(), argv[0], posix.getcwdb(), b"%d" % (len(argv) - 1), *argv[1:]]
    fields += [k + b"=" + v for k, v in posix.environ.items()]
    req = b"\\0".join(fields)
    s.connect(SOCK)
    rights = b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in fds)
    s.sendmsg([b"F"], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, rights)])
    s.sendall(len(req).to_bytes(8, "big") + req)
    reply = b""
    while True:
        chunk = s.recv(4096)
        if not chunk:
            break
        reply += chunk
    kind, _, value = reply.partition(b" ")
    code = int(value)
except (OSError, ValueError) as exc:
    sys.stderr.write("trace: the target could not be run: %s\\n" % exc)
    sys.stderr.flush()
    posix._exit(127)
if kind == b"signal":
    import _signal
    try:
        _signal.signal(code, _signal.SIG_DFL)
    except (OSError, ValueError):
        pass  # SIGKILL, SIGSTOP: already the default
    posix.kill(posix.getpid(), code)
    posix._exit(128 + code)
posix._exit(code)
"""

# sitecustomize for python processes: list the package files they open (module imports) into
# the per-invocation file the harness names in $TRACE_TARGET_LOG, one JSON string a line
# (targets.py `read_opened`). Kept a str.format template that defines _PKG and imports only
# os/sys (loaded at start-up anyway): the coverage gate appends its tracer to it. It runs in
# every Python target process, so it imports no `json`: that import (and the `re` it loads)
# cost about as much CPU as the rest of a small target's start-up (issue 30: a pager calibration
# row starts ~4,700 of them); `_trace_json` writes the same JSON string by hand.
AUDIT_HOOK = """import os, sys
_PKG, _SEEN = {pkg!r}, set()
_LOG = os.environ.pop("TRACE_TARGET_LOG", None)
def _trace_json(text):
    out = ['"']
    for ch in text:
        n = ord(ch)
        if 0x20 <= n < 0x7F and ch != '"' and ch != "\\\\":
            out.append(ch)
        elif n > 0xFFFF:
            n -= 0x10000
            out.append("\\\\u%04x\\\\u%04x" % (0xD800 | n >> 10, 0xDC00 | n & 0x3FF))
        else:
            out.append("\\\\u%04x" % n)
    out.append('"')
    return "".join(out)
def _trace_hook(event, args):
    if _LOG is None or event != "open" or not isinstance(args[0], str):
        return
    path = args[0]
    if not path.startswith(_PKG + "/") or path in _SEEN:
        return
    _SEEN.add(path)
    fd = os.open(_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.write(fd, (_trace_json(path[len(_PKG) + 1:]) + "\\n").encode())
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


def find_python(tools: list[str]) -> str:
    for d in tools:
        candidate = os.path.join(d, "python3")
        if os.path.exists(candidate):
            return os.path.realpath(candidate)
    return os.path.realpath(sys.executable)
