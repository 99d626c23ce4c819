"""Reason codes of `trace verify-bundle`: `<area>.<rule>`, stable, one meaning forever.

Each code, what it means and what to do are declared once, in policy/bundle-reasons.toml (read
with engine.policy.reasons.load_bundle_catalogue, the reason catalogue's loader); this module
only reads them. A check that fails names exactly one of these; docs/evidence.md lists them for
users, and tests/test_reason_catalogue.py holds the code base and the docs to the file.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from functools import cache

from engine.paths import cli
from engine.policy.reasons import BundleReasonSpec, load_bundle_catalogue
from engine.policy.registry import BUNDLE_REASONS, policy_dir

_COMMAND = re.compile(r"`trace ([^`]+)`")


@cache
def declared() -> dict[str, BundleReasonSpec]:
    """code -> its declaration, from the shipped catalogue (read once)."""
    return load_bundle_catalogue(policy_dir() / BUNDLE_REASONS)


def as_run_here(text: str) -> str:
    """A text's `trace COMMAND` as the user runs trace where they are (engine.paths.cli)."""
    return _COMMAND.sub(lambda m: f"`{cli(m.group(1))}`", text)


class _Reasons(Mapping[str, tuple[str, str]]):
    """code -> (what it means, what to do), read from the catalogue when first asked."""

    def __getitem__(self, code: str) -> tuple[str, str]:
        spec = declared()[code]
        return spec.message, as_run_here(spec.solution)

    def __iter__(self) -> Iterator[str]:
        return iter(declared())

    def __len__(self) -> int:
        return len(declared())


REASONS: Mapping[str, tuple[str, str]] = _Reasons()
