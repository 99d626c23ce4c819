"""`trace watch` (engine/watch.py, engine/cli/watch.py): every edit the fast path's stale tests
make (cp -p, rename over, truncate and restore, touch -d, tar x) is noticed, an unreadable read or
one modified during a run takes a full plan, and the loop runs again only on a change; with real
builds, an edited input rebuilds its step and what needs it, and Ctrl-C stops the watch (exit 0).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import watch
from tests.enginekit import make_project
from tests.interrupt import sigint_default
from tests.test_engine_stale import EDITS
from tests.tiers import repeats

PAST = 1_600_000_000_000_000_000


def _tree(tmp: Path) -> tuple[Path, list[tuple[Path, list[str]]]]:
    data = tmp / "proj" / "data"
    data.mkdir(parents=True, exist_ok=True)
    f = data / "in.txt"
    f.write_text("hello\n")
    for p in (f, data):
        os.utime(p, ns=(PAST, PAST))
    return f, [(data, [])]


@settings(
    max_examples=repeats(25, 10),  # the fast tier: 10 (tests/tiers.py)
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(edit=st.sampled_from(sorted(EDITS)), content=st.text(min_size=1, max_size=40))
def test_every_edit_of_the_stale_tests_is_noticed(tmp_path: Path, edit: str, content: str) -> None:
    f, reads = _tree(tmp_path)
    before = watch.snapshot(reads)
    assert before is not None and watch.changed(before, watch.snapshot(reads)) == []
    EDITS[edit](f, content)
    if content != "hello\n":
        assert str(f) in watch.changed(before, watch.snapshot(reads)), edit


def test_same_tick_edits_are_told_apart_by_content(tmp_path: Path) -> None:
    """An edit that keeps every stat field (as a same-tick edit could): a recent file's digest."""
    f, reads = _tree(tmp_path)
    f.write_text("fresh\n")  # modified now: ambiguous, so its digest is kept
    before = watch.snapshot(reads)
    assert before is not None and any(p == str(f) for p, _ in before.digests)
    forged = watch.Snapshot(before.entries, ((str(f), "0" * 64),))
    assert watch.changed(forged, watch.snapshot(reads)) == [str(f)]


def test_an_unreadable_read_or_one_edited_during_the_run_takes_a_full_plan(
    tmp_path: Path,
) -> None:
    f, reads = _tree(tmp_path)
    before = watch.snapshot(reads)
    f.unlink()
    (f.parent).chmod(0o000)
    try:
        if os.geteuid() != 0:  # root reads anything: the unreadable case is a missing tree then
            assert watch.snapshot(reads) is None
    finally:
        f.parent.chmod(0o755)
    assert watch.changed(before, None) and watch.changed(None, before)
    racy = watch.snapshot(reads, since_ns=PAST - 1)  # everything "modified after the load"
    assert racy is not None and racy.racy
    assert watch.changed(racy, watch.snapshot(reads))


class _Result:
    def __init__(self, built: list[str]) -> None:
        self.ok = True
        self.steps = {
            s: type("R", (), {"id": s, "status": "built", "reasons": ["input changed"]})()
            for s in built
        }


def test_the_loop_runs_again_only_after_a_change(tmp_path: Path) -> None:
    f, reads = _tree(tmp_path)
    runs: list[int] = []
    rounds: list[watch.Round] = []
    polls = [0]

    def load_and_run(loaded: Any, why: list[str]) -> _Result:
        loaded(reads)
        runs.append(1)
        return _Result(["s0"] if len(runs) > 1 else [])

    def sleep(_: float) -> None:
        polls[0] += 1
        if polls[0] == 3:  # two quiet polls, then an edit
            EDITS["cp -p"](f, "edited\n")

    assert watch.watch(load_and_run, rounds.append, rounds=2, sleep=sleep) == 2
    assert polls[0] == 3 and rounds[0].why == ["first run"]
    assert rounds[1].why == [str(f)] and rounds[1].rebuilt == [("s0", "built", ["input changed"])]
    assert "  built s0 (input changed)" in list(watch.lines(rounds[1]))


def _three_steps(tmp_path: Path) -> Path:
    """A project of three text steps (a reads data/in.txt, b needs a, c alone), with new
    derivations (built here, not reused from the store): its graph file."""
    new = uuid.uuid4().hex
    graph = make_project(
        tmp_path,
        f"""
        [steps.a]
        kind = "text"
        params = {{ message = "a {new}" }}
        inputs = {{ data = "data/in.txt" }}
        [steps.b]
        kind = "text"
        params = {{ message = "b {new}" }}
        needs = ["a"]
        [steps.c]
        kind = "text"
        params = {{ message = "c {new}" }}
        """,
    )
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "in.txt").write_text("one\n")
    return graph


