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
for reviewers. An invocation's `spans` are the OpenTelemetry spans the target exported to the
harness's loopback OTLP receiver (otlp.py; docs/telemetry.md). It is deterministic: output is
normalised (addresses, pids, temp paths), spans keep no times or ids, and the record holds no
timings. This derivation always succeeds; the record says how the target ended.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys

from .capture import TAIL_CHARS, Capture, normalise, signal_name
from .collect import collect
from .direct import DirectFallback, DirectRun, parse, shell_environment
from .faults import sanitizer_report
from .isolation import isolated_reproducer, serving
from .otlp import start_receiver
from .redaction import redact, taint_fragments
from .targets import (
    Harness,
    canonical_key,
    invocation_failed,
    invocation_record,
)
from .targetview import (
    AUDIT_HOOK,
    find_python,
    make_view,
    python_paths,
    store_name,
    write_wrapper,
)

# typing and collections.abc only for the type checker (isolation.py): a reproducer run's
# interpreter imports what it uses
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from .otlp import Receiver

# re-exported: the tests and the coverage gate use them through this module (the coverage gate
# appends its tracer to AUDIT_HOOK here: main() reads it from this module's globals)
__all__ = [
    "AUDIT_HOOK",
    "Capture",
    "DirectFallback",
    "canonical_key",
    "main",
    "normalise",
    "python_paths",
    "sanitizer_report",
    "serving",
    "store_name",
]


# The sanitizers' runtime options that `symbolize=0` turns symbolization off in (a common flag of
# every sanitizer runtime; the last value given wins, so it overrides the reproducer's own).
SANITIZER_OPTIONS = (
    "ASAN_OPTIONS",
    "UBSAN_OPTIONS",
    "MSAN_OPTIONS",
    "TSAN_OPTIONS",
    "LSAN_OPTIONS",
)


def main() -> int:
    run(os.environ)
    return 0


