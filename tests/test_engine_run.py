"""Real nix builds of small generated graphs: cold, no-op, incremental, failure, lock, kill, GC."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from engine.cache import Index
from engine.errors import BusyError
from engine.graph import load_graph
from engine.run import RunResult, run_graph
from tests.conftest import own_store_lock_for
from tests.enginekit import layered_steps, make_project, write_inputs

pytestmark = pytest.mark.nix


def build(graph: Path, **kw: object) -> RunResult:
    g = load_graph(graph, root=graph.parent)
    return run_graph(g, graph.parent / ".trace", **kw)  # type: ignore[arg-type]


def statuses(result: RunResult, status: str) -> set[str]:
    return {s.id for s in result.steps.values() if s.status == status}


@pytest.fixture(scope="module")
def layered(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, RunResult]:
    """30 steps in 3 layers, built once (cold) for the tests below (salted: a lock of its own)."""
    project = tmp_path_factory.mktemp("layered")
    graph = make_project(project, layered_steps(30, salt=uuid.uuid4().hex))
    write_inputs(project)
    with own_store_lock_for(tmp_path_factory):
        return graph, build(graph)


def test_cold_build_builds_every_step(layered: tuple[Path, RunResult]) -> None:
    _, cold = layered
    assert cold.ok and cold.evaluated
    assert statuses(cold, "built") == {f"s{i}" for i in range(30)}
    s12 = Path(cold.steps["s12"].out or "") / "text"
    assert s12.read_text().startswith("step 12")


@pytest.mark.usefixtures("own_store_lock")  # which Nix processes run: tests/conftest.py
def test_one_nix_build_evaluates_and_builds_the_instantiated_derivations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cold run is ONE Nix process (nix-build: evaluation and builds), also with a relative
    state directory, and its .drv paths are those nix-instantiate gives from scratch."""
    from engine.nix import Nix
    from engine.run import evaluate, plan

    graph = make_project(tmp_path / "p", layered_steps(6, width=3, salt=uuid.uuid4().hex))
    write_inputs(graph.parent, width=3)
    monkeypatch.chdir(tmp_path)
    g = load_graph(graph, root=graph.parent)
    result = run_graph(g, Path("p/.trace"))
    assert result.ok and result.nix_calls == 1 and len(statuses(result, "built")) == 6
    assert result.timings.keys() >= {"build"} and "instantiate" not in result.timings
    with Index(tmp_path / "fresh") as index:
        p, _ = plan(g, index)
        ev = evaluate(g, p, p.dirty, Nix(g.nix), index.state_dir, index)
    assert dict(zip(p.dirty, ev.drvs, strict=True)) == {
        sid: r.drv for sid, r in result.steps.items()
    }


