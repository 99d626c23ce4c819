"""Where trace's shipped data (graphs/, templates/, policy/) lives, and `trace:` references to it.

In a checkout this is the repository root; an installed package (e.g. the flake's) sets
TRACE_DATA_DIR to the directory holding its copies.
"""

from __future__ import annotations

import os
from pathlib import Path

from engine.errors import InputError

PREFIX = "trace:"


def data_dir() -> Path:
    env = os.environ.get("TRACE_DATA_DIR")
    if env:
        return Path(env).resolve()
    return Path(__file__).resolve().parent.parent


def resolve_ref(value: str, base: Path) -> Path:
    """`trace:graphs/verify.toml` -> inside the data dir; anything else relative to `base`.

    A `trace:` reference that leaves the data dir (`trace:../../etc/hostname`) is refused: it
    names trace's own data and nothing else."""
    if value.startswith(PREFIX):
        root = data_dir()
        target = Path(os.path.realpath(root / value[len(PREFIX) :]))
        if not target.is_relative_to(root):
            raise InputError(
                f"'{value}' escapes trace's data directory {root}",
                hint="`trace:` names trace's shipped data (graphs/, templates/, policy/) only",
            )
        return target
    return Path(os.path.realpath(base / value))  # a symlink loop stays as written


# The engine modules whose code shapes derivations and keys: their digest is part of every step
# key, so a changed engine never answers from results an older engine built (even without a
# version bump, as in a development checkout).
KEY_SOURCES = (
    "graphtypes.py",
    "spec.py",
    "graph.py",
    "graphfile.py",
    "graphparams.py",
    "hashing.py",
    "hostpaths.py",
    "render.py",
    "expression.py",
    "plan.py",
    "evaluation.py",
    "run.py",
    "nix.py",
)


def key_source_paths() -> list[Path]:
    here = Path(__file__).resolve().parent
    return [here / name for name in KEY_SOURCES]


def cli(command: str) -> str:
    """How the user runs `trace COMMAND` where they are: `nix run .#trace -- COMMAND` in a fork
    whose apps set TRACE_CLI (lib.addApps), else `trace COMMAND`. For hints."""
    return f"{os.environ.get('TRACE_CLI') or 'trace'} {command}"
