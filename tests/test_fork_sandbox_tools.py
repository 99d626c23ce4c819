"""Issue 28, item 1, as the maintainer met it, with real builds: the first verify of a fork ran
without the host's compiler in the sandbox (`gcc: not found`); once the compiler is there,
behind the very same `[nix] extra_sandbox_paths`, the next verify rebuilds what saw the sandbox
(nothing stale is reused: not the failed build, not a recorded test run) and every claim holds.
The failure itself says what happened and what to do (declare extra_sandbox_paths or use a
stdenv with a compiler), not 'fix the patch'."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from engine.hostpaths import ADVICE
from engine.pipeline.verify_fresh import build_verify

FIXTURE = Path(__file__).parent / "fixtures" / "fork"
CANDIDATE = "trace/candidates/cparse-key-overflow/candidate.toml"
COMPILERS = ("cc", "gcc", "gcc-12", "x86_64-linux-gnu-gcc", "x86_64-linux-gnu-gcc-12")

pytestmark = pytest.mark.nix


HOST_BIN = "/trace-host-bin"  # where the sandbox also sees the host's real /usr/bin


def expose(name: str, tools: Path) -> None:
    """/usr/bin/NAME in the tools folder: a host symlink as itself (the same target text, as
    the host has it), a program as a link to it through HOST_BIN."""
    host = Path("/usr/bin") / name
    target = os.readlink(host) if host.is_symlink() else f"{HOST_BIN}/{name}"
    (tools / name).symlink_to(target)


@pytest.fixture
def fork(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the fixture fork whose sandbox sees the host's /usr, but /usr/bin (and /bin) as
    a folder of symbolic links to the host's programs (reached in the sandbox through HOST_BIN),
    the C compiler left out. Links, not hard links: a hard link to a host file changes its ctime,
    which is part of the sandbox identity of every other fork on this machine (engine/hostpaths.py),
    so every later test's derivations would be new."""
    tools = tmp_path / "tools" / "bin"
    tools.mkdir(parents=True)
    for entry in Path("/usr/bin").iterdir():
        if entry.name not in COMPILERS:
            expose(entry.name, tools)
    fork = tmp_path / "fork"
    shutil.copytree(FIXTURE, fork, ignore=shutil.ignore_patterns(".trace", "result*"))
    usr = sorted(f"/usr/{p.name}" for p in Path("/usr").iterdir() if p.name != "bin")
    paths = [*usr, "/lib64", "/lib", f"{HOST_BIN}=/usr/bin", f"/usr/bin={tools}", f"/bin={tools}"]
    toml = (fork / "trace.toml").read_text()
    old = 'extra_sandbox_paths = ["/usr", "/lib64", "/bin", "/lib"]'
    assert old in toml
    (fork / "trace.toml").write_text(toml.replace(old, f"extra_sandbox_paths = {paths!r}"))
    return fork, tools


def test_a_compiler_that_appears_behind_the_same_paths_clears_the_failure(
    fork: tuple[Path, Path],
) -> None:
    root, tools = fork
    candidate = root / CANDIDATE
    built = build_verify(candidate, fork=root, state_dir=root / ".trace", jobs=2)
    first_run, first = built.run, built.verify
    assert not first.passed
    broken = [
        c for c in first.claims if c.reason.endswith("build-broken") and c.claim != "deterministic"
    ]
    assert broken, first.reasons
    shown = [c.detail for c in broken]
    assert all("cc: not found" in c.detail and ADVICE in c.detail for c in broken), shown
    assert "fix the patch" not in " ".join(c.detail for c in broken)

    for name in COMPILERS:  # the compiler appears; the declared paths are the same
        expose(name, tools)
    built = build_verify(candidate, fork=root, state_dir=root / ".trace", jobs=2)
    run, second = built.run, built.verify
    assert second.passed, [(c.claim, c.reason, c.detail) for c in second.claims if not c.holds]
    recorded = {s for s, r in first_run.steps.items() if r.status in ("built", "reused")}
    stale = {s for s in recorded if run.steps[s].status in ("cached", "reused")}
    assert not stale, f"answered from the compiler-less sandbox: {sorted(stale)}"
    assert all("extra_sandbox_paths" in " ".join(run.steps[s].reasons) for s in recorded), {
        s: run.steps[s].reasons for s in recorded
    }
