"""The hot path imports only what it uses: a `trace plan` or `trace run` whose graph comes from
the load cache (nothing it was loaded from changed, engine/loadcache.py) imports no pydantic and
no engine.graph; a full load of plainly valid files (engine/plainfile.py) no pydantic either:
pipeline files are validated as they are read, and the graph, plan and results
that flow between modules are plain dataclasses (engine/graphtypes.py, engine/run.py,
engine/cache.py, engine/machine.py). Checked in the sys.modules of a fresh interpreter
running the CLI; each test's first call is the control (a full load does import it). Timings live
in bench/."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.enginekit import layered_steps, make_project, write_inputs

WATCHED = ("pydantic", "engine.spec", "engine.graph", "jinja2")
SCRIPT = (
    "import sys\n"
    "from engine.cli import main\n"
    "rc = main(sys.argv[1:])\n"
    f"print('IMPORTED', *[m for m in {WATCHED!r} if m in sys.modules])\n"
    "sys.exit(rc)\n"
)


@pytest.fixture(autouse=True)
def _own_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))


def trace(*args: str) -> tuple[int, set[str], str]:
    """(exit status, the watched modules imported, stdout + stderr) of one CLI call."""
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, *args],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        check=False,
    )
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("IMPORTED"))
    return proc.returncode, set(line.split()[1:]), proc.stdout + proc.stderr


def test_plan_from_the_load_cache_imports_no_pydantic_and_no_jinja2(tmp_path: Path) -> None:
    graph = make_project(tmp_path / "p", layered_steps(20, width=5))
    write_inputs(graph.parent, width=5)
    args = ("plan", str(graph), "--root", str(graph.parent), "--state-dir", str(tmp_path / "s"))
    rc, first, out = trace(*args, "--no-eval")
    # the control: a full load (engine.graph), of plainly valid files: no pydantic either
    assert rc == 0 and "engine.graph" in first and "pydantic" not in first, out
    rc, again, out = trace(*args, "--no-eval")
    assert rc == 0 and "20 of 20 steps would build" in out
    assert again & {"pydantic", "engine.spec", "engine.graph"} == set(), (again, out)
    # an edit of one step's table: the entry is brought up to date (engine/resident.py), the
    # table checked without pydantic (engine/steptable.py)
    text = graph.read_text()
    graph.write_text(text.replace('message = "step 19 "', 'message = "step 19 edited"'))
    rc, edited, out = trace(*args, "--no-eval")
    assert rc == 0 and "20 of 20 steps would build" in out
    assert edited & {"pydantic", "engine.spec", "engine.graph"} == set(), (edited, out)
    # a step table that is not plainly valid: pydantic decides (here: accepts it)
    graph.write_text(text.replace('"step 19 " }', '"step 19 " }\nrepeat = 1'))
    rc, repeated, out = trace(*args, "--no-eval")
    assert rc == 0 and "pydantic" in repeated, out
    # any other edit is a miss: loaded again (engine.graph), plainly valid: without pydantic
    graph.write_text("# edited\n" + text)
    rc, missed, out = trace(*args, "--no-eval")
    assert rc == 0 and "engine.graph" in missed and "pydantic" not in missed, out


@pytest.mark.nix
def test_a_run_from_the_load_cache_builds_and_fails_without_pydantic(tmp_path: Path) -> None:
    """A step that fails stays dirty: the second run plans from the load cache and builds it
    again with one nix-build, and reports the failure, importing no pydantic."""
    salt = uuid.uuid4().hex
    graph = make_project(
        tmp_path / "p",
        f'[steps.ok]\nkind = "text"\nparams = {{ message = "{salt}" }}\n'
        f'[steps.bad]\nkind = "text"\nneeds = ["ok"]\n'
        f'params = {{ message = "{salt}", fail = true }}\n',
    )
    args = ("run", str(graph), "--root", str(graph.parent), "--state-dir", str(tmp_path / "s"))
    rc, first, out = trace(*args, "-q")
    assert rc == 1 and "FAILED bad" in out and "engine.graph" in first, out  # the control
    rc, again, out = trace(*args, "-q")
    assert rc == 1 and "FAILED bad" in out and "failing on purpose: bad" in out, out
    assert "2 steps: 1 cached, 1 failed" in out
    assert again & {"pydantic", "engine.spec", "engine.graph"} == set(), (again, out)
