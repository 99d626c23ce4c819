"""Never a stale answer: inputs edited the way real tools edit them (mtime kept, renamed over,
truncated and restored, extracted from a tar, changed during a run) are always rebuilt, by the
fast path and the full path alike; and a cached step keeps its warnings."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.enginekit import make_project

pytestmark = pytest.mark.nix

CHECK = (
    "import sys, engine.cli; rc = engine.cli.main(sys.argv[1:]); "
    "print('FAST' if 'engine.run' not in sys.modules else 'FULL', rc)"
)
# Same size, so an edit that keeps the mtime changes nothing but content, ctime (and maybe inode).
CONTENTS = ["alpha\n", "bravo\n", "charl\n"]


def trace(project: Path, *args: str) -> tuple[str, int, str]:
    proc = subprocess.run(
        [sys.executable, "-c", CHECK, "run", "graph.toml", "-q", *args],
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    *_, last = proc.stdout.strip().splitlines()
    mode, rc = last.split()
    return mode, int(rc), proc.stderr


def answered_text(project: Path, mode: str) -> str:
    """The output `trace run` just answered with for step 'a' (fast: its stamp record; full: the
    key it recorded as the step's latest), read from the store."""
    db = sqlite3.connect(project / ".trace" / "state.db")
    try:
        if mode == "FAST":
            (outs,) = db.execute("SELECT outs FROM fastpath_v3").fetchone()
            out = dict(json.loads(outs))["a"]
        else:
            (key,) = db.execute("SELECT key FROM last_keys WHERE step_id = 'a'").fetchone()
            (out,) = db.execute("SELECT out FROM results WHERE key = ?", (key,)).fetchone()
    finally:
        db.close()
    return (Path(out) / "text").read_text()


def keep_mtime(path: Path, edit: Callable[[], None]) -> None:
    st_before = os.stat(path)
    edit()
    os.utime(path, ns=(st_before.st_atime_ns, st_before.st_mtime_ns))


def cp_p(path: Path, content: str) -> None:
    """`cp -p src f`: content copied into the same inode, then the source's (old) mtime."""
    src = path.parent.parent / "src.tmp"
    src.write_text(content)
    st_f = os.stat(path)
    os.utime(src, ns=(st_f.st_atime_ns, st_f.st_mtime_ns))
    shutil.copy2(src, path)
    src.unlink()


def rename_over(path: Path, content: str) -> None:
    """`rsync -t` / editors: a new file with the old mtime, renamed over the old one."""
    tmp = path.with_name(".f.tmp")
    tmp.write_text(content)
    st_f = os.stat(path)
    os.utime(tmp, ns=(st_f.st_atime_ns, st_f.st_mtime_ns))
    os.replace(tmp, path)


def truncate_restore(path: Path, content: str) -> None:
    def edit() -> None:
        with open(path, "r+") as fh:
            fh.truncate(0)
            fh.write(content)

    keep_mtime(path, edit)


def touch_d(path: Path, content: str) -> None:
    keep_mtime(path, lambda: path.write_text(content))


def tar_x(path: Path, content: str) -> None:
    """`tar x` of an archive holding the file with the mtime it has now."""
    archive = path.parent.parent / "in.tar"
    data = path.parent.parent / "member.tmp"
    data.write_text(content)
    with tarfile.open(archive, "w") as tar:
        info = tar.gettarinfo(str(data), arcname=path.name)
        info.mtime = int(os.stat(path).st_mtime)
        with open(data, "rb") as fh:
            tar.addfile(info, fh)
    with tarfile.open(archive) as tar:  # our own one-file archive; `filter` needs 3.11.4+
        kw = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(path.parent, **kw)  # type: ignore[arg-type]
    archive.unlink()
    data.unlink()


EDITS: dict[str, Callable[[Path, str], None]] = {
    "cp -p": cp_p,
    "rename over": rename_over,
    "truncate and restore": truncate_restore,
    "touch -d": touch_d,
    "tar x": tar_x,
}


def project_with_input(tmp: Path, message: str = "hi", sleep: int = 0) -> Path:
    make_project(
        tmp,
        f"""
        [steps.a]
        kind = "text"
        params = {{ message = "{message}", sleep = {sleep} }}
        inputs = {{ f = "data/f" }}
        """,
    )
    (tmp / "data").mkdir(exist_ok=True)
    (tmp / "data" / "f").write_text(CONTENTS[0])
    past = time.time() - 100
    os.utime(tmp / "data" / "f", (past, past))
    return tmp


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    project = project_with_input(tmp_path_factory.mktemp("stale"), message=uuid.uuid4().hex)
    _mode, rc, err = trace(project)
    assert rc == 0, err
    return project


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    st.lists(
        st.tuples(st.sampled_from(sorted(EDITS)), st.sampled_from(CONTENTS), st.booleans()),
        min_size=1,
        max_size=3,
    )
)
def test_trace_run_never_answers_from_a_stale_key(
    shared: Path, edits: list[tuple[str, str, bool]]
) -> None:
    f = shared / "data" / "f"
    for how, content, settle in edits:
        EDITS[how](f, content)
        if settle:  # old enough for the run to record a stamp: the next run may be FAST
            time.sleep(1.1)
        for _ in range(2):  # the run after the edit, and the one after that (fast path)
            mode, rc, err = trace(shared)
            assert rc == 0, err
            got = answered_text(shared, mode)
            assert got.endswith(f.read_text()), f"after {how}: {mode} answered {got!r}"


