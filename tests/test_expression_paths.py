"""Issue 30 (the gates' cold cost): each file or tree the rendered templates copy into the store is
one `builtins.path` of the generated Nix file, bound once in its top `let` (engine/expression.py,
class Paths) however many steps print it: Nix evaluates every occurrence of the expression anew.

What must hold besides: the .drv paths are those of the old rendering (one `builtins.path` per
occurrence, `plain` mode too), an evaluation error is still blamed on its step and template line,
and an input only imported steps use is not in the file at all.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from engine import expression
from engine.candidate import load_candidate
from engine.graph import load_graph
from engine.graphtypes import Graph
from engine.render import NixExpr, nix_path
from tests.enginekit import keys_of, make_project, write_inputs

REPO = Path(__file__).resolve().parent.parent
FORK = REPO / "tests" / "fixtures" / "fork"
PIPELINE = REPO / "tests" / "fixtures" / "gates" / "pipeline.toml"
COPY = "(builtins.path {"  # render.nix_path's expression


class Inline:
    """The old rendering, as a stand-in for `expression.Paths`: every occurrence of an input is
    its own `nix_path` expression, nothing is bound."""

    def ref(self, abs_path: str) -> NixExpr:
        return nix_path(abs_path)

    def bindings(self) -> list[str]:
        return []


def shared_input_project(tmp: Path, n: int) -> Graph:
    """A chain of n steps printing the same input file; the first one the data/ tree too."""
    steps = ""
    for i in range(n):
        steps += f'[steps.s{i}]\nkind = "text"\nparams = {{ message = "{i} {uuid.uuid4().hex}" }}\n'
        steps += f'needs = ["s{i - 1}"]\n' if i else ""
        more = ', more = "data"' if i == 0 else ""
        steps += f'inputs = {{ data = "data/in0.txt"{more} }}\n'
    graph = make_project(tmp, steps)
    write_inputs(tmp)
    return load_graph(graph, root=tmp)


def instantiate(text: str, file: Path) -> list[str]:
    file.write_text(text, encoding="utf-8")
    out = subprocess.run(["nix-instantiate", str(file)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_an_input_n_steps_print_is_one_builtins_path_of_the_file(tmp_path: Path) -> None:
    graph = shared_input_project(tmp_path, 6)
    text = expression.build(graph, keys_of(graph), list(graph.order)).text
    data = str(tmp_path / "data" / "in0.txt")
    assert text.count(COPY) == 2  # data/in0.txt and the data/ tree, not 7
    assert text.count(nix_path(data).code) == 1
    # every step prints the binding: the same reference, parenthesized as the expression was
    ref = f"(({expression.PATHS}.p0))"  # inputs.values() | list: a list element is parenthesized
    assert text.count(ref) == 6


def test_an_input_only_imported_steps_use_is_not_in_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph = shared_input_project(tmp_path, 3)
    # s0 is clean: its recorded .drv is imported (the store check faked: no Nix here)
    monkeypatch.setattr(expression, "_usable", lambda drv, out: True)
    known = {"s0": ("/nix/store/" + "0" * 32 + "-s0.drv", "/nix/store/" + "1" * 32 + "-s0")}
    expr = expression.build(graph, keys_of(graph), ["s1", "s2"], known)
    assert expr.rendered == ["s1", "s2"] and list(expr.referenced) == ["s0"]
    assert expr.text.count(COPY) == 1  # data/in0.txt, which s1 and s2 print
    assert expr.text.count(nix_path(str(tmp_path / "data" / "in0.txt")).code) == 1
    assert nix_path(str(tmp_path / "data")).code not in expr.text  # only s0 prints the tree


def test_the_owner_map_skips_the_bindings(tmp_path: Path) -> None:
    graph = shared_input_project(tmp_path, 3)
    expr = expression.build(graph, keys_of(graph), list(graph.order))
    lines = expr.text.split("\n")
    for n, line in enumerate(lines, start=1):
        if COPY in line or expression.PATHS + " = {" in line:
            assert n not in expr.owner
    firsts = {sid: min(n for n, s in expr.owner.items() if s == sid) for sid in graph.order}
    for sid, n in firsts.items():
        assert lines[n - 1] == f'    "{sid}" = view ('


@pytest.mark.nix
@pytest.mark.parametrize("plain", [False, True])
def test_the_drvs_are_those_of_one_builtins_path_per_occurrence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plain: bool
) -> None:
    graph = shared_input_project(tmp_path, 5)
    keys, order = keys_of(graph), list(graph.order)
    new = expression.build(graph, keys, order, plain=plain).text
    with monkeypatch.context() as m:
        m.setattr(expression, "Paths", Inline)
        old = expression.build(graph, keys, order, plain=plain).text
    assert old.count(COPY) == 6 and new.count(COPY) == 2
    drvs = instantiate(new, tmp_path / "new.nix")
    assert len(drvs) == 5 and drvs == instantiate(old, tmp_path / "old.nix")
    if plain:  # and those of the engine's own file (view)
        assert drvs == instantiate(expression.build(graph, keys, order).text, tmp_path / "v.nix")


@pytest.mark.nix
def test_the_verify_graph_binds_each_input_once_with_the_same_drvs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The standard verify graph (tests/fixtures/gates/pipeline.toml): over a hundred copies of
    about ten inputs in the old rendering, each once now, every .drv the same."""
    from engine.verify.fork_graph import verify_context

    cand = load_candidate(FORK / "trace" / "candidates" / "cparse-key-overflow" / "candidate.toml")
    graph = load_graph(PIPELINE, root=REPO, context=verify_context(cand, FORK))
    keys, order = keys_of(graph), list(graph.order)
    new = expression.build(graph, keys, order).text
    with monkeypatch.context() as m:
        m.setattr(expression, "Paths", Inline)
        old = expression.build(graph, keys, order).text
    copies = [line.strip() for line in new.split("\n") if COPY in line]
    assert len(copies) == len(set(c.split(" = ", 1)[1] for c in copies))  # each input once
    assert old.count(COPY) > 3 * len(copies)
    drvs = instantiate(new, tmp_path / "new.nix")
    assert len(drvs) == len(order) and drvs == instantiate(old, tmp_path / "old.nix")


@pytest.mark.nix
def test_an_error_below_the_bindings_is_blamed_on_its_step_and_template_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from engine.cli import main

    steps = "".join(
        f'[steps.s{i}]\nkind = "{"odd" if i == 2 else "text"}"\n'
        f'inputs = {{ data = "data/in{i}.txt" }}\n'
        for i in range(4)
    )
    graph = make_project(tmp_path, steps + '[kinds.odd]\ntemplate = "templates/odd.nix.j2"\n')
    write_inputs(tmp_path)
    (tmp_path / "templates" / "odd.nix.j2").write_text(
        'pkgs.runCommand "odd" {\n  src = {{ inputs.data }};\n  y = undefinedName;\n'
        '} "mkdir $out"\n'
    )
    assert main(["plan", str(graph), "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "step 's2' does not evaluate (template " in err and "odd.nix.j2:3)" in err, err
    assert "undefinedName" in err
