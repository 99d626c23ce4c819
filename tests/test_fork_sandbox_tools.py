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
from engine.pipeline.verify import build_verify

FIXTURE = Path(__file__).parent / "fixtures" / "fork"
CANDIDATE = "trace/candidates/cparse-key-overflow/candidate.toml"
COMPILERS = ("cc", "gcc", "gcc-12", "x86_64-linux-gnu-gcc", "x86_64-linux-gnu-gcc-12")

pytestmark = pytest.mark.nix


def same_filesystem(a: Path, b: Path) -> bool:
    return a.stat().st_dev == b.stat().st_dev


@pytest.fixture
def fork(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the fixture fork whose sandbox sees the host's /usr, but /usr/bin (and /bin) as
    a folder of hard links to the host's programs, the C compiler left out."""
    if not same_filesystem(tmp_path, Path("/usr/bin")):
        pytest.skip("hard links to /usr/bin need the temp dir on its file system")
    tools = tmp_path / "tools" / "bin"
    shutil.copytree("/usr/bin", tools, symlinks=True, copy_function=os.link)
    for name in COMPILERS:
        (tools / name).unlink()
    fork = tmp_path / "fork"
    shutil.copytree(FIXTURE, fork, ignore=shutil.ignore_patterns(".trace", "result*"))
    usr = sorted(f"/usr/{p.name}" for p in Path("/usr").iterdir() if p.name != "bin")
    paths = [*usr, "/lib64", "/lib", f"/usr/bin={tools}", f"/bin={tools}"]
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
        os.link(Path("/usr/bin") / name, tools / name, follow_symlinks=False)
    built = build_verify(candidate, fork=root, state_dir=root / ".trace", jobs=2)
    run, second = built.run, built.verify
    assert second.passed, [(c.claim, c.reason, c.detail) for c in second.claims if not c.holds]
    recorded = {s for s, r in first_run.steps.items() if r.status in ("built", "reused")}
    stale = {s for s in recorded if run.steps[s].status in ("cached", "reused")}
    assert not stale, f"answered from the compiler-less sandbox: {sorted(stale)}"
    assert all("extra_sandbox_paths" in " ".join(run.steps[s].reasons) for s in recorded), {
        s: run.steps[s].reasons for s in recorded
    }
