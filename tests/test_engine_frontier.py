"""Issue 14: a changed step costs what `nix-build -A <that step>` costs.

Only the dirty frontier is rendered; clean upstream steps are imported by their recorded `.drv`
(engine/expression.py). What must hold, structurally (timings live in bench/):
- the `.drv` paths are those of a from-scratch evaluation (a fresh state directory) and those a
  Nix user's plain expression gives;
- the number of templates rendered for one changed sink is the frontier's size, whatever N is;
- a record that cannot be trusted to name the step's derivation (its .drv gone from the store,
  or a .drv of another output) costs a render, never a wrong derivation;
- a frontier evaluation that fails falls back to a from-scratch one (which also does the blame).
"""

from __future__ import annotations

import sqlite3
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from engine import expression
from engine.cache import Index
from engine.errors import InputError
from engine.graph import load_graph
from engine.run import RunResult, evaluate, known_drvs, plan, run_graph
from tests.enginekit import layered_steps, make_project, write_inputs

pytestmark = pytest.mark.nix

SINK = "s29"  # layered_steps(30): layers s0-s9, s10-s19, s20-s29
IMPORTED = ' = import (/. + "/nix/store/'  # a clean step bound to its recorded .drv


def build(graph: Path, state: Path | None = None) -> RunResult:
    g = load_graph(graph, root=graph.parent)
    return run_graph(g, state or graph.parent / ".trace")


def drvs(result: RunResult) -> dict[str, str]:
    return {sid: str(s.drv) for sid, s in result.steps.items()}


def edit_message(graph: Path, sid: str, text: str) -> None:
    old = graph.read_text()
    head = f"[steps.{sid}]\n"
    start = old.index(head)
    line_start = old.index("params = ", start)
    line_end = old.index("\n", line_start)
    graph.write_text(old[:line_start] + f'params = {{ message = "{text}" }}' + old[line_end:])


@pytest.fixture
def project(tmp_path: Path) -> Path:
    graph = make_project(tmp_path / "p", layered_steps(30, salt=uuid.uuid4().hex))
    write_inputs(graph.parent)
    assert build(graph).count("built") == 30
    return graph


def from_scratch(graph: Path, tmp: Path) -> RunResult:
    """The same graph evaluated with a fresh state directory: nothing is known, all rendered."""
    fresh = build(graph, tmp / f"fresh-{uuid.uuid4().hex[:6]}")
    assert fresh.rendered == len(fresh.steps)  # the control really rendered everything
    return fresh


