"""The rules of pipeline files that need no pydantic: names, limits, the `[nix]` options a
pipeline may not set and those Nix reads as numbers. engine/spec.py's models apply them when
pydantic validates a file; engine/plainfile.py when a file is plainly valid without it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

ID_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")

# Documented limits (README, "Pipeline files"): past them a file is refused, not half-loaded.
MAX_REPEAT = 10_000
MAX_STEPS = 1_000_000

# Options Nix reads as numbers: a pipeline's value is checked on load, not by Nix mid-run.
NUMERIC_OPTIONS = {"cores": 0, "max-jobs": 1}

# Settings a pipeline may not pass as `[nix] options`: verdicts come only from sandboxed builds,
# so the sandbox is trace's, not the pipeline's; binary caches, the keys that make their contents
# acceptable and remote builders are the machine's (engine/machine.py), never a pipeline's.
FORBIDDEN_OPTIONS = frozenset(
    {
        "sandbox",
        "build-use-sandbox",
        "sandbox-fallback",
        "sandbox-paths",
        "build-sandbox-paths",
        "extra-sandbox-paths",
        "allowed-impure-host-deps",
        "impure-env",
        "substituters",
        "extra-substituters",
        "trusted-substituters",
        "require-sigs",
        "trusted-public-keys",
        "builders",
        "secret-key-files",
        "post-build-hook",
        "pre-build-hook",
        "diff-hook",
    }
)


def numeric_option_problem(options: Mapping[str, str]) -> str | None:
    """What is wrong with a numeric option's value, or None: `cores` is a count (0: every
    core), `max-jobs` 1 or more or `auto` (0 would leave every build to remote builders, which
    are the machine's, never a pipeline's)."""
    for name, least in NUMERIC_OPTIONS.items():
        text = options.get(name)
        if text is None or (name == "max-jobs" and text == "auto"):
            continue
        if not text.isascii() or not text.isdigit() or int(text) < least:
            return (
                f"option '{name}' must be a whole number of {least} or more"
                + (" or 'auto'" if name == "max-jobs" else "")
                + f", not {text!r}"
            )
    return None
