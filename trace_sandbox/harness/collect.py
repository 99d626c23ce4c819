"""Waiting for a reproducer run to end (at most its timeout) and reading what it wrote: the
reproducer's launcher (isolation.py), or a direct run of trace's own script (direct.py).

Stdlib only, as the rest of the harness."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import threading
import time

from .capture import COLLECT_GRACE, Capture, tee
from .direct import DirectRun

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .isolation import Launched
    from .targets import Harness


def exited_within(proc: subprocess.Popen[bytes] | Launched | DirectRun, timeout: float) -> bool:
    """Whether `proc` exits within `timeout` s. Woken by the exit itself (a pidfd), not by
    Popen.wait(timeout=)'s polling, which sleeps up to 50 ms between looks: every reproducer run
    paid that. Without pidfd_open (an old kernel), the polling wait."""
    if isinstance(proc, DirectRun):
        return proc.exited_within(timeout)
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return True
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
    finally:
        os.close(fd)
    return bool(ready) or proc.poll() is not None


def collect(
    proc: subprocess.Popen[bytes] | Launched | DirectRun, harness: Harness, timeout: int
) -> tuple[int, bytes, bytes, bool]:
    """Wait for the reproducer (at most `timeout` s), then end what it left running in its
    process group, and read its output (capped like a target's). Returns (returncode, stdout,
    stderr, timed_out). A process that left the group (`setsid`) and keeps the pipes open cannot
    hold the run: the pipes are drained for COLLECT_GRACE seconds at most."""
    assert proc.stdout is not None and proc.stderr is not None
    caps = (Capture(), Capture())
    readers = [
        threading.Thread(target=tee, args=(os.dup(f.fileno()), None, c), daemon=True)
        for f, c in zip((proc.stdout, proc.stderr), caps, strict=True)
    ]
    for t in readers:
        t.start()
    timed_out = not exited_within(proc, timeout)
    # targets first (still running: the harness ends them), then the reproducer's leftovers:
    # killing those first could end a target's input and let it finish by timing
    harness.kill_targets("timed-out" if timed_out else "killed-by-harness")
    if isinstance(proc, DirectRun):
        proc.end()  # no further line starts (a shell run by the harness's own thread)
    else:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)  # the reproducer (on timeout) and its leftovers
    rc = proc.wait()
    deadline = time.monotonic() + COLLECT_GRACE
    for t in readers:
        t.join(max(0.0, deadline - time.monotonic()))
    proc.stdout.close()
    proc.stderr.close()
    return rc, caps[0].value(), caps[1].value(), timed_out
