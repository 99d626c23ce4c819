"""The harness proper: it runs target programs on behalf of the wrappers, remembers how each
ended, and turns that into the run record's invocations (canonical order).

Stdlib only. An invocation record is a plain dict: new fields may be added (consumers must
ignore what they do not know); `engine/build_records.py` `Invocation` types it engine-side."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import threading

from .capture import (
    COLLECT_GRACE,
    INVOCATION_TAIL_CHARS,
    ORACLE_TEXT_CHARS,
    Capture,
    normalise,
    signal_name,
    tee,
)
from .faults import frames, lifetime_frames, sanitizer_report
from .otlp import map_strings
from .redaction import redact, redact_fragments

TYPE_CHECKING = False  # typing only for the type checker (isolation.py)
if TYPE_CHECKING:
    from typing import Any

    from .otlp import Receiver

AUDIT_VAR = "TRACE_TARGET_LOG"
DROPPED_ENV = ("LD_", "PYTHON", "DYLD_")
STDIN_CAP = 1 << 16  # stdin bytes a record holds (the PoC's input, for the variants gate)


class Stdin:
    """What a target got on stdin, for the record. A regular file (`< file`) is read with
    pread: the target gets the very descriptor, its offset untouched. A pipe is copied through
    a pipe of the harness; once the target stops reading, the rest is still drained (up to
    STDIN_CAP, then the writer's end is closed as a real pipe's would be), so what is recorded
    does not depend on when the target exited. A terminal or /dev/null passes through
    unrecorded. Past STDIN_CAP bytes only `complete: false` is recorded (no partial bytes)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd  # what the target gets
        self.data: bytes | None = None
        self.over = False
        self.thread: threading.Thread | None = None
        mode = os.fstat(fd).st_mode
        if stat.S_ISREG(mode):
            with contextlib.suppress(OSError):
                self.data = os.pread(fd, STDIN_CAP + 1, os.lseek(fd, 0, os.SEEK_CUR))
                self.over = len(self.data) > STDIN_CAP
        elif stat.S_ISFIFO(mode):
            r, w = os.pipe()
            self.fd = r
            self.thread = threading.Thread(target=self._copy, args=(os.dup(fd), w), daemon=True)

    def _copy(self, src: int, dest: int | None) -> None:
        kept: list[bytes] = []
        size = 0
        try:
            while True:
                chunk = os.read(src, 65536)
                if not chunk:
                    break
                size += len(chunk)
                if size <= STDIN_CAP:
                    kept.append(chunk)
                view = memoryview(chunk)
                try:
                    while dest is not None and view:
                        view = view[os.write(dest, view) :]
                except OSError:  # the target stopped reading: drain what is left, up to the cap
                    if dest is not None:
                        os.close(dest)
                    dest = None
                if dest is None and size > STDIN_CAP:
                    break
        except OSError:
            pass
        finally:
            os.close(src)
            if dest is not None:
                os.close(dest)
        self.over = size > STDIN_CAP
        self.data = b"".join(kept)

    def start(self) -> None:
        if self.thread is not None:
            self.thread.start()
            os.close(self.fd)  # the target holds its own copy now

    def record(self) -> dict[str, Any] | None:
        if self.thread is not None:
            self.thread.join(COLLECT_GRACE)
            if self.thread.is_alive():
                return {"complete": False, "size": None, "sha256": None, "b64": None}
        if self.data is None:
            return None
        if self.over:
            return {"complete": False, "size": None, "sha256": None, "b64": None}
        return {
            "complete": True,
            "size": len(self.data),
            "sha256": hashlib.sha256(self.data).hexdigest(),
            "b64": base64.b64encode(self.data).decode(),
        }


def request_of(raw: bytes) -> dict[str, Any]:
    """A wrapper's request (targetview.WRAPPER): NUL-separated name, argv[0], cwd, the number
    of arguments, the arguments, the environment's KEY=VALUE entries. Bytes that are not UTF-8
    come back as they were (os.fsdecode), so the program gets exactly what the wrapper got."""
    fields = [os.fsdecode(f) for f in raw.split(b"\0")]
    if len(fields) < 4 or not fields[3].isdigit() or len(fields) < 4 + int(fields[3]):
        raise ValueError("a malformed request")
    end = 4 + int(fields[3])
    env = dict(e.split("=", 1) for e in fields[end:] if "=" in e)
    name, argv0, cwd = fields[:3]
    return {"name": name, "argv0": argv0, "cwd": cwd, "args": fields[4:end], "env": env}


