"""The tier a test runs in (docs/performance.md, "Test tiers"): `--fast` (./scripts/test) or the
whole suite (--all, .ci/run). A few non-build tests repeat one claim many times (hypothesis
examples, fuzzing seeds); the fast tier runs fewer repetitions of the same claim, the whole suite
all of them."""

from __future__ import annotations

import os

ENV = "TRACE_TESTS_TIER"  # set to "fast" by tests/conftest.py under --fast


def fast() -> bool:
    return os.environ.get(ENV) == "fast"


def repeats(whole: int, fast_tier: int) -> int:
    """`whole` repetitions in the whole suite, `fast_tier` in the fast tier."""
    return fast_tier if fast() else whole
