"""The README's fork section, executed verbatim (issue 13: it failed four times before the first
good run): its `sh` block runs with bash -e in a temp git repo that already has a nixpkgs-shaped
flake.nix, the fixture package set and one fix candidate, committed. The only change to what a
user has: TRACE names a copy of this checkout whose nixpkgs input is locked to the test stand-in
(nixpkgs cannot be fetched here), so the fork's `trace/nixpkgs` follows it."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.flakekit import FORK_FIXTURE, REPO, copy_flake_src, make_standin, ok, run

pytestmark = pytest.mark.nix

NIXPKGS_SHAPED = REPO / "tests" / "fixtures" / "flake-standin" / "nixpkgs-shaped-flake.nix"
CANDIDATE = "pager-last-page"


def readme_fork_script() -> str:
    text = (REPO / "README.md").read_text()
    section = text.split("## In a nixpkgs fork: `nix run .#verify`", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"```sh\n(.*?)```", section, re.S)
    assert found, "the README's fork section has no sh block"
    return found.group(1)


@pytest.fixture(scope="module")
def trace_flake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of this checkout, its nixpkgs input locked to the stand-in."""
    src = copy_flake_src(tmp_path_factory.mktemp("trace"))
    standin = make_standin(tmp_path_factory.mktemp("standin"))
    ok(["nix", "flake", "lock", "--override-input", "nixpkgs", f"path:{standin}"], src)
    return src


@pytest.fixture(scope="module")
def nixpkgs_fork(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fork with nixpkgs' shape: its own flake.nix, default.nix, pkgs/, a committed candidate,
    a `result` link and a .gitignore of its own; no trace setup."""
    root = tmp_path_factory.mktemp("nixpkgs-fork")
    for name in ("default.nix", "lib.nix", "pkgs", "trace.toml"):
        src = FORK_FIXTURE / name
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, root / name)
    shutil.copytree(
        FORK_FIXTURE / "trace" / "candidates" / CANDIDATE,
        root / "trace" / "candidates" / CANDIDATE,
    )
    shutil.copy2(NIXPKGS_SHAPED, root / "flake.nix")
    (root / ".gitignore").write_text("result\n")
    ok(["git", "init", "-q"], root)
    ok(["git", "add", "-A"], root)
    ok(["git", "commit", "-q", "-m", "a nixpkgs fork"], root)
    return root


def test_the_readme_fork_section_runs_verbatim(trace_flake: Path, nixpkgs_fork: Path) -> None:
    script = readme_fork_script()
    assert "nix run" in script and "init" in script
    proc = run(["bash", "-e", "-c", script], nixpkgs_fork, env={"TRACE": f"path:{trace_flake}"})
    out = proc.stdout + proc.stderr
    report_file = nixpkgs_fork / ".trace" / "fork" / "report.json"
    assert report_file.is_file(), f"exit {proc.returncode}:\n{out[-4000:]}"
    report = json.loads(report_file.read_text())
    assert proc.returncode == 0, out[-4000:]
    # item 6: the table's hint is a command the fork has
    assert "check one: nix run .#trace -- verify-bundle" in proc.stdout
    # items 1, 3, 4: the init was committed whole, the lock was part of it, .trace/ is ignored
    assert report["dirty"] is False
    assert ok(["git", "status", "--porcelain", "--untracked-files=all"], nixpkgs_fork) == ""
    committed = ok(["git", "show", "--name-only", "--format=", "HEAD"], nixpkgs_fork).split()
    assert {"flake.nix", "flake.lock", ".gitignore", "trace/steps.toml"} <= set(committed)
    assert not any(p.startswith(".trace/") for p in committed)
    # the fork's own outputs are still there beside the apps
    shown = json.loads(ok(["nix", "flake", "show", "--json"], nixpkgs_fork))
    assert shown["apps"]["x86_64-linux"]["verify"]["type"] == "app"
    assert shown["apps"]["x86_64-linux"]["trace"]["type"] == "app"
    assert "legacyPackages" in shown and "checks" in shown
    # the candidate was verified
    (row,) = report["candidates"]
    assert row["verified"] is True, row
    assert row["decision"] == "allow", row
    assert "same-files" in row["steps"], "the template's example gate ran"
    # item 6: the CLI in the fork
    schema = json.loads(ok(["nix", "run", ".#trace", "--", "schema", "candidate"], nixpkgs_fork))
    assert "package" in schema["properties"]