def run(env: Mapping[str, str]) -> None:
    """One reproducer run, configured by `env` (the derivation's environment, see above), its
    record written to `$out/outcome.json`. Callable in-process: a batch of variant runs
    (trace_sandbox/gates/variant_runs.py) calls it once per variant, each with its own `out` and
    TMPDIR, several at a time; nothing here reads or changes process-wide state.

    `symbolize=0` in `env`: the targets' sanitizer reports are left unsymbolized (frames as
    module+offset: no function, file or line). The record's verdict fields (how each invocation
    ended, the report's tool and kind) are the same; the run costs far less when the target
    crashes (symbolizing reads the DWARF of the program and of the sanitizer runtime). For runs
    whose crashes are only counted (the pre-fix side of the variants), never for a run whose
    frames are evidence (the PoC's runs: the fault-site gate reads them)."""
    out, pkg = env["out"], os.path.realpath(env["target"])
    tmp = env.get("TMPDIR", "/tmp")
    work, view, hook, shims, sockets = (
        os.path.join(tmp, d) for d in ("work", "target", "hook", "shims", "sockets")
    )
    private = _private_directory(tmp)
    python = os.path.realpath(sys.executable)
    script = _working_directory(env, work)
    tools = [os.path.join(t, "bin") for t in env.get("tools", "").split()]
    receiver = start_receiver()  # the targets' own spans (otlp.py); None: no loopback here
    harness = _start_harness(env, pkg, (private, view, hook, shims, sockets), tools, receiver)
    timeout = int(env.get("timeout", "60"))
    # Namespaces of its own (see run_isolated), in a session of its own, so a timeout kills the
    # reproducer and everything it started; the targets run in sessions of their own (the
    # harness starts them, out here) and are killed with it.
    isolation = {
        "argv": [shutil.which("sh", path=":".join(tools)) or "/bin/sh", script],
        "cwd": work,
        "env": _reproducer_env(env, (work, view, shims, tmp), tools),
        "expose": [work, view, shims, sockets],
        # a batch of variant runs (trace_sandbox/gates/variant_runs.py) keeps more from the
        # reproducer: `hide`, the records the other runs wrote; `only`, the directory holding
        # every run's own TMPDIR (it shows this run's alone, not the others' at work beside it)
        "hide": [pkg, os.path.realpath(out), out, private, hook, *env.get("hide", "").split()],
        "only": [tmp, *env.get("only", "").split()],
    }
    # trace's own variant scripts (`direct=1`) without the shell and wrappers (direct.py)
    proc = _direct(env, script, isolation, harness, (view, shims)) or isolated_reproducer(
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
    if receiver is not None:
        receiver.stop()
    if isinstance(proc, DirectRun) and proc.fallback is not None:
        raise DirectFallback(proc.fallback)  # nothing written: the caller runs it the usual way
    subs = [(private, "<trace>"), (work, "<work>"), (view, "$TARGET"), (pkg, "<target>")]
    subs.append((tmp, "<tmp>"))
    record = _record(env, (rc, stdout_b, stderr_b, timed_out, timeout), entries, subs)
    os.makedirs(out)
    with open(os.path.join(out, "outcome.json"), "w", encoding="utf-8") as fh:
        json.dump(record, fh, indent=2, sort_keys=True)
        fh.write("\n")


def _direct(
    env: Mapping[str, str],
    script: str,
    isolation: dict[str, Any],
    harness: Harness,
    dirs: tuple[str, str],
) -> DirectRun | None:
    """A direct run of `script` (direct.py) when the caller asks for one (`direct=1`: trace
    wrote the script) and the script is of the form that allows it; else None."""
    if env.get("direct") != "1":
        return None
    with open(script, "rb") as fh:
        lines = parse(fh.read())
    if lines is None:
        return None
    cwd = isolation["cwd"]
    shell_env = shell_environment(isolation["argv"][0], isolation["env"], cwd)
    if shell_env is None:
        return None
    return DirectRun(lines, harness, shell_env, (cwd, *dirs))


def _private_directory(tmp: str) -> str:
    """The run's private directory in `tmp` (the audit logs, the reproducer's root and
    configuration; hidden from the reproducer), made as tempfile.mkdtemp makes one (mode 0o700,
    a random name, another on a clash) without importing tempfile (and `random`) into every
    run's interpreter. Its name shows nowhere: a record says `<trace>` for it."""
    while True:
        path = os.path.join(tmp, "trace-" + os.urandom(6).hex())
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        return path


def _start_harness(
    env: Mapping[str, str],
    pkg: str,
    dirs: tuple[str, str, str, str, str],
    tools: list[str],
    receiver: Receiver | None,
) -> Harness:
    """The harness proper (targets.py), serving on its socket in `sockets`: the package's view
    in `view` (its programs' wrappers), the python shims in `shims` and their audit hook in
    `hook`, the targets' sanitizer options (`symbolize`); `dirs`: (private, view, hook, shims,
    sockets)."""
    private, view, hook, shims, sockets = dirs
    python = os.path.realpath(sys.executable)
    os.makedirs(sockets)
    sock = os.path.join(sockets, "s")
    programs = make_view(pkg, view, python, sock)
    pypath = _python_hooks(pkg, hook, shims, python, sock)
    unsymbolized = env.get("symbolize") == "0"
    options = {var: "symbolize=0" for var in SANITIZER_OPTIONS} if unsymbolized else {}
    harness = Harness(private, sock, programs, find_python(tools), pypath, options, receiver)
    harness.start()
    return harness


def _reproducer_env(
    env: Mapping[str, str], dirs: tuple[str, str, str, str], tools: list[str]
) -> dict[str, str]:
    """The reproducer's whole environment (`dirs`: its working directory, the package's view,
    the python shims, TMPDIR): nothing of the derivation's own."""
    work, view, shims, tmp = dirs
    return {
        "TARGET": view,
        "PATH": ":".join([os.path.join(view, "bin"), shims, *tools]),
        "HOME": work,
        "TMPDIR": tmp,
        "TRACE_RUN": env.get("run", "1"),
        "LC_ALL": "C",
    }


def _python_hooks(pkg: str, hook: str, shims: str, python: str, sock: str) -> str:
    """The audit hook (AUDIT_HOOK, read from this module when the run starts: the coverage gate
    appends its tracer to it) in `hook`, the `python3`/`python` shims in `shims`; the targets'
    PYTHONPATH."""
    os.makedirs(hook)
    with open(os.path.join(hook, "sitecustomize.py"), "w", encoding="utf-8") as fh:
        fh.write(AUDIT_HOOK.format(pkg=pkg))
    os.makedirs(shims)
    for name in ("python3", "python"):
        write_wrapper(os.path.join(shims, name), python, sock, name)
    return ":".join([hook, *python_paths(pkg)])


def _working_directory(env: Mapping[str, str], work: str) -> str:
    """The reproducer's working directory: its data copied in (named as in the store, hash
    removed), the script beside them; the script's path."""
    os.makedirs(work)
    for path in env.get("data", "").split():
        dest = os.path.join(work, store_name(path))
        if os.path.isdir(path):
            shutil.copytree(path, dest)
        else:
            shutil.copyfile(path, dest)
    script = os.path.join(work, ".trace-reproducer.sh")
    shutil.copyfile(env["script"], script)
    return script


def _record(
    env: Mapping[str, str],
    ended: tuple[int, bytes, bytes, bool, int],
    entries: list[dict[str, Any]],
    subs: list[tuple[str, str]],
) -> dict[str, Any]:
    """The run's trace.run/v1 record: the target invocations the harness saw (`entries`) and the
    reproducer's own end (`ended`: exit status, stdout, stderr, timed out, timeout), normalised
    (`subs`) and redacted."""
    rc, stdout_b, stderr_b, timed_out, timeout = ended
    # redacted before anything is cut or kept (redaction.py): a tail never starts inside a
    # secret a rule would have matched whole; the digests are of the streams as written
    fragments = taint_fragments(env.get("taint"))
    stdout = normalise(stdout_b.decode("utf-8", "replace"), subs)
    stderr = normalise(stderr_b.decode("utf-8", "replace"), subs)
    if timed_out:
        stderr += f"\n[trace: reproducer killed after {timeout} s]\n"
    digests = {
        "stdout_sha256": hashlib.sha256(stdout.encode()).hexdigest(),
        "stderr_sha256": hashlib.sha256(stderr.encode()).hexdigest(),
    }
    stdout, stderr = redact(stdout, fragments), redact(stderr, fragments)
    invocations = sorted(
        (invocation_record(e, subs, fragments) for e in entries), key=canonical_key
    )
    reports = [i["sanitizer"] for i in invocations if i["sanitizer"]]
    return {
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
        **digests,
        "stdout_tail": stdout[-TAIL_CHARS:],
        "stderr_tail": stderr[-TAIL_CHARS:],
    }
