"""Suite-wide hooks."""

from __future__ import annotations

import pytest

# Fixture packages carry their own test suites (run inside their Nix builds by the regression
# gate); they are data here, never part of trace's suite.
collect_ignore = ["fixtures"]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Tests make many temporary state directories; drop the GC-root folders of those that are
    gone, so a test run does not pin its outputs in the Nix store forever."""
    from engine.cache import sweep_orphans

    sweep_orphans()
