"""The load stage: a candidate file, the fork it is verified in, and the state directory."""

from __future__ import annotations

from pathlib import Path

from engine.candidate import load_candidate
from engine.errors import UsageError
from engine.pipeline.values import Located
from engine.verify.fork_graph import find_fork


def fork_of(candidate: Path, fork: Path | None) -> Path:
    """`fork` (resolved), else the nearest fork above the candidate, else the working directory;
    a usage error when it is not a directory."""
    found = (fork or find_fork(candidate) or Path.cwd()).resolve()
    if not found.is_dir():
        raise UsageError(f"--fork {found} is not a directory", hint="pass the package set's root")
    return found


def locate(candidate_file: Path, fork: Path | None, state_dir: Path | None) -> Located:
    """Load the candidate (strictly) and find its fork and state directory (default FORK/.trace)."""
    candidate = load_candidate(candidate_file)
    where = fork_of(candidate.path, fork)
    return Located(candidate, where, (state_dir or where / ".trace").resolve())
