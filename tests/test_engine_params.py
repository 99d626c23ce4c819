"""A param string reaches the build byte for byte: line and paragraph separators, C0 and C1
controls and every other character of Unicode (NUL aside, which Nix strings cannot hold and which
is refused as bad input) arrive in the derivation unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from engine.cache import Index
from engine.evaluation import render_expression
from engine.graph import load_graph
from engine.render import nix_string
from engine.run import plan, run_graph
from tests.enginekit import make_project
from tests.tiers import repeats

ECHO = """\
pkgs.runCommand "param" { value = {{ params.message }}; passAsFile = [ "value" ]; } ''
  cat "$valuePath" > $out
''
"""

# What str.splitlines() breaks at, besides "\n": each once changed a value's bytes.
SEPARATORS = ["\u2028", "\u2029", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\r", "\r\n"]
any_text = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=40
)
hostile = st.lists(st.one_of(st.sampled_from(SEPARATORS), any_text), max_size=6).map("".join)


def toml_string(value: str) -> str:
    """A TOML basic string holding exactly `value` (every non-printable-ASCII char escaped)."""
    out = []
    for ch in value:
        if ch in '"\\' or not (0x20 <= ord(ch) < 0x7F):
            out.append(f"\\U{ord(ch):08X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def write_graph(project: Path, values: list[str]) -> Path:
    graph = make_project(
        project,
        "".join(
            f'[steps.v{i}]\nkind = "text"\nparams = {{ message = {toml_string(v)} }}\n'
            for i, v in enumerate(values)
        ),
    )
    (project / "templates" / "text.nix.j2").write_text(ECHO)
    return graph


@settings(max_examples=repeats(300, 60), deadline=None)  # the fast tier: 60 (tests/tiers.py)
@given(hostile)
@example("a\u2028b\u2029c\vd\fe\x1cf\x1dg\x1eh\x85i")
def test_the_generated_nix_holds_every_param_byte_for_byte(tmp_path_factory, value: str) -> None:  # type: ignore[no-untyped-def]
    project = tmp_path_factory.mktemp("render")
    graph = load_graph(write_graph(project, [value]), root=project)
    with Index(project / ".trace") as index:
        p, _ = plan(graph, index)
        text, _ = render_expression(graph, p, p.dirty)
    assert nix_string(value) in text


@pytest.mark.nix
@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(hostile, min_size=1, max_size=6))
@example(
    [*SEPARATORS, "\u2028\u2029", "x\x85\x1c\x1d\x1e\x0b\x0cy", "\x01\x7f\x80\x9f\u200b\ufeff"]
)
def test_a_param_arrives_in_the_build_unchanged(tmp_path: Path, values: list[str]) -> None:
    write_graph(tmp_path, values)
    graph = load_graph(tmp_path / "graph.toml", root=tmp_path)
    result = run_graph(graph, tmp_path / ".trace")
    assert result.ok
    for i, value in enumerate(values):
        out = result.steps[f"v{i}"].out
        assert out is not None
        assert Path(out).read_bytes() == value.encode("utf-8")
