"""What one `trace fork` run asks once, for all of its candidates.

Per run, not per candidate: the git state (three git processes in all: the fork's root, its
clean check, and here its commit and tree), the Nix version and system the replay records name,
the merged policy, and the package set's digest (one shared `StatCache` that remembers each
tree it walked, so a 40,000-file package set is walked once, not once per candidate).

Under `nix run .#verify` the app passes the system it imports the package set for (`--system`)
and the version of the Nix that evaluated it (`--nix-version`, from `builtins.nixVersion`), so
trace starts no Nix process of its own for them; `trace fork` without them asks `nix --version`
and `builtins.currentSystem` once per run, lazily (only when a bundle is assembled).

Caching per run never outlives the run: every new run asks git again and rehashes any file whose
stat signature (size, mtime, inode, ctime) changed, so an edit that keeps the mtime is seen by
its ctime, and a changed policy file is merged again (tests/test_fork_once.py).
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from engine.fork.config import ForkConfig
from engine.fork.git import git_commit, run_git

if TYPE_CHECKING:
    from engine.evidence.replay import RunHost
    from engine.hashing import StatCache

NIX_VERSION_PREFIX = "nix (Nix) "  # what `nix --version` prints before the version


def head(where: Path) -> tuple[str | None, str | None]:
    """HEAD's commit and tree (one git process); (None, None) before the first commit."""
    proc = run_git(where, "rev-parse", "HEAD^{commit}", "HEAD^{tree}", "--")
    lines = [line for line in proc.stdout.split() if line != "--"]
    if proc.returncode != 0 or len(lines) != 2:
        return None, None
    return lines[0], lines[1]


class RunOnce:
    """The facts of one run, each asked the first time it is needed and then kept."""

    def __init__(self, cfg: ForkConfig) -> None:
        self.cfg = cfg

    @cached_property
    def head(self) -> tuple[str | None, str | None]:
        """The package set's commit and tree (the replay records pin them)."""
        where = self.cfg.package_set
        return head(where if where.is_dir() else where.parent)

    @property
    def commit(self) -> str | None:
        """The fork's commit (the report names it): the package set's, when it is the root."""
        if self.cfg.package_set == self.cfg.root:
            return self.head[0]
        return git_commit(self.cfg.root)

    @cached_property
    def host(self) -> RunHost:
        from engine.evidence.replay import RunHost, nix_system, nix_version

        src = self.cfg.source
        commit, tree = self.head
        return RunHost(
            nix_version=(src.nix_version if src else None) or nix_version(),
            system=src.system if src is not None else nix_system(),
            commit=commit,
            tree=tree,
        )

    @cached_property
    def hasher(self) -> StatCache:
        """One stat cache for the run (loaded from the state database, read-only: each
        candidate flushes new entries under its own lock), remembering every tree it walked."""
        from engine.hashing import StatCache

        return StatCache.read_only(self.cfg.state / "state.db", remember_trees=True)
