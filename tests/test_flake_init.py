"""`trace init` in real git repositories (temp dirs), without locking (no trace flake to fetch):
the template's trace/ copied, an existing nixpkgs-shaped flake.nix edited (checked by evaluating
it with nix-instantiate), or the exact lines printed when it cannot be edited safely; .trace/
ignored; everything really staged (a plain `git commit` commits it).

The whole onboarding with locking and `nix run .#verify` is tests/test_flake_readme.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from engine.cli import main
from engine.fork.init import edit_flake
from tests.flakekit import GIT_ENV

REPO = Path(__file__).resolve().parent.parent
NIXPKGS_SHAPED = REPO / "tests" / "fixtures" / "flake-standin" / "nixpkgs-shaped-flake.nix"
URL = "path:/srv/trace"


def git(root: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", "-C", str(root), *args],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **GIT_ENV},
    )
    return proc.stdout


@pytest.fixture
def fork(tmp_path: Path) -> Path:
    """A nixpkgs-shaped fork with its own flake.nix, committed."""
    root = tmp_path / "nixpkgs"
    root.mkdir()
    (root / "flake.nix").write_text(NIXPKGS_SHAPED.read_text())
    (root / "default.nix").write_text("{ system ? builtins.currentSystem, ... }: { }\n")
    (root / "lib.nix").write_text("{ }\n")
    (root / ".gitignore").write_text("result\n")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "nixpkgs")
    return root


def evaluate_outputs(flake: Path) -> dict[str, object]:
    """Call the edited flake's outputs with a fake `trace` input whose addApps records what it
    was given, as Nix would call it (every input plus self)."""
    expr = f"""
      let
        f = import {flake};
        trace = {{ lib.addApps = args: outs: outs // {{ apps = "added"; addArgs = args; }}; }};
        self = f.outputs {{ inherit self trace; }};
      in {{
        inputs = f.inputs;
        names = builtins.attrNames self;
        apps = self.apps;
        addArgs = builtins.attrNames self.addArgs;
        selfPassed = (self.addArgs.self or null) == self;
        lib = self.lib or null;
      }}
    """
    proc = subprocess.run(
        ["nix-instantiate", "--eval", "--strict", "--json", "-E", expr],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, object] = json.loads(proc.stdout)
    return result


@pytest.mark.nix
def test_init_edits_an_existing_nixpkgs_flake_and_stages_everything(
    fork: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init", "--fork", str(fork), "--trace-url", URL, "--no-lock"]) == 0
    out = capsys.readouterr().out
    assert "added the trace input" in out
    got = evaluate_outputs(fork / "flake.nix")
    assert got["inputs"] == {"trace": {"url": URL}}
    assert got["apps"] == "added" and got["addArgs"] == ["self"]
    assert got["selfPassed"] is True, "the verify app gets the flake's own source"
    assert set(got["names"]) >= {"legacyPackages", "checks", "lib"}, "the fork's outputs stay"
    for rel in ("trace/steps.toml", "trace/candidates/README.md", "trace/policy/README.md"):
        assert (fork / rel).is_file(), rel
    assert "/.trace/" in (fork / ".gitignore").read_text().splitlines()
    assert (fork / ".gitignore").read_text().startswith("result\n"), "existing lines stay"
    # really staged: a plain commit takes every file, nothing is left over
    git(fork, "commit", "-q", "-m", "trace")
    assert git(fork, "status", "--porcelain", "--untracked-files=all") == ""
    committed = git(fork, "show", "--name-only", "--format=", "HEAD").split()
    assert {"flake.nix", ".gitignore", "trace/steps.toml"} <= set(committed)
    assert "trace/templates/same-files.nix.j2" in committed, "the example gate's template ships"
    # trace's state dir is ignored from now on
    (fork / ".trace").mkdir()
    (fork / ".trace" / "state.db").write_text("x")
    assert git(fork, "status", "--porcelain", "--untracked-files=all") == ""


@pytest.mark.nix
def test_init_again_changes_nothing(fork: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", "--fork", str(fork), "--trace-url", URL, "--no-lock"]) == 0
    git(fork, "commit", "-q", "-m", "trace")
    (fork / "trace" / "steps.toml").write_text("version = 1\n# the fork's own\n")
    git(fork, "commit", "-q", "-am", "own steps")
    capsys.readouterr()
    assert main(["init", "--fork", str(fork), "--trace-url", URL, "--no-lock"]) == 0
    out = capsys.readouterr().out
    assert "already has a trace input" in out
    assert "kept trace/steps.toml" in out
    assert git(fork, "status", "--porcelain", "--untracked-files=all") == ""
    assert (fork / "trace" / "steps.toml").read_text().endswith("# the fork's own\n")


@pytest.mark.nix
def test_a_flake_whose_outputs_is_not_last_gets_the_lines_printed(
    fork: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = NIXPKGS_SHAPED.read_text().rstrip().removesuffix("}")
    text += '  nixConfig.bash-prompt = "fork> ";\n}\n'
    (fork / "flake.nix").write_text(text)
    git(fork, "commit", "-q", "-am", "nixConfig after outputs")
    assert main(["init", "--fork", str(fork), "--trace-url", URL, "--no-lock"]) == 1
    out = capsys.readouterr().out
    assert "flake.nix NOT edited" in out
    assert f'inputs.trace.url = "{URL}";' in out
    assert "trace.lib.addApps { inherit (inputs) self; } ((" in out
    assert (fork / "flake.nix").read_text() == text, "an unsafe edit is never made"
    assert "trace/steps.toml" in git(fork, "diff", "--cached", "--name-only")


def test_edit_keeps_the_outputs_function_and_its_indentation() -> None:
    edited = edit_flake(NIXPKGS_SHAPED.read_text(), URL, "ci/trace")
    assert edited is not None
    assert '\n  inputs.trace.url = "path:/srv/trace";\n' in edited
    assert 'addApps { inherit (inputs) self; config = "ci/trace"; } ((\n    { self }:' in edited
    assert edited.rstrip().endswith(') (builtins.removeAttrs inputs [ "trace" ]));\n}')


@pytest.mark.nix
def test_a_repo_without_flake_gets_the_template_with_the_url(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    git(tmp_path, "init", "-q")
    assert main(["init", "--fork", str(tmp_path), "--trace-url", URL, "--no-lock"]) == 0
    text = (tmp_path / "flake.nix").read_text()
    assert f'inputs.trace.url = "{URL}";' in text
    assert "OWNER" not in text.split("inputs.trace.url")[1].splitlines()[0]
    got = evaluate_outputs(tmp_path / "flake.nix")
    assert got["apps"] == "added" and got["selfPassed"] is True


@pytest.mark.parametrize("url", [None, 'x"; evil = "', "a b", "${builtins.currentTime}"])
def test_a_missing_or_unsafe_url_is_refused_before_any_write(
    fork: Path, url: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    before = (fork / "flake.nix").read_text()
    argv = ["init", "--fork", str(fork), "--no-lock"] + (["--trace-url", url] if url else [])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--trace-url" in err
    assert (fork / "flake.nix").read_text() == before
    assert not (fork / "trace").exists(), "nothing half-written"


def test_the_template_ships_every_file_its_examples_name() -> None:
    """Issue 13 item 7: the commented `package-tests` example named a template it did not ship."""
    trace_dir = REPO / "nix" / "templates" / "fork" / "trace"
    steps = (trace_dir / "steps.toml").read_text()
    named = re.findall(r'template\s*=\s*"([^"]+)"', steps)
    assert named, "the template's steps.toml has an example kind"
    for rel in named:
        assert (trace_dir / rel).is_file(), rel


@pytest.mark.nix
def test_init_locks_with_the_override_inputs_given(
    fork: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--override-input INPUT URL` (repeatable) reaches `nix flake lock` as given, in order; the
    lock is staged. (`nix` is a shim that records its arguments and writes flake.lock.)"""
    shims = tmp_path / "shims"
    shims.mkdir()
    log = tmp_path / "nix-args"
    (shims / "nix").write_text(
        f'#!/bin/sh\nprintf "%s\\n" "$@" > {log}\necho "{{}}" > flake.lock\n'
    )
    (shims / "nix").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shims}:{os.environ['PATH']}")
    argv = ["init", "--fork", str(fork), "--trace-url", URL]
    argv += ["--override-input", "trace/nixpkgs", "path:/a", "--override-input", "trace", "path:/b"]
    assert main(argv) == 0
    assert log.read_text().splitlines() == [
        "flake", "lock", "--override-input", "trace/nixpkgs", "path:/a",
        "--override-input", "trace", "path:/b",
    ]  # fmt: skip
    out = capsys.readouterr().out
    assert "trace init: locked the flake inputs (flake.lock)" in out
    assert "trace init: staged (git add): flake.nix, flake.lock, .gitignore" in out
    assert "flake.lock" in git(fork, "diff", "--cached", "--name-only").split()