def reply_of(rc: int) -> bytes:
    """How the wrapper is to end: as the program did (`exit N`, or `signal N` when it died of
    signal N)."""
    return f"signal {-rc}".encode() if rc < 0 else f"exit {rc}".encode()


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise OSError("connection closed early")
        buf += chunk
    return buf


class Harness:
    """Runs target programs on behalf of wrappers and shims, and remembers how each ended."""

    def __init__(
        self,
        private: str,
        sock: str,
        programs: dict[str, str],
        python: str,
        pypath: str,
        options: dict[str, str] | None = None,
        receiver: Receiver | None = None,
    ) -> None:
        self.private = private
        # the targets' own spans (otlp.py): each invocation exports to it under a token of its own
        self.receiver = receiver
        self.tokens: dict[int, str | None] = {}
        # appended to the targets' environment variables of these names (`VAR=...:option`):
        # the sanitizers' runtime options (the last value of a flag wins)
        self.options = dict(options or {})
        self.sock = sock
        self.programs = programs
        self.python = python
        self.pypath = pypath
        self.lock = threading.Lock()
        self.seq = 0
        self.entries: list[tuple[int, dict[str, Any]]] = []
        self.live: dict[int, subprocess.Popen[bytes]] = {}
        self.killed: dict[int, str] = {}  # seq -> why the harness ended it
        # set by kill_targets: a target that registers afterwards (its wrapper's request was
        # still in flight) is ended at once, for the same reason, instead of running on
        self.ending: str | None = None
        self.handlers: list[threading.Thread] = []
        self.stopped = threading.Event()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.sock)
        self.listener.listen(64)
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:  # stop() shut the listener down
                return
            conn.settimeout(None)
            t = threading.Thread(target=self._handle, args=(conn,), daemon=True)
            with self.lock:
                self.handlers.append(t)
            t.start()

    def _env(self, env: dict[str, str], log: str, token: str | None = None) -> dict[str, str]:
        clean = {k: v for k, v in env.items() if not k.startswith(DROPPED_ENV) and k != AUDIT_VAR}
        clean["PYTHONPATH"] = self.pypath
        clean[AUDIT_VAR] = log
        if self.receiver is not None and token is not None:  # the reproducer's own are replaced
            clean = self.receiver.with_env(clean, token)
        for var, option in self.options.items():
            clean[var] = f"{clean[var]}:{option}" if clean.get(var) else option
        return clean

    def _handle(self, conn: socket.socket) -> None:
        fds: list[int] = []
        try:
            _, fds, _, _ = socket.recv_fds(conn, 1, 3)
            size = int.from_bytes(_recv_exact(conn, 8), "big")
            req = request_of(_recv_exact(conn, size))
            name = str(req["name"])
            python = name in ("python", "python3")
            real = self.python if python else self.programs.get(name)
            if real is None or len(fds) != 3:
                conn.sendall(reply_of(127))
                return
            token = self.receiver.token() if self.receiver is not None else None
            with self.lock:
                seq = self.seq
                self.seq += 1
                self.tokens[seq] = token
            log = os.path.join(self.private, f"audit-{seq}.jsonl")
            out, err = Capture(), Capture()
            broken = threading.Event()
            stdin = Stdin(fds[0])
            proc = subprocess.Popen(
                [str(req["argv0"]), *[str(a) for a in req["args"]]],
                executable=real,
                cwd=str(req["cwd"]),
                env=self._env({str(k): str(v) for k, v in req["env"].items()}, log, token),
                stdin=stdin.fd,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
            with self.lock:
                self.live[seq] = proc
                late = self.ending
                if late is not None:
                    self.killed.setdefault(seq, late)
            if late is not None:
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
            assert proc.stdout is not None and proc.stderr is not None
            tees = [
                threading.Thread(
                    target=tee, args=(os.dup(proc.stdout.fileno()), fds[1], out, broken)
                ),
                threading.Thread(
                    target=tee, args=(os.dup(proc.stderr.fileno()), fds[2], err, broken)
                ),
            ]
            proc.stdout.close()
            proc.stderr.close()
            stdin.start()
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
            self._keep(seq, req, rc, (killed, ended), log, (out, err, stdin))
            conn.sendall(reply_of(rc))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            sys.stderr.write(f"trace harness: a target request failed: {exc}\n")
        finally:
            for fd in fds:
                os.close(fd)
            conn.close()

    def _keep(
        self,
        seq: int,
        req: dict[str, Any],
        rc: int,
        ends: tuple[str | None, str | None],
        log: str,
        streams: tuple[Capture, Capture, Stdin],
    ) -> None:
        """Record invocation `seq` as a target invocation: a program of the table, or a python
        that opened the package's modules (`log`: its audit list); `ends`: (the harness's own
        kill, how the harness ended it)."""
        name, python = str(req["name"]), str(req["name"]) in ("python", "python3")
        killed, ended = ends
        out, err, stdin = streams
        opened = read_opened(log)
        if python and not opened:
            return
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
            "stdin": stdin.record(),
        }
        with self.lock:
            self.entries.append((seq, entry))

    def kill_targets(self, why: str = "killed-by-harness") -> None:
        """End every target still running, and any that registers later; its record says the
        harness ended it (`why`: the first reason given wins)."""
        with self.lock:
            if self.ending is None:
                self.ending = why
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
        # wakes the blocking accept() at once: it fails on a shut-down listener (a listener
        # with a timeout, polled for `stopped`, cost every run up to that timeout here)
        self.listener.shutdown(socket.SHUT_RDWR)
        self.thread.join()
        self.listener.close()
        self.kill_targets()
        with self.lock:
            handlers = list(self.handlers)
        for t in handlers:
            t.join()
        with self.lock:
            entries = sorted(self.entries, key=lambda x: x[0])
        for seq, entry in entries:
            found = self.receiver.take(self.tokens.get(seq)) if self.receiver else ([], 0)
            entry["spans"], entry["spans_dropped"] = found
        return [e for _, e in entries]


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


