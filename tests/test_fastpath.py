"""The no-op fast path: answered from stat() alone, and never when anything it read changed."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from engine import fastpath
from tests.enginekit import make_project

pytestmark = pytest.mark.nix

CHECK = (
    "import sys, engine.cli; rc = engine.cli.main(sys.argv[1:]); "
    "print('FAST' if 'engine.run' not in sys.modules else 'FULL', rc)"
)


def age(root: Path) -> None:
    """Move every mtime 10 s into the past, as if the files were written before this run; then
    let their ctimes (which nothing can set) become older than the fast path's 1 s margin."""
    past = time.time() - 10
    for dirpath, _, files in os.walk(root):
        for name in [*files, "."]:
            os.utime(os.path.join(dirpath, name), (past, past), follow_symlinks=False)
    time.sleep(1.1)  # a precondition (ctime older than the margin), not a timed assertion


def trace_run(project: Path) -> tuple[str, int, str]:
    proc = subprocess.run(
        [sys.executable, "-c", CHECK, "run", "graph.toml", "-q"],
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
    )
    *lines, last = proc.stdout.strip().splitlines()
    mode, rc = last.split()
    return mode, int(rc), "\n".join(lines)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    graph = make_project(
        tmp_path,
        f"""
        [steps.a]
        kind = "text"
        params = {{ message = "{uuid.uuid4().hex}" }}
        inputs = {{ tree = "data" }}
        [steps.b]
        kind = "text"
        needs = ["a"]
        """,
    )
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "one.txt").write_text("one\n")
    age(tmp_path)
    mode, rc, out = trace_run(graph.parent)
    assert (mode, rc) == ("FULL", 0) and "2 built" in out
    return graph.parent


def test_noop_is_answered_without_loading_the_graph(project: Path) -> None:
    mode, rc, out = trace_run(project)
    assert (mode, rc, out) == ("FAST", 0, "2 steps: 2 cached")


@pytest.mark.parametrize(
    "edit",
    [
        "input-edited",
        "file-added-to-input-tree",
        "template-edited",
        "package-set-edited",
        "graph-edited",
    ],
)
def test_any_change_takes_the_full_path(project: Path, edit: str) -> None:
    if edit == "input-edited":
        (project / "data" / "one.txt").write_text("uno\n")
    elif edit == "file-added-to-input-tree":
        (project / "data" / "two.txt").write_text("two\n")
    elif edit == "template-edited":
        tmpl = project / "templates" / "text.nix.j2"
        tmpl.write_text(tmpl.read_text() + "\n")
    elif edit == "package-set-edited":
        (project / "pkgs" / "note.txt").write_text("a new file in the package set\n")
    else:
        graph = project / "graph.toml"
        graph.write_text(graph.read_text() + "\n# a comment\n")
    mode, rc, _ = trace_run(project)
    assert (mode, rc) == ("FULL", 0)


def test_an_edit_during_the_run_is_never_stamped(project: Path) -> None:
    db = sqlite3.connect(project / ".trace" / "state.db", isolation_level=None)
    key = fastpath.name(project / "graph.toml", project)
    reads = [(project / "data", [])]
    before = fastpath.stamp(reads)
    assert fastpath.record(db, key, reads, {}, since_ns=time.time_ns(), before=before)
    (project / "data" / "one.txt").write_text("edited while building\n")
    # the run started before that edit: its stamp must not be recorded (and the old one goes)
    since = time.time_ns() - 10**9
    assert not fastpath.record(db, key, reads, {}, since_ns=since, before=before)
    assert db.execute("SELECT count(*) FROM fastpath_v3 WHERE name = ?", (key,)).fetchone()[0] == 0
    # nor when the stamp taken before the build differs from the one after it, whatever the clock
    assert not fastpath.record(db, key, reads, {}, since_ns=time.time_ns() + 10**12, before=before)


def test_a_missing_output_takes_the_full_path(project: Path) -> None:
    db = sqlite3.connect(project / ".trace" / "state.db", isolation_level=None)
    key = fastpath.name(project / "graph.toml", project)
    (reads, outs) = db.execute(
        "SELECT reads, outs FROM fastpath_v3 WHERE name = ?", (key,)
    ).fetchone()
    assert "/nix/store/" in outs
    db.execute(
        "UPDATE fastpath_v3 SET outs = ? WHERE name = ?", ('[["a", "/nix/store/gone"]]', key)
    )
    args = ["run", str(project / "graph.toml"), "--root", str(project)]
    assert fastpath.try_noop(args) is None
    assert reads


def test_flags_it_does_not_know_take_the_full_path(project: Path) -> None:
    assert fastpath.try_noop(["run", str(project / "graph.toml"), "--json"]) is None
    assert fastpath.try_noop(["run"]) is None


def test_a_changed_tool_behind_a_sandbox_path_is_no_noop(tmp_path: Path) -> None:
    """The fast path also checks what [nix] extra_sandbox_paths expose (engine/hostpaths.py):
    a tool that changed there makes the full run decide (which rebuilds what sees it)."""
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "cc").write_text("v1\n")
    graph = make_project(
        tmp_path / "p",
        f"""
        [steps.a]
        kind = "text"
        params = {{ message = "{uuid.uuid4().hex}" }}
        """,
    )
    text = graph.read_text().replace(
        'package_set = "pkgs"\n', f'package_set = "pkgs"\nextra_sandbox_paths = ["{tools}"]\n'
    )
    graph.write_text(text)
    age(tmp_path)
    assert trace_run(graph.parent)[:2] == ("FULL", 0)
    assert trace_run(graph.parent) == ("FAST", 0, "1 steps: 1 cached")
    (tools / "cc").write_text("v2\n")
    mode, rc, out = trace_run(graph.parent)
    assert (mode, rc) == ("FULL", 0) and "1 built" in out
