"""`trace run --rebuild STEP…` / `--rebuild-all` (issue 28): chosen steps are rebuilt even when
cached, with Nix's `--check`: a rebuild that matches is confirmed, one that differs is reported
(exit 1) and the store keeps its output (never silently replaced); unknown names are refused
before any work (exit 2). Real builds."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

import pytest

from engine.cli import main
from tests.enginekit import make_project

pytestmark = pytest.mark.nix


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """`steady` (deterministic), `noisy` (a new uuid every build) and `after` (needs steady)."""
    salt = uuid.uuid4().hex
    graph = make_project(
        tmp_path,
        f"""
        [steps.steady]
        kind = "text"
        params = {{ message = "{salt}" }}
        [steps.noisy]
        kind = "text"
        params = {{ message = "{salt}" }}
        [steps.after]
        kind = "text"
        needs = ["steady"]
        params = {{ message = "{salt}" }}
        """,
    )
    tmpl = tmp_path / "templates" / "text.nix.j2"
    tmpl.write_text(
        tmpl.read_text().replace(
            "  for u in $upstream;",
            '  if [ "$stepid" = noisy ]; then cat /proc/sys/kernel/random/uuid >> $out/text; fi\n'
            "  for u in $upstream;",
        )
    )
    assert main(["run", str(graph), "--root", str(tmp_path), "-q"]) == 0
    return graph


def run(graph: Path, *extra: str) -> int:
    return main(["run", str(graph), "--root", str(graph.parent), "-q", "--json", *extra])


def outputs(capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, dict[str, object]], str]:
    import json

    cap = capsys.readouterr()
    return json.loads(cap.out)["steps"], cap.err


def test_a_deterministic_step_rebuilt_matches_and_stays_cached(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert run(project, "--rebuild", "steady") == 0
    steps, err = outputs(capsys)
    assert steps["steady"]["status"] == "cached" and steps["steady"]["rebuilt"] == "same"
    assert steps["steady"]["deterministic"] is True
    assert steps["noisy"]["rebuilt"] is None and steps["after"]["rebuilt"] is None
    assert "REBUILT" not in err


def test_a_rebuild_that_differs_is_reported_and_the_store_keeps_its_output(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert run(project) == 0
    before, _ = outputs(capsys)
    out = Path(str(before["noisy"]["out"]))
    text = (out / "text").read_text()
    assert run(project, "--rebuild", "noisy") == 1
    steps, err = outputs(capsys)
    assert steps["noisy"]["rebuilt"] == "differs" and steps["noisy"]["deterministic"] is False
    assert f"REBUILT DIFFERENTLY noisy: its rebuild differs from {out}" in err
    assert (out / "text").read_text() == text  # not replaced
    assert steps["noisy"]["out"] == str(out)
    # the finding is this run's: the next plain run is cached and quiet, as before
    assert run(project) == 0
    steps, err = outputs(capsys)
    assert steps["noisy"]["status"] == "cached" and "REBUILT" not in err


def test_rebuild_all_rebuilds_every_step(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert run(project, "--rebuild-all") == 1
    steps, _ = outputs(capsys)
    assert {s: v["rebuilt"] for s, v in steps.items()} == {
        "steady": "same",
        "noisy": "differs",
        "after": "same",
    }


def test_an_unknown_step_is_refused_before_any_work(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = project.parent / ".trace" / "state.db"
    with sqlite3.connect(state) as db:
        before = db.execute("SELECT count(*) FROM results").fetchone()
    capsys.readouterr()
    assert run(project, "--rebuild", "steady", "nosuch") == 2
    err = capsys.readouterr().err
    assert "--rebuild nosuch: the graph has no step of that name" in err
    assert "after, noisy, steady" in err
    with sqlite3.connect(state) as db:
        assert db.execute("SELECT count(*) FROM results").fetchone() == before