def invocation_record(
    entry: dict[str, Any],
    subs: list[tuple[str, str]],
    fragments: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """One trace.run/v1 invocation: how the target ended, its own sanitizer report, its output
    (redacted before it is cut, kept or hashed: redaction.py; a variant's arguments lose the
    fragments of its PoC's secrets, the PoC's own stay as run: the variants gate re-runs them)."""
    stdout = normalise(entry["stdout"].decode("utf-8", "replace"), subs)
    stderr = normalise(entry["stderr"].decode("utf-8", "replace"), subs)
    report = sanitizer_report(stderr)  # the whole stream, before it is cut: deterministic
    frame_list = frames(stderr, entry.get("kind") == "python")
    lifetime = lifetime_frames(stderr) if report else {}
    # the digests are of the whole stream as the target wrote it (a golden file compares)
    digests = {
        "stdout_sha256": hashlib.sha256(stdout.encode()).hexdigest(),
        "stderr_sha256": hashlib.sha256(stderr.encode()).hexdigest(),
    }
    stdout, stderr = redact(stdout, fragments), redact(stderr, fragments)
    record = {k: v for k, v in entry.items() if k not in ("stdout", "stderr")}
    stdin = record.get("stdin")
    if fragments and isinstance(stdin, dict) and isinstance(stdin.get("b64"), str):
        raw = base64.b64decode(stdin["b64"]).decode("utf-8", "replace")
        if redact_fragments(raw, fragments) != raw:  # a variant's stdin holding a PoC secret
            record["stdin"] = {**stdin, "b64": None}
    record["args"] = [redact_fragments(normalise(str(a), subs), fragments) for a in entry["args"]]
    record["sanitizer"] = report
    record["stdout_tail"] = stdout[-INVOCATION_TAIL_CHARS:]
    record["stderr_tail"] = stderr[-INVOCATION_TAIL_CHARS:]
    # what the declared oracles read: the streams as captured (normalised; capped), the stdout's
    # digest (golden files) and where the target failed (the fault-site gate)
    record["stdout"] = keep_text(stdout)
    record["stderr"] = keep_text(stderr)
    record.update(digests)
    record["frames"] = frame_list
    # a lifetime bug's "freed by" / "previously allocated by" stacks ({} for any other run: the
    # record always has the fields the verify result's model has, so the two compare equal)
    record["lifetime_frames"] = lifetime
    # its own OpenTelemetry spans (otlp.py), their strings normalised and redacted like its output
    record["spans"] = map_strings(
        entry.get("spans", []), lambda t: redact_fragments(normalise(t, subs), fragments)
    )
    record["spans_dropped"] = entry.get("spans_dropped", 0)
    return record


def keep_text(text: str) -> str:
    """A stream as the record keeps it: whole up to ORACLE_TEXT_CHARS, else its head and tail."""
    if len(text) <= ORACLE_TEXT_CHARS:
        return text
    half = ORACLE_TEXT_CHARS // 2
    skipped = len(text) - 2 * half
    return f"{text[:half]}\n[trace: {skipped} characters omitted]\n{text[-half:]}"


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
