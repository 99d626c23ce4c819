"""Run one reproducer against one build, inside the Nix sandbox, and record how it ended.

Stdlib only: it runs under the package set's python3 in the build sandbox. Inputs come from the
derivation's environment: `target` (the package's store path), `script` (the reproducer),
`data` (space-separated store paths copied into the working directory), `side`, `run`,
`tools` (bin directories put on the reproducer's PATH), `timeout` (seconds) and `out`.

The reproducer sees `$TARGET`: a view of the package whose `bin/*` are wrappers that log every
invocation and how it ended, and `PYTHONPATH` with an audit hook that logs every file of the
package Python opens (imports). That log is the proof the target ran. The record is written to
`$out/outcome.json` and is deterministic: output is normalised (addresses, pids, temp paths) and
carries no timings. This derivation always succeeds; the record says how the target ended.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys

TAIL_CHARS = 4000
SANITIZER_RE = re.compile(r"ERROR: (\w+Sanitizer): ([A-Za-z][\w-]*)")

WRAPPER = """#!{python} -IS
import json, os, signal, sys
REAL, NAME, LOG = {real!r}, {name!r}, {log!r}
rc = os.spawnv(os.P_WAIT, REAL, [sys.argv[0], *sys.argv[1:]])
sig = -rc if rc < 0 else None
entry = {{"target": NAME, "exit_code": None if sig else rc,
          "signal": signal.Signals(sig).name if sig else None}}
fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
os.write(fd, (json.dumps(entry, sort_keys=True) + "\\n").encode())
os.close(fd)
if sig:
    signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
sys.exit(rc)
"""

AUDIT_HOOK = """import json, os, sys
_PKG, _LOG, _SEEN = {pkg!r}, {log!r}, set()
def _trace_hook(event, args):
    if event != "open" or not isinstance(args[0], str):
        return
    path = args[0]
    if not path.startswith(_PKG + "/") or path in _SEEN:
        return
    _SEEN.add(path)
    entry = {{"target": path[len(_PKG) + 1:], "exit_code": None, "signal": None}}
    fd = os.open(_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, (json.dumps(entry, sort_keys=True) + "\\n").encode())
    os.close(fd)
sys.addaudithook(_trace_hook)
"""


def store_name(path: str) -> str:
    """`/nix/store/<hash>-crash.txt` -> `crash.txt`."""
    base = os.path.basename(path.rstrip("/"))
    return base.split("-", 1)[1] if re.match(r"^[0-9a-z]{32}-", base) else base


def make_view(pkg: str, view: str, log: str, python: str) -> None:
    """$TARGET: the package with every bin/* replaced by a logging wrapper."""
    os.makedirs(view)
    for entry in sorted(os.listdir(pkg)):
        src = os.path.join(pkg, entry)
        if entry != "bin" or not os.path.isdir(src):
            os.symlink(src, os.path.join(view, entry))
            continue
        os.makedirs(os.path.join(view, "bin"))
        for prog in sorted(os.listdir(src)):
            wrapper = os.path.join(view, "bin", prog)
            text = WRAPPER.format(
                python=python, real=os.path.join(src, prog), name=f"bin/{prog}", log=log
            )
            with open(wrapper, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.chmod(wrapper, 0o755)


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


def read_invocations(log: str) -> list[dict[str, object]]:
    if not os.path.exists(log):
        return []
    with open(log, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def main() -> int:
    env = os.environ
    out, pkg = env["out"], os.path.realpath(env["target"])
    tmp = env.get("TMPDIR", "/tmp")
    work, view, hook = (os.path.join(tmp, d) for d in ("work", "target", "hook"))
    log = os.path.join(tmp, "trace-invocations.jsonl")
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
    make_view(pkg, view, log, python)
    os.makedirs(hook)
    with open(os.path.join(hook, "sitecustomize.py"), "w", encoding="utf-8") as fh:
        fh.write(AUDIT_HOOK.format(pkg=pkg, log=log))

    tools = [os.path.join(t, "bin") for t in env.get("tools", "").split()]
    child_env = {
        "TARGET": view,
        "PATH": ":".join([os.path.join(view, "bin"), *tools]),
        "PYTHONPATH": ":".join([hook, *python_paths(pkg)]),
        "HOME": work,
        "TMPDIR": tmp,
        "TRACE_SIDE": env["side"],
        "TRACE_RUN": env["run"],
        "LC_ALL": "C",
    }
    shell = shutil.which("sh", path=child_env["PATH"]) or "/bin/sh"
    timeout = int(env.get("timeout", "60"))
    timed_out = False
    # A session of its own, so a timeout kills the reproducer and everything it started.
    proc = subprocess.Popen(
        [shell, script],
        cwd=work,
        env=child_env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        stdout_b, stderr_b = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        stdout_b, stderr_b = proc.communicate()
    rc = proc.returncode

    subs = [(work, "<work>"), (view, "$TARGET"), (pkg, "<target>"), (tmp, "<tmp>")]
    stdout = normalise(stdout_b.decode("utf-8", "replace"), subs)
    stderr = normalise(stderr_b.decode("utf-8", "replace"), subs)
    if timed_out:
        stderr += f"\n[trace: reproducer killed after {timeout} s]\n"
    invocations = read_invocations(log)
    signal_name = signal.Signals(-rc).name if rc < 0 else None
    if signal_name is None:
        # A shell reports a child killed by signal N as exit 128+N: take the target's own signal.
        killed = [i["signal"] for i in invocations if i.get("signal")]
        if killed and rc != 0:
            signal_name = str(killed[-1])
    match = SANITIZER_RE.search(stderr) or SANITIZER_RE.search(stdout)
    record = {
        "schema": "trace.run/v1",
        "side": env["side"],
        "run": int(env["run"]),
        "build": "ok",
        "target_ran": bool(invocations),
        "invocations": invocations,
        "exit_code": rc if rc >= 0 else None,
        "signal": signal_name,
        "sanitizer": {"tool": match.group(1), "kind": match.group(2)} if match else None,
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
