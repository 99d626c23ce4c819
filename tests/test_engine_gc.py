"""`trace gc`: never drops a live project's roots, whatever directory it runs from; touches other
state directories only with --all, and a root folder whose state directory cannot be seen now only
with --prune-missing; prunes generated Nix files."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest

from engine import cache
from engine.cache import Index
from engine.cli import main
from engine.graph import load_graph
from engine.run import run_graph
from tests.enginekit import make_project


@pytest.mark.nix
def test_gc_from_another_directory_keeps_a_live_projects_roots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    steps = "".join(
        f'[steps.s{i}]\nkind = "text"\nparams = {{ message = "{uuid.uuid4().hex}" }}\n'
        for i in range(5)
    )
    graph = make_project(tmp_path / "p", steps)
    project = graph.parent
    monkeypatch.chdir(project)
    assert main(["run", "graph.toml", "-q"]) == 0
    with Index(project / ".trace") as index:
        roots = {p.name for p in index.gcroots.iterdir() if not p.name.startswith(".")}
    assert len(roots) == 5
    monkeypatch.chdir("/")
    assert main(["gc", "--state-dir", str(project / ".trace")]) == 0
    out = capsys.readouterr().out
    assert "dropped 0 GC roots; kept 5" in out and "forgot" not in out
    with Index(project / ".trace") as index:
        after = {p.name for p in index.gcroots.iterdir() if not p.name.startswith(".")}
    assert after == roots
    again = run_graph(load_graph(graph, root=project), project / ".trace")
    assert {s.status for s in again.steps.values()} == {"cached"}


@pytest.fixture
def gcroots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private gcroots base, so these tests never see (or touch) other projects' roots."""
    base = tmp_path / "gcroots"
    monkeypatch.setattr(cache, "GCROOTS_BASE", base)
    return base


def state_with_root(path: Path, key: str) -> Path:
    with Index(path) as index:
        index.add_root(key, "/nix/store/00000000000000000000000000000000-x")
        return index.gcroots


def test_gc_touches_only_its_own_state_dir_without_all(
    tmp_path: Path, gcroots: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    own = state_with_root(tmp_path / "own" / ".trace", "k-own")
    other = state_with_root(tmp_path / "other" / ".trace", "k-other")
    assert main(["gc", "--state-dir", str(tmp_path / "own" / ".trace")]) == 0
    assert not (own / "k-own").is_symlink()  # no graph references it
    assert (other / "k-other").is_symlink()
    assert main(["gc", "--state-dir", str(tmp_path / "own" / ".trace"), "--all"]) == 0
    assert not (other / "k-other").is_symlink()
    assert "other/.trace: dropped 1 GC roots" in capsys.readouterr().out


def test_a_state_dir_that_cannot_be_seen_keeps_its_roots_until_prune_missing(
    tmp_path: Path, gcroots: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state_with_root(tmp_path / "own" / ".trace", "k-own")
    mount = tmp_path / "mnt" / "project" / ".trace"
    away = state_with_root(mount, "k-away")
    shutil.rmtree(tmp_path / "mnt")  # deleted, or a file system not mounted right now
    for flags in ([], ["--all"]):
        assert main(["gc", "--state-dir", str(tmp_path / "own" / ".trace"), *flags]) == 0
        out = capsys.readouterr().out
        assert (away / "k-away").is_symlink()
        assert "cannot be seen now" in out and str(away) in out and "--prune-missing" in out
    assert main(["gc", "--state-dir", str(tmp_path / "own" / ".trace"), "--prune-missing"]) == 0
    assert not away.exists()
    assert "removed 1 root folder(s)" in capsys.readouterr().out


def test_gc_of_a_missing_state_dir_creates_nothing(tmp_path: Path, gcroots: Path) -> None:
    assert main(["gc", "--state-dir", str(tmp_path / "none" / ".trace")]) == 0
    assert not (tmp_path / "none").exists()


def test_gc_prunes_generated_nix_files(tmp_path: Path, gcroots: Path) -> None:
    state = tmp_path / "p" / ".trace"
    state_with_root(state, "k")
    (state / "build").mkdir()
    for i in range(3):
        (state / "build" / f"{i}.nix").write_text("[ ]\n")
    assert main(["gc", "--state-dir", str(state)]) == 0
    assert list((state / "build").iterdir()) == []


@pytest.mark.nix
def test_runs_keep_only_the_newest_generated_nix_files(tmp_path: Path) -> None:
    graph = make_project(tmp_path, "")
    state = tmp_path / ".trace"
    (state / "build").mkdir(parents=True)
    for i in range(30):
        (state / "build" / f"old{i}.nix").write_text("[ ]\n")
    graph.write_text(
        graph.read_text() + f'[steps.a]\nkind = "text"\nparams = {{ message = "{uuid.uuid4()}" }}\n'
    )
    assert run_graph(load_graph(graph, root=tmp_path), state).ok
    kept = list((state / "build").iterdir())
    assert 1 <= len(kept) <= 8
