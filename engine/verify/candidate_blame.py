"""Blame the candidate, not the shipped pipeline, for an evaluation error the candidate caused.

The verify pipeline's steps read `pkgs.<candidate.package>`; when that attribute does not exist,
Nix reports it against the shipped verify.toml step and its template (issue 13: "blames
verify.toml:57"). The candidate file and its `package` key are what the user must fix.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from engine.errors import InputError
from engine.graphfile import find_line
from engine.loader import read_text
from engine.paths import cli

if TYPE_CHECKING:
    from engine.candidate import Candidate

MISSING = re.compile(r"attribute '([^']+)' missing")


def blame_candidate(exc: InputError, candidate: Candidate) -> InputError:
    """`exc` re-addressed to the candidate's `package` key when a missing attribute of its
    package path caused it; otherwise `exc` unchanged."""
    package = candidate.spec.package
    parts = package.split(".")
    missing = [m.group(1) for m in MISSING.finditer(exc.message)]
    if not any(name in parts for name in missing):
        return exc
    try:
        text = read_text(candidate.path, "candidate file")
    except InputError:
        text = ""
    return InputError(
        f"the package set has no attribute '{package}' (Nix: attribute '{missing[0]}' missing)",
        file=candidate.path,
        key="package",
        line=find_line(text, ["package"]) if text else None,
        hint="set `package` to the attribute path of the package in the fork's package set "
        f"(e.g. `nix eval -f . {package}.name` at the fork's root tells whether it exists); "
        f"`{cli('schema candidate')}` describes the file",
    )
