"""Children that a test interrupts with SIGINT (Ctrl-C) get SIGINT's default disposition back.

A shell without job control starts a background job (`./scripts/test &` in a script, CI runners)
with SIGINT and SIGQUIT ignored, and an ignored signal stays ignored across fork and exec: a
Python child then installs no KeyboardInterrupt handler and a test's Ctrl-C never reaches it.
Restored in the child before exec, the child starts as it would from a terminal (Python installs
its own handler over the default), however pytest itself was started."""

from __future__ import annotations

import signal


def sigint_default() -> None:
    """`preexec_fn` for subprocess.Popen: SIGINT back to SIG_DFL in the child."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
