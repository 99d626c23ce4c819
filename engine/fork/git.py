"""The git questions `trace fork` and `trace init` ask of a fork's work tree."""

from __future__ import annotations

import subprocess
from pathlib import Path

from engine.errors import TraceError, UsageError

GIT_DEADLINE = 60.0


def run_git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            ["git", "-C", str(root), *args],
            capture_output=True,
            text=True,
            timeout=GIT_DEADLINE,
            check=False,
        )
    except FileNotFoundError:
        raise UsageError(
            "git is not installed", hint="install git; trace pins the fork's commit"
        ) from None
    except subprocess.TimeoutExpired:
        raise TraceError(f"git {' '.join(args)} took longer than {GIT_DEADLINE:.0f} s") from None


def git_root(path: Path) -> Path:
    proc = run_git(path, "rev-parse", "--show-toplevel")
    if proc.returncode != 0:
        raise UsageError(
            f"{path} is not inside a git work tree",
            hint="run `nix run .#verify` at the root of your nixpkgs fork (a git checkout), "
            "or pass --fork DIR",
        )
    return Path(proc.stdout.strip()).resolve()


def git_commit(root: Path) -> str | None:
    proc = run_git(root, "rev-parse", "--verify", "-q", "HEAD")
    return proc.stdout.strip() or None if proc.returncode == 0 else None


def dirty_paths(root: Path, exclude: list[Path]) -> list[str]:
    """Changed, staged or untracked (not ignored) paths, except trace's own output dirs."""
    specs = [
        f":(exclude){p.relative_to(root).as_posix()}" for p in exclude if p.is_relative_to(root)
    ]
    proc = run_git(root, "status", "--porcelain=v1", "--untracked-files=all", "--", ".", *specs)
    if proc.returncode != 0:
        raise TraceError(f"git status failed in {root}: {proc.stderr.strip()}")
    return [line[3:] for line in proc.stdout.splitlines() if line.strip()]
