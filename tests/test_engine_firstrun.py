"""A first `trace run` (no state directory yet) evaluates its graph once: before the directory
is made (so a graph that does not evaluate writes nothing), and then builds the `.drv` files that
evaluation gave with `nix-store --realise` instead of evaluating them again in a nix-build
(engine/evaluation.py evaluate_before_state, engine/run.py `evaluated`). Real Nix builds."""

from __future__ import annotations

import json
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest

from engine.evaluation import Preevaluated, drop_expression, evaluate_before_state
from engine.graph import load_graph
from engine.nix import Nix
from engine.run import run_graph
from tests.enginekit import cli, layered_steps, make_project, write_inputs

pytestmark = pytest.mark.nix


def _count_nix(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How often each Nix entry point is called (the real one still runs)."""
    calls = {"instantiate": 0, "build": 0, "realise": 0}
    for name in calls:
        real = getattr(Nix, name)

        def spy(self: Nix, *a: Any, _real: Any = real, _name: str = name, **kw: Any) -> Any:
            calls[_name] += 1
            return _real(self, *a, **kw)

        monkeypatch.setattr(Nix, name, spy)
    return calls


def _project(tmp_path: Path) -> Path:
    graph = make_project(tmp_path / "p", layered_steps(6, width=3, salt=uuid.uuid4().hex))
    write_inputs(graph.parent, width=3)
    return graph


@pytest.mark.usefixtures("own_store_lock")  # which Nix processes run: tests/conftest.py
def test_a_first_run_evaluates_once_and_builds_what_that_evaluation_gave(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph = _project(tmp_path)
    state = graph.parent / ".trace"
    calls = _count_nix(monkeypatch)
    rc, out, err = cli("run", str(graph), "--root", str(graph.parent), "-q", "--timings")
    assert rc == 0, err
    assert "6 steps: 6 built" in out
    assert calls == {"instantiate": 1, "build": 0, "realise": 1}
    assert " instantiate " in err and " realise " in err and " build " not in err
    kept = list((state / "build").glob("*.nix"))  # the evaluated file, kept as a nix-build's
    assert len(kept) == 1
    # the .drv files built are the ones a from-scratch evaluation gives
    rc, out, err = cli("run", str(graph), "--root", str(graph.parent), "--json", "--full")
    assert rc == 0, err
    g = load_graph(graph, root=graph.parent)
    fresh = evaluate_before_state(g, tmp_path / "new", reuse=True)
    assert fresh is not None
    drvs = {sid: r["drv"] for sid, r in json.loads(out)["steps"].items()}
    assert dict(zip(fresh.keys, fresh.evaluated.drvs, strict=True)) == drvs
    assert fresh.evaluated.file.is_file()  # reuse: left for the caller to keep or drop
    drop_expression(fresh.evaluated.file)
    assert not (tmp_path / "new").exists()
    # a second run is no first run: nothing evaluated before the state directory
    calls.update(instantiate=0, build=0, realise=0)
    graph.write_text(graph.read_text().replace("step 5 ", "step 5 changed "))
    rc, out, err = cli("run", str(graph), "--root", str(graph.parent), "-q")
    assert rc == 0 and "1 built" in out, err
    assert calls == {"instantiate": 0, "build": 1, "realise": 0}


@pytest.mark.usefixtures("own_store_lock")  # which Nix processes run: tests/conftest.py
def test_an_evaluation_of_other_keys_is_not_built_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan under the index decides: an evaluation whose keys are not its dirty steps'
    (the graph or the index moved in between) is ignored, and the run evaluates itself."""
    graph = _project(tmp_path)
    g = load_graph(graph, root=graph.parent)
    pre = evaluate_before_state(g, tmp_path / "elsewhere", reuse=True)
    assert pre is not None
    wrong = Preevaluated({s: "0" * 64 for s in pre.keys}, pre.evaluated)
    calls = _count_nix(monkeypatch)
    result = run_graph(g, graph.parent / ".trace", evaluated=wrong)
    assert result.ok and calls == {"instantiate": 0, "build": 1, "realise": 0}
    assert {r.drv for r in result.steps.values()} == set(pre.evaluated.drvs)
    # and one with a step missing (a step cached meanwhile) is not built from either
    fewer = Preevaluated(dict(list(pre.keys.items())[:-1]), pre.evaluated)
    calls.update(instantiate=0, build=0, realise=0)
    again = run_graph(g, tmp_path / "state2", evaluated=fewer)
    assert again.ok and calls == {"instantiate": 0, "build": 1, "realise": 0}
    assert pre.evaluated.file.is_file()  # not built from: the caller's to drop
    drop_expression(pre.evaluated.file)


def test_a_first_run_past_the_chunk_size_realises_in_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past engine.run.REALISE_CHUNK dirty steps a run instantiates, then realises a chunk at a
    time (one Nix process for thousands of steps slows down): a first run too."""
    import engine.run

    monkeypatch.setattr(engine.run, "REALISE_CHUNK", 3)
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    graph = _project(tmp_path)
    calls = _count_nix(monkeypatch)
    rc, out, err = cli("run", str(graph), "--root", str(graph.parent), "-q")
    assert rc == 0 and "6 steps: 6 built" in out, err
    assert calls == {"instantiate": 2, "build": 0, "realise": 2}
    assert list(temporary.iterdir()) == []  # the first evaluation's file is dropped


@pytest.mark.usefixtures("own_store_lock")  # which Nix processes run: tests/conftest.py
def test_a_run_that_finds_the_store_lock_taken_evaluates_before_it_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another trace process's build holds the store's lock (engine/storelock.py): a run does
    not start nix-build, which would hold it to evaluate too, but evaluates at once, unlocked
    (a graph that does not evaluate is refused without a wait: tests/test_hostile_input.py), and
    realises that evaluation's derivations once the lock is free (engine/run.py `_build`)."""
    import fcntl
    import os
    import threading
    import time

    from engine import storelock

    graph = _project(tmp_path)
    g = load_graph(graph, root=graph.parent)
    calls = _count_nix(monkeypatch)
    evaluated_at: list[float] = []
    spied = Nix.instantiate

    def instantiate(self: Nix, *a: Any, **kw: Any) -> Any:
        evaluated_at.append(time.monotonic())
        return spied(self, *a, **kw)

    monkeypatch.setattr(Nix, "instantiate", instantiate)
    held = os.open(storelock.lock_path(storelock.store_of([])), os.O_RDWR | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_EX)
    released_at: list[float] = []

    def release() -> None:
        released_at.append(time.monotonic())
        os.close(held)

    timer = threading.Timer(storelock.NOTICE_AFTER + 2.0, release)
    timer.start()
    try:
        result = run_graph(g, graph.parent / ".trace")
    finally:
        timer.join()
    assert result.ok and [r.status for r in result.steps.values()] == ["built"] * 6
    assert calls == {"instantiate": 1, "build": 1, "realise": 1}  # build: returned at once
    assert evaluated_at[0] < released_at[0]  # evaluated while the lock was still taken
    with_build = run_graph(g, tmp_path / "again")  # the lock free: one nix-build, same drvs
    assert {s: r.drv for s, r in with_build.steps.items()} == {
        s: r.drv for s, r in result.steps.items()
    }
    assert calls == {"instantiate": 1, "build": 2, "realise": 1}