def plain_drvs(graph: Path, targets: list[str]) -> list[str]:
    """nix-instantiate of the expression a Nix user would write (no view, nothing imported)."""
    g = load_graph(graph, root=graph.parent)
    with Index(graph.parent / ".trace-plain") as index:
        p, _ = plan(g, index)
    keys = {sid: sp.key for sid, sp in p.steps.items()}
    file = graph.parent / "plain.nix"
    file.write_text(expression.build(g, keys, targets, plain=True).text)
    out = subprocess.run(["nix-instantiate", str(file)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_one_changed_sink_renders_one_template_and_the_drvs_of_a_scratch_evaluation(
    project: Path, tmp_path: Path
) -> None:
    edit_message(project, SINK, f"changed {uuid.uuid4().hex}")
    again = build(project)
    assert again.count("built") == 1 and again.count("cached") == 29
    assert again.rendered == 1  # not the sink's 20-step upstream closure
    fresh = from_scratch(project, tmp_path)
    assert drvs(again) == drvs(fresh)
    order = sorted(drvs(again))
    assert [drvs(again)[s] for s in order] == plain_drvs(project, order)


def test_templates_rendered_grow_with_the_frontier_not_with_n(tmp_path: Path) -> None:
    counts: dict[int, int] = {}
    for n in (20, 60):
        graph = make_project(tmp_path / f"n{n}", layered_steps(n, salt=uuid.uuid4().hex))
        write_inputs(graph.parent)
        build(graph)
        edit_message(graph, f"s{n - 1}", "changed")
        counts[n] = build(graph).rendered
    assert counts == {20: 1, 60: 1}


def test_a_changed_middle_step_renders_exactly_the_dirty_steps(
    project: Path, tmp_path: Path
) -> None:
    edit_message(project, "s12", "middle changed")
    g = load_graph(project, root=project.parent)
    with Index(project.parent / ".trace") as index:
        p, _ = plan(g, index)
    dirty = set(p.dirty)
    assert dirty == {"s12", "s21", "s22"}  # s21 needs s11+s12; s22 needs s12+s13
    again = build(project)
    assert again.rendered == len(dirty) and again.count("built") == len(dirty)
    assert drvs(again) == drvs(from_scratch(project, tmp_path))


def _set_row(state: Path, key: str, **cols: str) -> None:
    db = sqlite3.connect(state / "state.db")
    with db:
        for col, value in cols.items():
            db.execute(f"UPDATE results SET {col} = ? WHERE key = ?", (value, key))
    db.close()


@pytest.mark.parametrize("lie", ["drv-gone", "drv-of-another-output"])
def test_a_record_that_does_not_name_the_steps_derivation_is_rendered_not_imported(
    project: Path, tmp_path: Path, lie: str
) -> None:
    state = project.parent / ".trace"
    first = build(project)  # all cached: the rows as recorded
    upstream = first.steps["s19"]  # s29 needs s19 and s10
    other = first.steps["s5"]
    # gone: no such file in the store; another output: a real derivation, of another step
    fake = "/nix/store/" + "0" * 32 + "-s19.drv" if lie == "drv-gone" else str(other.drv)
    _set_row(state, upstream.key, drv=fake)
    edit_message(project, SINK, f"changed {uuid.uuid4().hex}")
    again = build(project)
    assert again.ok and again.count("built") == 1
    assert again.rendered == 2  # the sink and s19, whose record was not followed
    assert drvs(again)[SINK] == drvs(from_scratch(project, tmp_path))[SINK]


class FakeNix:
    """nix-instantiate that fails on any file importing a recorded .drv (as a store that no
    longer reads one would) and answers the from-scratch file with given paths."""

    def __init__(self, answer: list[str]) -> None:
        self.answer = answer
        self.files: list[str] = []

    def instantiate(self, file: Path) -> tuple[int, list[str], str]:
        text = file.read_text()
        self.files.append(text)
        if IMPORTED in text:
            return 1, [], "error: cannot read that derivation"
        return 0, self.answer, ""


def test_a_failing_frontier_evaluation_falls_back_to_a_scratch_one(project: Path) -> None:
    edit_message(project, SINK, f"changed {uuid.uuid4().hex}")
    g = load_graph(project, root=project.parent)
    with Index(project.parent / ".trace") as index:
        p, cached = plan(g, index)
        known = known_drvs(p, cached)
        fake = FakeNix(["/nix/store/" + "1" * 32 + "-s29.drv"])
        ev = evaluate(g, p, p.dirty, fake, index.state_dir, index, known)
    assert len(fake.files) == 2 and IMPORTED in fake.files[0]
    assert IMPORTED not in fake.files[1]
    assert ev.drvs == fake.answer and ev.rendered == 6  # s29 + s19, s10 + s9, s0, s1


def test_a_template_error_under_a_clean_upstream_is_blamed_on_its_step(project: Path) -> None:
    tmpl = project.parent / "templates" / "broken.nix.j2"
    tmpl.write_text('builtins.throw ("broken on purpose: " + {{ step.id }})\n')
    text = project.read_text() + (
        '\n[kinds.broken]\ntemplate = "templates/broken.nix.j2"\n'
        '\n[steps.late]\nkind = "broken"\nneeds = ["s29"]\n'
    )
    project.write_text(text)
    with pytest.raises(InputError) as err:
        build(project)
    assert "step 'late' does not evaluate" in str(err.value)
    assert err.value.line == text.splitlines().index("[steps.late]") + 1


def test_plan_evaluates_the_frontier_only(project: Path, capsys: Any) -> None:
    from engine.cli import main

    edit_message(project, SINK, "plan me")
    rc = main(["plan", str(project), "--root", str(project.parent)])
    assert rc == 0
    out = capsys.readouterr().out
    assert "1 of 30 steps would build" in out
    newest = max(
        (project.parent / ".trace" / "build").glob("*.nix"), key=lambda f: f.stat().st_mtime_ns
    )
    body = newest.read_text()
    assert body.count(" = view (") == 1 and body.count(IMPORTED) == 2


@pytest.mark.usefixtures("own_store_lock")  # which Nix processes run: tests/conftest.py
def test_run_timings_name_every_phase(project: Path, capsys: Any) -> None:
    from engine.cli import main

    edit_message(project, SINK, "timed")
    assert main(["run", str(project), "--root", str(project.parent), "-q", "--timings"]) == 0
    line = next(ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("timings: "))
    phases = [part.split(" ")[0] for part in line.removeprefix("timings: ").split(", ")]
    # one nix-build evaluates and builds (no separate instantiate and realise phases)
    assert phases == ["load", "plan", "render", "build", "collect", "check", "record"]
