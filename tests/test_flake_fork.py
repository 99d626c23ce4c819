"""`trace fork` without nix: fork discovery, the clean-tree check, candidates, the generated entry
pipeline and the merged policy directory (real git repositories in temp dirs)."""

from __future__ import annotations

import argparse
import os
import subprocess
from pathlib import Path

import pytest
import tomli

from engine.cli import main
from engine.errors import InputError, UsageError
from engine.fork import (
    check_clean,
    discover,
    make_config,
    merged_policy,
    pipeline_entry,
)
from engine.paths import data_dir

GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
}


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, env=GIT_ENV)


def args_for(root: Path, **over: object) -> argparse.Namespace:
    base: dict[str, object] = {
        "fork": root,
        "config": "trace",
        "candidates": None,
        "steps": None,
        "policy": None,
        "package_set": ".",
        "state_dir": None,
        "out": None,
    }
    base.update(over)
    return argparse.Namespace(**base)


@pytest.fixture
def fork(tmp_path: Path) -> Path:
    root = tmp_path / "fork"
    for name in ("a", "b"):
        d = root / "trace" / "candidates" / name
        d.mkdir(parents=True)
        (d / "candidate.toml").write_text(f'id = "{name}"\n')
    (root / "trace" / "candidates" / "README.md").write_text("not a candidate\n")
    (root / "trace" / "candidates" / "c.toml").write_text('id = "c"\n')
    (root / "default.nix").write_text("{ ... }: { }\n")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init")
    return root


def test_config_finds_the_work_tree_root_from_a_subdirectory(fork: Path) -> None:
    cfg = make_config(args_for(fork / "trace" / "candidates"))
    assert cfg.root == fork.resolve()
    assert cfg.candidates == fork.resolve() / "trace" / "candidates"
    assert cfg.steps is None and cfg.policy is None
    assert cfg.state == fork.resolve() / ".trace"
    assert cfg.bundles == cfg.state / "bundles"


def test_outside_git_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not inside a git work tree") as info:
        make_config(args_for(tmp_path))
    assert "nix run .#verify" in (info.value.hint or "")


def test_paths_may_not_leave_the_fork(fork: Path) -> None:
    with pytest.raises(UsageError, match="outside the fork"):
        make_config(args_for(fork, package_set="../elsewhere"))


def test_clean_tree_passes_and_trace_output_does_not_count(fork: Path) -> None:
    cfg = make_config(args_for(fork))
    (cfg.state / "verify").mkdir(parents=True)
    (cfg.state / "verify" / "a.json").write_text("{}")
    assert check_clean(cfg, allow_dirty=False) is False


@pytest.mark.parametrize("change", ["modified", "untracked", "staged"])
def test_dirty_tree_is_refused_unless_allowed(fork: Path, change: str) -> None:
    if change == "modified":
        (fork / "default.nix").write_text("{ ... }: { x = 1; }\n")
        path = "default.nix"
    elif change == "untracked":
        (fork / "pkgs").mkdir()
        (fork / "pkgs" / "new.nix").write_text("{ }\n")
        path = "pkgs/new.nix"
    else:
        (fork / "staged.nix").write_text("{ }\n")
        git(fork, "add", "staged.nix")
        path = "staged.nix"
    cfg = make_config(args_for(fork))
    with pytest.raises(InputError, match="uncommitted changes") as info:
        check_clean(cfg, allow_dirty=False)
    assert path in info.value.message
    assert "--allow-dirty" in (info.value.hint or "")
    assert check_clean(cfg, allow_dirty=True) is True


def test_cli_refuses_a_dirty_tree_with_exit_2(
    fork: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (fork / "default.nix").write_text("{ ... }: { y = 2; }\n")
    assert main(["fork", "--fork", str(fork)]) == 2
    err = capsys.readouterr().err
    assert "uncommitted changes" in err and "default.nix" in err


def test_candidates_all_or_named(fork: Path) -> None:
    cfg = make_config(args_for(fork))
    every = discover(cfg, [])
    assert [p.relative_to(cfg.candidates).as_posix() for p in every] == [
        "a/candidate.toml",
        "b/candidate.toml",
        "c.toml",
    ]
    assert discover(cfg, ["b"]) == [cfg.candidates / "b" / "candidate.toml"]
    with pytest.raises(UsageError, match="unknown candidate 'zz'") as info:
        discover(cfg, ["zz"])
    assert "a, b, c" in (info.value.hint or "")


def test_missing_candidates_folder_says_how_to_start(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    with pytest.raises(UsageError, match="no candidates folder") as info:
        make_config(args_for(tmp_path))
    assert "flake init -t" in (info.value.hint or "")


def test_entry_includes_the_standard_pipeline_and_the_fork_steps(fork: Path) -> None:
    steps = fork / "trace" / "steps.toml"
    steps.write_text('version = 1\n[nix]\npackage_set_exclude = ["docs"]\n')
    cfg = make_config(args_for(fork))
    entry = pipeline_entry(cfg, "a")
    assert entry == cfg.state / "fork" / "a" / "pipeline.toml"
    data = tomli.loads(entry.read_text())
    assert data["include"] == ["trace:graphs/verify.toml", str(steps.resolve())]
    assert data["nix"]["package_set_exclude"] == ["docs", "trace"]
    mtime = entry.stat().st_mtime_ns
    assert pipeline_entry(cfg, "a") == entry
    assert entry.stat().st_mtime_ns == mtime, "an unchanged entry is not rewritten"


def test_fork_trace_toml_replaces_the_standard_pipeline(fork: Path) -> None:
    (fork / "trace.toml").write_text('version = 1\ninclude = ["trace:graphs/verify.toml"]\n')
    cfg = make_config(args_for(fork))
    data = tomli.loads(pipeline_entry(cfg, "b").read_text())
    assert data["include"] == [str((fork / "trace.toml").resolve())]


def test_merged_policy_overlays_the_fork_files_on_the_shipped_ones(fork: Path) -> None:
    own = fork / "trace" / "policy"
    own.mkdir()
    (own / "signing.toml").write_text("# the fork's own\n")
    (own / "fork.pub").write_text("key\n")
    cfg = make_config(args_for(fork))
    merged = merged_policy(cfg)
    shipped = data_dir() / "policy"
    assert (merged / "signing.toml").read_text() == "# the fork's own\n"
    assert (merged / "fork.pub").read_text() == "key\n"
    assert (merged / "routing.toml").read_bytes() == (shipped / "routing.toml").read_bytes()
    (own / "fork.pub").unlink()
    merged_policy(cfg)
    assert not (merged / "fork.pub").exists(), "a file the fork removed leaves the merged set"


def test_state_and_bundle_dirs_inside_the_fork_are_left_out_of_the_package_set(fork: Path) -> None:
    """--state-dir/--out inside the fork change on every run: hashing them would make every
    run rebuild (an audit found the no-op broken that way)."""
    cfg = make_config(args_for(fork, state_dir=fork / "out" / "state", out=fork / "bundles"))
    data = tomli.loads(pipeline_entry(cfg, "a").read_text())
    assert data["nix"]["package_set_exclude"] == ["trace", "out/state", "bundles"]
