"""Loading and validation: every bad input is a clear InputError (exit 2); nothing is built."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.cli import main
from engine.errors import InputError
from engine.graph import find_line, load_graph, needed_by
from tests.enginekit import make_project


def load(project_graph: Path) -> None:
    load_graph(project_graph, root=project_graph.parent)


def error_of(tmp_path: Path, steps: str) -> InputError:
    graph = make_project(tmp_path, steps)
    (tmp_path / "data").mkdir(exist_ok=True)
    (tmp_path / "data" / "x.txt").write_text("x")
    with pytest.raises(InputError) as info:
        load(graph)
    return info.value


def test_valid_graph_orders_steps_and_expands_repeat(tmp_path: Path) -> None:
    graph = make_project(
        tmp_path,
        """
        [steps.b]
        kind = "text"
        needs = ["a"]
        [steps.a]
        kind = "text"
        repeat = 3
        """,
    )
    g = load_graph(graph, root=tmp_path)
    assert list(g.order) == ["a@1", "a@2", "a@3", "b"]
    assert g.steps["b"].needs == ("a@1", "a@2", "a@3")
    assert g.steps["a@2"].repeat_index == 2
    assert g.steps["b"].params == {"message": "hi", "fail": False, "sleep": 0}


def test_needed_by_keeps_the_named_steps_and_what_they_need_in_order(tmp_path: Path) -> None:
    graph = make_project(
        tmp_path,
        """
        [steps.c]
        kind = "text"
        needs = ["b"]
        [steps.b]
        kind = "text"
        needs = ["a"]
        [steps.a]
        kind = "text"
        repeat = 2
        [steps.other]
        kind = "text"
        """,
    )
    g = load_graph(graph, root=tmp_path)
    cut = needed_by(g, ["b"])
    assert cut.order == ("a@1", "a@2", "b")
    assert set(cut.steps) == {"a@1", "a@2", "b"}
    assert needed_by(g, ["a"]).order == ("a@1", "a@2")
    assert needed_by(g, ["nothing"]).order == ()


def test_unknown_kind_suggests_closest(tmp_path: Path) -> None:
    err = error_of(tmp_path, '[steps.a]\nkind = "txt"\n')
    assert "unknown kind 'txt'" in err.message
    assert err.key == "steps.a.kind"
    assert err.line is not None and err.file and err.file.endswith("graph.toml")
    assert err.hint and "did you mean 'text'" in err.hint


def test_misspelled_need_suggests_closest(tmp_path: Path) -> None:
    err = error_of(
        tmp_path, '[steps.compile]\nkind = "text"\n[steps.b]\nkind = "text"\nneeds = ["compil"]\n'
    )
    assert "unknown step 'compil'" in err.message
    assert err.hint and "did you mean 'compile'" in err.hint
    assert err.key == "steps.b.needs"
    lines = (tmp_path / "graph.toml").read_text().splitlines()
    assert err.line is not None and "needs" in lines[err.line - 1]


def test_cycle_prints_the_path(tmp_path: Path) -> None:
    err = error_of(
        tmp_path,
        """
        [steps.a]
        kind = "text"
        needs = ["c"]
        [steps.b]
        kind = "text"
        needs = ["a"]
        [steps.c]
        kind = "text"
        needs = ["b"]
        """,
    )
    assert err.message.startswith("dependency cycle: ")
    path = err.message.removeprefix("dependency cycle: ").split(" -> ")
    assert path[0] == path[-1] and set(path) == {"a", "b", "c"}


def test_parameter_type_error(tmp_path: Path) -> None:
    err = error_of(tmp_path, '[steps.a]\nkind = "text"\nparams = { sleep = "five" }\n')
    assert "parameter 'sleep' must be an integer" in err.message
    assert err.key == "steps.a.params.sleep"


def test_unknown_parameter_suggests(tmp_path: Path) -> None:
    err = error_of(tmp_path, '[steps.a]\nkind = "text"\nparams = { mesage = "x" }\n')
    assert "no parameter 'mesage'" in err.message
    assert err.hint and "did you mean 'message'" in err.hint


def test_missing_input_file(tmp_path: Path) -> None:
    err = error_of(tmp_path, '[steps.a]\nkind = "text"\ninputs = { d = "data/nope.txt" }\n')
    assert "does not exist" in err.message and err.key == "steps.a.inputs.d"


def test_path_escaping_root(tmp_path: Path) -> None:
    outside = tmp_path.parent / f"{tmp_path.name}-outside.txt"
    outside.write_text("secret")
    err = error_of(
        tmp_path / "p", f'[steps.a]\nkind = "text"\ninputs = {{ d = "../../{outside.name}" }}\n'
    )
    assert "escapes the project root" in err.message


def test_duplicate_ids_across_includes(tmp_path: Path) -> None:
    make_project(tmp_path, '[steps.a]\nkind = "text"\n')
    (tmp_path / "more.toml").write_text('[steps.a]\nkind = "text"\n')
    main_graph = tmp_path / "main.toml"
    main_graph.write_text('include = ["graph.toml", "more.toml"]\n')
    with pytest.raises(InputError) as info:
        load(main_graph)
    assert "declared twice" in info.value.message and "graph.toml" in info.value.message


def test_missing_template(tmp_path: Path) -> None:
    graph = make_project(tmp_path, "")
    graph.write_text(graph.read_text().replace("templates/text.nix.j2", "templates/nope.nix.j2"))
    with pytest.raises(InputError) as info:
        load(graph)
    assert "does not exist" in info.value.message and info.value.key == "kinds.text.template"


def test_template_that_does_not_compile(tmp_path: Path) -> None:
    from engine.cache import Index
    from engine.evaluation import render_expression
    from engine.run import plan

    graph = make_project(tmp_path, '[steps.a]\nkind = "text"\n')
    (tmp_path / "templates" / "text.nix.j2").write_text("pkgs.runCommand {{ step.id ")
    g = load_graph(graph, root=tmp_path)
    with Index(tmp_path / ".trace") as index:
        p, _ = plan(g, index)
    # rendering happens before any nix call and before the expression file is written
    with pytest.raises(InputError) as info:
        render_expression(g, p, ["a"])
    assert "template does not compile" in info.value.message
    assert info.value.file and info.value.file.endswith("text.nix.j2")


def test_toml_syntax_error_names_line(tmp_path: Path) -> None:
    graph = make_project(tmp_path, "[steps.a\nkind = 1\n")
    with pytest.raises(InputError) as info:
        load(graph)
    assert "TOML syntax error" in info.value.message and info.value.line is not None


def test_unknown_key_is_rejected(tmp_path: Path) -> None:
    err = error_of(tmp_path, '[steps.a]\nkind = "text"\nneeds_typo = []\n')
    assert err.key == "steps.a.needs_typo" and "remove or rename" in (err.hint or "")


def test_unknown_var_lists_known(tmp_path: Path) -> None:
    graph = make_project(
        tmp_path, '[steps.a]\nkind = "text"\nparams = { message = { var = "c.x" } }\n'
    )
    with pytest.raises(InputError) as info:
        load_graph(graph, root=tmp_path, context={"c": {"y": 1}})
    assert "unknown variable 'c.x'" in info.value.message and "c.y" in (info.value.hint or "")


def test_var_values_are_typed(tmp_path: Path) -> None:
    graph = make_project(
        tmp_path, '[steps.a]\nkind = "text"\nparams = { message = { var = "m" } }\n'
    )
    g = load_graph(graph, root=tmp_path, context={"m": "from context"})
    assert g.steps["a"].params["message"] == "from context"
    with pytest.raises(InputError, match="must be a string"):
        load_graph(graph, root=tmp_path, context={"m": 3})


def test_cli_exit_code_2_and_nothing_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    graph = make_project(tmp_path, '[steps.a]\nkind = "nope"\n')
    rc = main(["run", str(graph), "--root", str(tmp_path), "--state-dir", str(tmp_path / "st")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "graph.toml" in err and "unknown kind 'nope'" in err and "hint:" in err
    assert not (tmp_path / "st").exists(), "bad input must leave no state behind"


def test_plan_reports_a_template_that_does_not_render(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    graph = make_project(tmp_path, '[steps.a]\nkind = "text"\n')
    tmpl = tmp_path / "templates" / "text.nix.j2"
    tmpl.write_text('pkgs.runCommand "a" {\n  x = {{ params.nosuch }};\n} "true"\n')
    rc = main(["plan", str(graph), "--root", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2
    assert "text.nix.j2:2" in err and "does not render for step 'a'" in err and "nosuch" in err


def test_find_line_locates_nested_keys() -> None:
    text = '[steps.a]\nkind = "x"\n\n[steps.b]\nkind = "y"\nneeds = ["a"]\n'
    assert find_line(text, ["steps", "b", "needs"]) == 6
    assert find_line(text, ["steps", "b"]) == 4


def test_schema_is_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["title"] == "PipelineFile" and "steps" in schema["properties"]
    assert main(["schema", "candidate"]) == 0
    assert "reproducer" in json.loads(capsys.readouterr().out)["properties"]


@pytest.mark.parametrize(
    "opt",
    [
        "sandbox",
        "sandbox-fallback",
        "substituters",
        "extra-substituters",
        "require-sigs",
        "trusted-public-keys",
        "extra-trusted-public-keys",
        "builders",
    ],
)
def test_pipeline_cannot_turn_the_sandbox_off(tmp_path: Path, opt: str) -> None:
    graph = make_project(tmp_path, '[steps.a]\nkind = "text"\n')
    text = graph.read_text().replace(
        'package_set = "pkgs"', f'package_set = "pkgs"\noptions = {{ {opt} = "false" }}'
    )
    graph.write_text(text)
    with pytest.raises(InputError) as info:
        load(graph)
    assert f"may not set '{opt}'" in info.value.message and info.value.key == f"nix.options.{opt}"


def test_nix_calls_end_with_the_enforced_settings() -> None:
    from engine.graphtypes import NixConfig
    from engine.nix import Nix

    args = Nix(NixConfig(options={"cores": "1"}, extra_sandbox_paths=["/usr"])).option_args()
    assert args[:3] == ["--option", "cores", "1"]
    assert args[-9:] == [
        "--option", "sandbox", "true",
        "--option", "require-sigs", "true",
        "--option", "fallback", "true",
    ]  # fmt: skip


def test_a_utf8_byte_order_mark_is_ignored(tmp_path: Path) -> None:
    """Editors on Windows write one; it used to give "Invalid statement" (graph) or reach Nix
    (template)."""
    graph = make_project(tmp_path, '[steps.a]\nkind = "text"\n')
    graph.write_bytes(b"\xef\xbb\xbf" + graph.read_bytes())
    tmpl = tmp_path / "templates" / "text.nix.j2"
    tmpl.write_bytes(b"\xef\xbb\xbf" + tmpl.read_bytes())
    g = load_graph(graph, root=tmp_path)
    assert list(g.steps) == ["a"]
    assert not g.kinds["text"].template_text.startswith("\ufeff")


KIND_WITH_INPUTS = """
[kinds.lib-text]
template = "templates/text.nix.j2"
inputs = { notes = "data/x.txt", lib = "data/lib.txt" }
[kinds.lib-text.params.message]
type = "string"
default = "hi"
"""


def test_a_kind_s_default_inputs_reach_every_step_unless_it_names_its_own(tmp_path: Path) -> None:
    graph = make_project(
        tmp_path,
        KIND_WITH_INPUTS
        + '[steps.a]\nkind = "lib-text"\n'
        + '[steps.b]\nkind = "lib-text"\ninputs = { lib = "data/own.txt", more = "data/x.txt" }\n'
        + '[steps.c]\nkind = "text"\n',
    )
    (tmp_path / "data").mkdir()
    for name in ("x", "lib", "own"):
        (tmp_path / "data" / f"{name}.txt").write_text(name)
    g = load_graph(graph, root=tmp_path)
    got = {s: {k: v.rel for k, v in g.steps[s].inputs.items()} for s in ("a", "b", "c")}
    assert got == {
        "a": {"notes": "data/x.txt", "lib": "data/lib.txt"},
        "b": {"notes": "data/x.txt", "lib": "data/own.txt", "more": "data/x.txt"},
        "c": {},
    }
    # the default input enters the step's key: a change to it reruns every step of the kind
    from engine.plan import components

    before = components(g, g.steps["a"], {})["inputs"]
    (tmp_path / "data" / "lib.txt").write_text("changed")
    g2 = load_graph(graph, root=tmp_path)
    assert components(g2, g2.steps["a"], {})["inputs"] != before
    assert components(g2, g2.steps["b"], {})["inputs"] == components(g, g.steps["b"], {})["inputs"]


def test_a_missing_default_input_names_the_kind_s_key(tmp_path: Path) -> None:
    err = error_of(tmp_path, KIND_WITH_INPUTS + '[steps.a]\nkind = "text"\n')
    assert "does not exist" in err.message
    assert err.key == "kinds.lib-text.inputs.lib"  # error_of writes data/x.txt only
    assert err.line is not None and err.file and err.file.endswith("graph.toml")