def test_an_edit_during_a_run_is_built_by_the_next_run(tmp_path: Path) -> None:
    """The step sleeps 3 s in its builder: the input is edited (mtime kept) after loading hashed
    it, while Nix builds. That run answers the old content (it read it); the next must not."""
    project = project_with_input(tmp_path, message=uuid.uuid4().hex, sleep=3)
    time.sleep(1.1)  # ctimes older than the fast path's margin: this run could record a stamp
    proc = subprocess.Popen(
        [sys.executable, "-c", CHECK, "run", "graph.toml", "-q"],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    build = project / ".trace" / "build"
    for _ in range(600):
        if build.is_dir() and any(build.glob("*.nix")):
            break
        time.sleep(0.1)
    cp_p(project / "data" / "f", CONTENTS[1])
    _out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    time.sleep(1.1)
    for _ in range(2):
        mode, rc, err = trace(project)
        assert rc == 0, err
        assert answered_text(project, mode).endswith(CONTENTS[1])


NOISY = """\
pkgs.runCommand "noisy" { salt = {{ params.message }}; } ''
  mkdir $out
  echo "$salt" > $out/text
  head -c 16 /dev/urandom | od -x >> $out/text
''
"""


def test_a_cached_step_keeps_its_nondeterminism_warning(tmp_path: Path) -> None:
    make_project(
        tmp_path,
        f"""
        [kinds.noisy]
        template = "templates/noisy.nix.j2"
        check = true
        [kinds.noisy.params.message]
        type = "string"
        [steps.n]
        kind = "noisy"
        params = {{ message = "{uuid.uuid4().hex}" }}
        """,
    )
    (tmp_path / "templates" / "noisy.nix.j2").write_text(NOISY)
    past = time.time() - 100
    for p in tmp_path.rglob("*"):
        os.utime(p, (past, past), follow_symlinks=False)
    time.sleep(1.1)
    first = trace(tmp_path)
    assert first[:2] == ("FULL", 0) and "NONDETERMINISTIC n" in first[2]
    fast = trace(tmp_path)
    assert fast[:2] == ("FAST", 0) and "NONDETERMINISTIC n" in fast[2]
    full = trace(tmp_path, "--full")
    assert full[:2] == ("FULL", 0) and "NONDETERMINISTIC n" in full[2]
