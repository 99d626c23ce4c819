"""Suite-wide hooks."""

from __future__ import annotations

import os
import tempfile

import pytest

# The suite runs on no binary cache, whatever the machine's configuration says: no trace machine
# config (engine/machine.py), and Nix's own substituters empty. Tests of caches and
# builders pass their own settings explicitly (tests/test_scale_*.py).
os.environ["TRACE_MACHINE_CONFIG"] = ""
os.environ["NIX_CONFIG"] = os.environ.get("NIX_CONFIG", "") + "\nsubstituters =\n"
# The fork verdict memo's key (engine/fork/memo.py): one for the suite, never the user's.
os.environ["TRACE_MEMO_KEY"] = os.path.join(
    tempfile.mkdtemp(prefix="trace-tests-memo-"), "memo.key"
)

# The load cache's MAC key (engine/loadcache.py, engine/userkey.py): the suite's, never the user's.
os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="trace-tests-state-")

# Fixture packages carry their own test suites (run inside their Nix builds by the regression
# gate); they are data here, never part of trace's suite.
collect_ignore = ["fixtures"]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Tests make many temporary state directories; drop the GC-root folders of those that are
    gone, so a test run does not pin its outputs in the Nix store forever."""
    from engine.cache import sweep_orphans

    sweep_orphans()
