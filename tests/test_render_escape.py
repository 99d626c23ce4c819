"""The one escaping function: any user text round-trips through Nix unchanged (no splicing)."""

from __future__ import annotations

import json
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.render import NixExpr, attr_path, render, store_name, to_nix

# NUL-free text, biased towards the characters that matter to Nix's lexer.
NASTY = ["${", "''", "'''", "''$", "''\\", '"', "\\", "$", "\n", "\r", "\t", "}", "{", "#", "/*"]
text = st.lists(
    st.one_of(
        st.sampled_from(NASTY),
        st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=8),
    ),
    max_size=12,
).map("".join)


def nix_eval(expr: str) -> object:
    out = subprocess.run(
        ["nix-instantiate", "--eval", "--strict", "--json", "-E", expr],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.nix
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(text, min_size=1, max_size=20))
def test_strings_round_trip_through_nix(values: list[str]) -> None:
    assert nix_eval(to_nix(values)) == values


@pytest.mark.nix
@settings(max_examples=25, deadline=None)
@given(
    st.dictionaries(text, st.one_of(text, st.integers(-(2**40), 2**40), st.booleans()), max_size=6)
)
def test_attrsets_round_trip_through_nix(value: dict[str, object]) -> None:
    assert nix_eval(to_nix(value)) == value


@pytest.mark.nix
@settings(max_examples=25, deadline=None)
@given(text)
def test_template_values_cannot_splice_code(value: str) -> None:
    # A template as users write them: the value lands inside a larger expression.
    expr = render('{ a = {{ v }}; b = "fixed"; }', "t", {"v": value})
    assert nix_eval(expr) == {"a": value, "b": "fixed"}


@pytest.mark.nix
@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.floats(allow_nan=False, allow_infinity=False, allow_subnormal=False),
        min_size=1,
        max_size=20,
    )
)
def test_floats_round_trip_through_nix(values: list[float]) -> None:
    got = nix_eval(to_nix(values))
    assert isinstance(got, list)
    # Nix prints floats with 6 significant digits in --json output, so compare that closely
    for a, b in zip(got, values, strict=True):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-300)


def test_float_exponents_get_a_decimal_point() -> None:
    assert to_nix(1e16) == "1.0e+16" and to_nix(-2.5e-07) == "(-2.5e-07)" and to_nix(0.5) == "0.5"
    with pytest.raises(ValueError, match="subnormal"):
        to_nix(5e-324)


def test_engine_expressions_pass_verbatim() -> None:
    assert to_nix(NixExpr("steps.a")) == "steps.a"
    assert to_nix([NixExpr("x"), 1, -2, None, True]) == "[ (x) (1) ((-2)) (null) (true) ]"


def test_nul_is_refused() -> None:
    with pytest.raises(ValueError, match="NUL"):
        to_nix("a\0b")


def test_attr_path_quotes_every_component() -> None:
    assert str(attr_path('python3Packages.foo"bar')) == '."python3Packages"."foo\\"bar"'
    with pytest.raises(ValueError):
        attr_path("a..b")


def test_store_name_is_valid() -> None:
    assert store_name("repro@2 ok/../x") == "repro-2-ok-..-x"
    assert store_name("..hidden") == "hidden"