def test_noop_run_builds_and_evaluates_nothing(
    layered: tuple[Path, RunResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph, _ = layered
    # Any nix call would fail: the no-op must not make one (not just count none).
    shims = tmp_path / "shims"
    shims.mkdir()
    for tool in ("nix", "nix-instantiate", "nix-store", "nix-build"):
        (shims / tool).write_text("#!/bin/sh\necho called >&2\nexit 99\n")
        (shims / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{shims}:{os.environ['PATH']}")
    again = build(graph)
    assert again.ok
    assert statuses(again, "cached") == set(again.steps)
    assert not again.evaluated and again.nix_calls == 0


@pytest.mark.usefixtures("own_store_lock")  # salted: no wait behind other builds
def test_one_input_changed_rebuilds_exactly_its_cone(layered: tuple[Path, RunResult]) -> None:
    graph, _ = layered
    data = graph.parent / "data" / "in3.txt"
    old = data.read_text()
    data.write_text("changed input\n")
    try:
        result = build(graph)
    finally:
        data.write_text(old)
    # s3 is read by layer 0; s12 (3,4) and s13 (... ) need it in layer 1; layer 2 follows.
    expected = {"s3", "s12", "s13", "s21", "s22", "s23"}
    expected = {"s3"} | {f"s{10 + p}" for p in (2, 3)} | {f"s{20 + p}" for p in (1, 2, 3)}
    assert statuses(result, "built") == expected
    assert statuses(result, "cached") == {f"s{i}" for i in range(30)} - expected
    # and back: the old results are still cached, nothing builds
    assert statuses(build(graph), "cached") == {f"s{i}" for i in range(30)}


def test_plan_explains_why(
    layered: tuple[Path, RunResult], capsys: pytest.CaptureFixture[str]
) -> None:
    from engine.cli import main

    graph, _ = layered
    text = graph.read_text()
    graph.write_text(text.replace('message = "step 25 ', 'message = "step 25 edited '))
    try:
        rc = main(["plan", str(graph), "--root", str(graph.parent)])
        out = capsys.readouterr().out
    finally:
        graph.write_text(text)
    assert rc == 0
    lines = {ln.split()[0]: ln for ln in out.splitlines() if ln.startswith("s")}
    assert "dirty" in lines["s25"] and "param 'message' changed" in lines["s25"]
    assert "clean" in lines["s24"]
    assert "1 of 30 steps would build" in out


def test_new_kind_declared_in_toml_only(tmp_path: Path) -> None:
    graph = make_project(
        tmp_path,
        """
        [kinds.shout]
        template = "templates/shout.nix.j2"
        [kinds.shout.params.word]
        type = "string"
        required = true

        [steps.a]
        kind = "text"
        params = { message = "quiet" }

        [steps.b]
        kind = "shout"
        needs = ["a"]
        params = { word = "loud ${x} \\" '' quote" }
        """,
    )
    (tmp_path / "templates" / "shout.nix.j2").write_text(
        "pkgs.runCommand \"shout\" { word = {{ params.word }}; a = {{ needs.a }}; } ''\n"
        '  printf "%s!" "$word" > $out; cat $a/text >> $out\n'
        "''\n"
    )
    result = build(graph)
    assert result.ok
    assert Path(result.steps["b"].out or "").read_text() == "loud ${x} \" '' quote!quiet\n"


@pytest.mark.usefixtures("own_store_lock")  # which Nix processes run: tests/conftest.py
def test_many_dirty_steps_are_realised_in_chunks_in_graph_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past REALISE_CHUNK dirty steps: one nix-instantiate, then one realise per chunk (graph
    order: a chunk's upstream steps are built before it); every step built once, and the .drv
    paths are the one-nix-build path's (a fresh state dir, below the threshold)."""
    import engine.run

    graph = make_project(tmp_path / "p", layered_steps(6, width=3, salt=uuid.uuid4().hex))
    write_inputs(graph.parent, width=3)
    g = load_graph(graph, root=graph.parent)
    monkeypatch.setattr(engine.run, "REALISE_CHUNK", 2)
    events: list[tuple[str, str]] = []
    chunked = run_graph(g, graph.parent / ".trace", reporter=lambda s, e: events.append((s, e)))
    assert chunked.ok and len(statuses(chunked, "built")) == 6
    assert chunked.nix_calls == 1 + 3  # instantiate, then 3 chunks of 2
    assert chunked.timings.keys() >= {"instantiate", "realise"} and "build" not in chunked.timings
    assert sorted(s for s, e in events if e == "building") == sorted(g.order)  # once each
    monkeypatch.setattr(engine.run, "REALISE_CHUNK", 500)
    one = run_graph(g, tmp_path / "fresh")  # the one-nix-build path: the same derivations
    assert one.nix_calls == 1 and one.ok
    assert {s: r.drv for s, r in one.steps.items()} == {s: r.drv for s, r in chunked.steps.items()}


def test_chunks_leave_out_the_steps_below_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step whose upstream failed in an earlier chunk is skipped, not realised in its own
    chunk (which would build the failed step again); independent steps still build."""
    import engine.run

    graph = make_project(
        tmp_path,
        f"""
        [steps.bad]
        kind = "text"
        params = {{ fail = true, message = "{uuid.uuid4().hex}" }}
        [steps.ok]
        kind = "text"
        params = {{ message = "{uuid.uuid4().hex}" }}
        [steps.after]
        kind = "text"
        needs = ["bad"]
        [steps.last]
        kind = "text"
        needs = ["after"]
        [steps.free]
        kind = "text"
        needs = ["ok"]
        """,
    )
    monkeypatch.setattr(engine.run, "REALISE_CHUNK", 2)
    events: list[tuple[str, str]] = []
    g = load_graph(graph, root=graph.parent)
    result = run_graph(g, graph.parent / ".trace", reporter=lambda s, e: events.append((s, e)))
    got = {s: r.status for s, r in result.steps.items()}
    assert got == {
        "bad": "failed",
        "ok": "built",
        "after": "skipped",
        "last": "skipped",
        "free": "built",
    }
    assert "failing on purpose: bad" in (result.steps["bad"].log_tail or "")
    assert [s for s, e in events if e == "building"].count("bad") == 1


@pytest.mark.usefixtures("own_store_lock")  # salted: no wait behind other builds
def test_failure_is_reported_not_cached_and_downstream_skipped(tmp_path: Path) -> None:
    graph = make_project(
        tmp_path,
        f"""
        [steps.ok]
        kind = "text"
        params = {{ message = "{uuid.uuid4().hex}" }}
        [steps.bad]
        kind = "text"
        params = {{ fail = true, message = "{uuid.uuid4().hex}" }}
        [steps.after]
        kind = "text"
        needs = ["bad", "ok"]
        """,
    )
    result = build(graph)
    assert not result.ok
    assert result.steps["ok"].status == "built"
    bad = result.steps["bad"]
    assert bad.status == "failed" and bad.drv and "failing on purpose: bad" in (bad.log_tail or "")
    assert result.steps["after"].status == "skipped"
    again = build(graph)  # failures are not cached: the step is tried again
    assert again.steps["bad"].status == "failed" and again.steps["ok"].status == "cached"


def test_cli_run_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from engine.cli import main

    graph = make_project(tmp_path, '[steps.bad]\nkind = "text"\nparams = { fail = true }\n')
    rc = main(["run", str(graph), "--root", str(tmp_path), "-q"])
    assert rc == 1
    assert "FAILED bad" in capsys.readouterr().err


def test_nix_evaluation_error_names_the_step(tmp_path: Path) -> None:
    from engine.errors import InputError

    graph = make_project(tmp_path, '[steps.a]\nkind = "text"\n[steps.broken]\nkind = "broken"\n')
    graph.write_text(graph.read_text() + '[kinds.broken]\ntemplate = "templates/broken.nix.j2"\n')
    (tmp_path / "templates" / "broken.nix.j2").write_text("pkgs.noSuchThing { }\n")
    with pytest.raises(InputError) as info:
        build(graph)
    assert "step 'broken' does not evaluate" in info.value.message
    assert "noSuchThing" in info.value.message


def _slow_project(tmp_path: Path, seconds: int) -> Path:
    salt = uuid.uuid4().hex
    return make_project(
        tmp_path,
        f"""
        [steps.fast]
        kind = "text"
        params = {{ message = "fast {salt}" }}
        [steps.slow]
        kind = "text"
        needs = ["fast"]
        params = {{ message = "slow {salt}", sleep = {seconds} }}
        """,
    )


def _start_run(graph: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "run", str(graph), "--root", str(graph.parent)],
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _wait_building(proc: subprocess.Popen[str], step: str) -> None:
    assert proc.stderr is not None
    deadline = time.monotonic() + 60
    for line in proc.stderr:
        if "building" in line and line.split()[-1] == step:
            return
        assert time.monotonic() < deadline
    raise AssertionError(f"{step} never started building")


def test_concurrent_run_is_refused_then_waits(tmp_path: Path) -> None:
    graph = _slow_project(tmp_path, 3)
    first = _start_run(graph)
    try:
        _wait_building(first, "slow")
        with pytest.raises(BusyError):
            build(graph)
        waited = build(graph, wait=60)  # blocks until the first run releases the lock
        assert statuses(waited, "cached") == {"fast", "slow"}
    finally:
        first.wait(timeout=60)
    assert first.returncode == 0


def test_run_killed_mid_build_resumes_correctly(tmp_path: Path) -> None:
    graph = _slow_project(tmp_path, 3)
    proc = _start_run(graph)
    _wait_building(proc, "slow")
    os.killpg(proc.pid, signal.SIGKILL)  # trace and its nix child, mid-build
    proc.wait(timeout=10)
    resumed = build(graph)  # the same graph, unchanged
    assert resumed.ok
    assert resumed.steps["fast"].status in ("reused", "cached")
    assert resumed.steps["slow"].status == "built"
    assert statuses(build(graph), "cached") == {"fast", "slow"}


def test_results_survive_garbage_collection(
    layered: tuple[Path, RunResult], tmp_path: Path
) -> None:
    """What `nix-collect-garbage` does, path by path, without deleting other work on this store:
    every cached output is alive (a root holds it), while an unrooted output of the same kind is
    collected; then a no-op run still answers every step from the cache."""
    graph, cold = layered
    outs = [s.out for s in cold.steps.values() if s.out]
    dead = subprocess.run(
        ["nix-store", "--gc", "--print-dead"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert not set(outs) & set(dead)
    # A control: the same kind of step, built without trace, has no root and is collected.
    other = make_project(
        tmp_path, f'[steps.x]\nkind = "text"\nparams = {{ message = "{uuid.uuid4().hex}" }}\n'
    )
    from engine.evaluation import render_expression
    from engine.run import plan

    g = load_graph(other, root=tmp_path)
    with Index(tmp_path / ".trace") as index:
        p, _ = plan(g, index)
    expr = tmp_path / "x.nix"
    expr.write_text(render_expression(g, p, ["x"])[0])
    built = subprocess.run(
        ["nix-build", str(expr), "--no-out-link"], capture_output=True, text=True, check=True
    ).stdout.split()
    for auto in Path("/nix/var/nix/gcroots/auto").iterdir():  # nix-build's own temp roots
        if auto.is_symlink() and not Path(os.readlink(auto)).exists():
            auto.unlink(missing_ok=True)  # another process on this store may remove it first
    collected = subprocess.run(["nix-store", "--delete", *built], capture_output=True, text=True)
    assert collected.returncode == 0, collected.stderr
    # Ours: deleting is refused because a root holds each of them.
    for out in outs[:3]:
        refused = subprocess.run(["nix-store", "--delete", out], capture_output=True, text=True)
        assert refused.returncode != 0 and "alive" in refused.stderr
    assert statuses(build(graph), "cached") == set(cold.steps)


def test_gc_drops_roots_no_graph_references(tmp_path: Path) -> None:
    salt = uuid.uuid4().hex
    graph = make_project(tmp_path, f'[steps.a]\nkind = "text"\nparams = {{ message = "{salt}" }}\n')
    first = build(graph)
    graph.write_text(graph.read_text().replace(salt, salt + "-v2"))
    second = build(graph)
    with Index(tmp_path / ".trace") as index:
        roots = {p.name for p in index.gcroots.iterdir() if not p.name.startswith(".")}
        assert {first.steps["a"].key, second.steps["a"].key} <= roots
        keep = {row[0] for row in index.db.execute("SELECT key FROM last_keys")}
        dropped = index.gc(keep)
    assert dropped == [first.steps["a"].key]
    assert statuses(build(graph), "cached") == {"a"}


def test_engine_code_is_part_of_every_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A changed engine (even at the same version) never answers from an older engine's results."""
    from engine import plan as plan_mod

    graph = make_project(tmp_path, '[steps.a]\nkind = "text"\n')
    first = build(graph)
    assert statuses(build(graph), "cached") == {"a"}
    assert plan_mod.engine_id().startswith("0.")
    monkeypatch.setattr(plan_mod, "_ENGINE_ID", "0.1.0+another-build-of-the-engine")
    again = build(graph)
    assert again.steps["a"].key != first.steps["a"].key
    assert again.steps["a"].status in ("built", "reused")
    assert "engine version changed" in again.steps["a"].reasons


def test_gc_cli_forgets_deleted_graphs_and_sweeps_orphaned_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from engine.cache import GCROOTS_BASE, sweep_orphans
    from engine.cli import main

    salt = uuid.uuid4().hex
    graph = make_project(
        tmp_path / "p", f'[steps.a]\nkind = "text"\nparams = {{ message = "{salt}" }}\n'
    )
    result = build(graph)
    root = tmp_path / "p"
    graph.unlink()
    assert main(["gc", "--root", str(root)]) == 0
    out = capsys.readouterr().out
    assert "dropped 1 GC roots" in out and "forgot 1 graph(s)" in out
    with Index(root / ".trace") as index:
        assert result.steps["a"].key not in {p.name for p in index.gcroots.iterdir()}
        folder = index.gcroots
    # a state dir that is gone altogether: its root folder is swept
    other = make_project(tmp_path / "q", '[steps.a]\nkind = "text"\n')
    build(other)
    with Index(tmp_path / "q" / ".trace") as index:
        q_roots = index.gcroots
    import shutil

    shutil.rmtree(tmp_path / "q")
    sweep_orphans()  # (another test session's sweep at exit may have removed it first)
    assert not q_roots.exists()
    assert folder.exists() and folder.is_relative_to(GCROOTS_BASE)


def test_cli_graph_and_json(
    layered: tuple[Path, RunResult], capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from engine.cli import main

    graph, _ = layered
    assert main(["graph", str(graph), "--root", str(graph.parent), "--format", "mermaid"]) == 0
    mermaid = capsys.readouterr().out
    assert mermaid.startswith("flowchart LR") and mermaid.count("-->") == 40
    assert main(["graph", str(graph), "--root", str(graph.parent)]) == 0
    dot = capsys.readouterr().out
    assert (
        dot.startswith("digraph trace") and dot.count("->") == 40 and 'label="s0\\n(text)"' in dot
    )
    assert main(["run", str(graph), "--root", str(graph.parent), "--json", "--full"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {s["status"] for s in data["steps"].values()} == {"cached"}
    assert main(["plan", str(graph), "--root", str(graph.parent), "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert len(plan["steps"]) == 30 and not any(s["dirty"] for s in plan["steps"])