@pytest.mark.nix
def test_trace_watch_rebuilds_an_edited_input_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    graph = _three_steps(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "watch", str(graph), "--interval", "0.1"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_default,  # Ctrl-C works even if pytest runs in the background
    )
    assert proc.stdout is not None
    seen: list[str] = []

    def until(text: str) -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            assert line, "".join(seen) + proc.stderr.read()  # type: ignore[union-attr]
            seen.append(line)
            if text in line:
                return
        raise AssertionError("".join(seen))

    try:
        until("  ok")
        first = "".join(seen)
        assert "watch: first run" in first and "built c" in first, first
        # the watch holds an idle connection: a round's close of the index is not the last
        # one, so SQLite neither checkpoints (fsyncs) nor deletes the WAL on every round
        wal = tmp_path / ".trace" / "state.db-wal"
        assert wal.exists()
        seen.clear()
        EDITS["rename over"](tmp_path / "data" / "in.txt", "two\n")
        until("  ok")
        second = "".join(seen)
        assert "in.txt" in second and "built a" in second and "built b" in second, second
        assert "built c" not in second, second  # c was not dirty
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "trace watch: stopped" in err, err
    assert not wal.exists()  # its last connection closed: checkpointed, the WAL removed


def _fresh_run_builds_nothing(project: Path) -> dict[str, str]:
    """A fresh `trace run --full` (its own load, hashing and plan) on the watch's state dir:
    every step cached means the watch recorded exactly the keys and results a full plan gives.
    Returns each step's .drv."""
    run = subprocess.run(
        [sys.executable, "-m", "engine.cli", "run", "graph.toml", "--full", "--json", "-q"],
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    steps = json.loads(run.stdout)["steps"]
    assert {s["status"] for s in steps.values()} == {"cached"}, steps
    return {sid: s["drv"] for sid, s in steps.items()}


@pytest.mark.nix
def test_trace_watch_resident_rounds_are_never_stale(tmp_path: Path) -> None:
    """Each kind of edit in one watch: a step's param in the graph file (the resident graph:
    only that step re-validated and rebuilt), the template, an input file, the package set.
    After every round a fresh full `trace run` finds nothing to build and the same .drv paths."""
    graph = _three_steps(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "watch", str(graph)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_default,  # Ctrl-C works even if pytest runs in the background
    )
    assert proc.stdout is not None

    def round_() -> str:
        seen: list[str] = []
        for line in proc.stdout:  # type: ignore[union-attr]
            seen.append(line)
            if line.startswith(("  ok", "  FAILED")):
                return "".join(seen)
        raise AssertionError("".join(seen) + proc.stderr.read())  # type: ignore[union-attr]

    try:
        assert "built c" in round_()
        drvs = _fresh_run_builds_nothing(tmp_path)
        text = graph.read_text()
        graph.write_text(re.sub(r'"b ([0-9a-f]{32})"', r'"b2 \1"', text))
        out = round_()
        assert "built b (param 'message' changed)" in out and "built a" not in out, out
        assert out.startswith(f"watch: {graph} [resident]"), out
        after = _fresh_run_builds_nothing(tmp_path)
        assert {s for s in after if after[s] != drvs[s]} == {"b"}
        template = tmp_path / "templates" / "text.nix.j2"
        template.write_text(template.read_text().replace("mkdir $out", "mkdir -p $out"))
        out = round_()
        assert all(f"built {s} (template changed" in out for s in "abc"), out
        assert out.startswith(f"watch: {template} [full plan]"), out
        _fresh_run_builds_nothing(tmp_path)
        EDITS["cp -p"](tmp_path / "data" / "in.txt", "two\n")
        out = round_()
        assert "built a (input 'data' changed)" in out and "built b" in out, out
        assert "built c" not in out, out
        _fresh_run_builds_nothing(tmp_path)
        pkgs = tmp_path / "pkgs" / "default.nix"
        pkgs.write_text(pkgs.read_text() + "\n# edited\n")
        out = round_()
        while "package set changed" not in out:
            # cp -p sets the times after the copy's close: when that lands after the round it
            # woke has begun (racy) or snapshotted (a change), the watch runs once more (a full
            # plan, everything cached), before or with the package set's edit
            assert out.startswith(f"watch: {tmp_path / 'data' / 'in.txt'}"), out
            assert out.splitlines()[0].endswith("[full plan]"), out
            assert "nothing to rebuild: every step cached" in out, out
            out = round_()
        # a comment: new keys, the same derivations (reused: Nix has them)
        assert all(f"reused {s} (package set changed" in out for s in "abc"), out
        _fresh_run_builds_nothing(tmp_path)
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "trace watch: stopped" in err, err


def test_the_next_resident_is_made_after_the_round_is_reported(tmp_path: Path) -> None:
    """`trace watch` prints a round's result before it makes the resident graph the next round
    starts from (Resident.make or absorb: off the path from an edit to its result); the next
    round makes it first, and a resident that cannot be made is a full plan."""
    import argparse

    from engine.cli.watch import _Rounds

    class Fake:
        def update(self, why: list[str], hasher: Any) -> str:
            return f"updated after {why}"

    args = argparse.Namespace(state_dir=tmp_path, root=tmp_path, graph=tmp_path / "g.toml")
    rounds = _Rounds(args)
    made: list[str] = []

    def make() -> Fake:
        made.append("made")
        return Fake()

    rounds.pending = make
    assert rounds.resident is None and made == []  # not yet: the round is being reported
    assert rounds._update(["g.toml"], None) == "updated after ['g.toml']"
    assert made == ["made"] and rounds.pending is None
    rounds.settle()  # nothing pending: nothing made again
    assert made == ["made"]

    def broken() -> Any:
        raise OSError("gone")

    rounds.pending = broken
    assert rounds._update(["g.toml"], None) is None  # a full plan
    assert rounds.resident is None
