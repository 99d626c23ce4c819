"""Templates are linted at load: a `{{ value }}` inside a Nix string, `''` string or comment is
refused (with its line), anywhere else accepted; accepted templates keep every value data."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import InputError
from engine.render import render
from engine.templatelint import lint_template, unsafe_interpolations
from tests.tiers import repeats

HOLE = "{{ v }}"
D_NOISE = ["", '\\"', "\\${", "$$", "''", "}", "{", "#", "/*", "\\\\"]
I_NOISE = ["", "'''", "''$", "''\\n", '"', "\\", "$$", "}", "{", "#"]
C_NOISE = ["", '"', "''", "${", "}"]


def hole_in_code() -> st.SearchStrategy[tuple[str, str]]:
    return st.just((HOLE, "code"))


def hole_in_string() -> st.SearchStrategy[tuple[str, str]]:
    d = st.tuples(st.sampled_from(D_NOISE), st.sampled_from(D_NOISE)).map(
        lambda n: (f'"p{n[0]} {HOLE} {n[1]}q"', "string")
    )
    i = st.tuples(st.sampled_from(I_NOISE), st.sampled_from(I_NOISE)).map(
        lambda n: (f"''p {n[0]} {HOLE} {n[1]} q''", "string")
    )
    c = st.sampled_from(C_NOISE).map(lambda n: (f"(/* {n} {HOLE} */ 1)", "comment"))
    line = st.just((f"(# {HOLE}\n 1)", "comment"))
    return st.one_of(d, i, c, line)


def wrap(inner: st.SearchStrategy[tuple[str, str]]) -> st.SearchStrategy[tuple[str, str]]:
    """Put an expression (holding the hole) somewhere that keeps its context."""

    def one(e: tuple[str, str], how: str, noise: str) -> tuple[str, str]:
        text, ctx = e
        forms = {
            # parenthesised: a `let ... in` is not a list element without them (Nix syntax)
            "list": f'[ "x{noise}" ({text}) ]',
            "attrs": f"{{ a = ''{noise}''; b = {text}; }}",
            "dstring-antiquote": f'"p${{ builtins.toJSON ({text}) }}{noise}q"',
            "istring-antiquote": f"''p ${{ builtins.toJSON ({text}) }} {noise} q''",
            "let": f"let y = {text}; in y",
        }
        return forms[how], ctx

    return st.builds(
        one,
        inner,
        st.sampled_from(["list", "attrs", "dstring-antiquote", "istring-antiquote", "let"]),
        st.sampled_from(["", "}", "{", "''$", "$$", "#"]),
    )


templates = st.recursive(st.one_of(hole_in_code(), hole_in_string()), wrap, max_leaves=4)


@settings(max_examples=repeats(400, 100), deadline=None)  # the fast tier: 100 (tests/tiers.py)
@given(templates)
def test_the_lint_refuses_exactly_the_holes_outside_code(case: tuple[str, str]) -> None:
    text, ctx = case
    found = unsafe_interpolations(text)
    assert (found == []) == (ctx == "code"), text
    if ctx != "code":
        with pytest.raises(InputError) as info:
            lint_template(text, Path("t.nix.j2"))
        assert info.value.line == found[0][0] and "let x = " in (info.value.hint or "")


HOSTILE = "\" + builtins.readFile /etc/hostname + \"${builtins.currentSystem}*/ '' #"


def nix_eval(expr: str) -> str:
    return subprocess.run(
        ["nix-instantiate", "--eval", "--strict", "-E", expr],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout


@pytest.mark.nix
@settings(max_examples=25, deadline=None)
@given(templates.filter(lambda c: c[1] == "code"))
def test_an_accepted_template_keeps_a_hostile_value_data(case: tuple[str, str]) -> None:
    text, _ = case
    lint_template(text, Path("t.nix.j2"))
    out = nix_eval(render(text, "t", {"v": HOSTILE}))
    system = nix_eval("builtins.currentSystem").strip().strip('"')
    assert system not in out  # the value's ${...} was never evaluated
    assert "readFile /etc/hostname" in out  # it is there, as text


def test_the_refusal_names_the_line_and_the_fix() -> None:
    text = 'pkgs.runCommand "x" {\n  a = 1;\n  b = "prefix-{{ params.x }}";\n} ""\n'
    with pytest.raises(InputError) as info:
        lint_template(text, Path("step.nix.j2"))
    err = info.value.render()
    assert err.startswith("step.nix.j2:3: a {{ value }} inside a Nix string")
    assert '"prefix-${x}"' in err
