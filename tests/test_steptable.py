"""engine/steptable.py takes a `[steps.<id>]` table without pydantic only where pydantic's strict
StepSpec would accept it and give back the very same values; anything else is left to pydantic.
Pure logic: tables drawn as TOML gives them (tomli's types), compared with
PipelineFile.model_validate of the same table."""

from __future__ import annotations

from typing import Any

import pytest
import tomli
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from engine.spec import PipelineFile
from engine.steptable import PlainStep, plain_step
from tests.tomlvalues import toml_values

VALUES = toml_values()
# the StepSpec keys (repeat included), near misses and unknown keys, each with any TOML value
KEYS = st.sampled_from(
    ["kind", "needs", "inputs", "params", "check", "description", "repeat", "Kind", "need", "x"]
)
TABLES = st.dictionaries(KEYS, VALUES, max_size=6)
# values of the right shapes, so that plainly valid tables are drawn often
SHAPED = st.fixed_dictionaries(
    {"kind": st.text(max_size=5)},
    optional={
        "needs": st.lists(st.one_of(st.text(max_size=4), st.integers()), max_size=3),
        "inputs": st.dictionaries(
            st.text(max_size=4),
            st.one_of(st.text(max_size=4), st.fixed_dictionaries({"var": st.text(max_size=4)})),
            max_size=2,
        ),
        "params": st.dictionaries(st.text(max_size=4), VALUES, max_size=3),
        "check": st.one_of(st.booleans(), st.text(max_size=3), st.integers(0, 1)),
        "description": st.one_of(st.text(max_size=5), st.integers()),
    },
)


def _pydantic(table: dict[str, Any]) -> Any:
    try:
        return PipelineFile.model_validate({"steps": {"s": table}}).steps["s"]
    except ValidationError:
        return None


def _same(plain: PlainStep, ss: Any) -> bool:
    fields = ("kind", "needs", "inputs", "params", "check", "description")
    return all(getattr(plain, f) == getattr(ss, f) for f in fields) and ss.repeat == 1


@settings(max_examples=400, deadline=None)
@given(table=st.one_of(TABLES, SHAPED))
def test_a_plain_table_is_one_pydantic_accepts_with_the_same_values(table: dict[str, Any]) -> None:
    plain = plain_step(table)
    if plain is None:
        return  # pydantic decides
    ss = _pydantic(table)
    assert ss is not None, f"taken without pydantic, refused by it: {table!r}"
    assert _same(plain, ss), (plain, ss)
    assert "repeat" not in ss.model_fields_set


@pytest.mark.parametrize(
    "toml",
    [
        'kind = "text"',
        'kind = "text"\nneeds = ["a", "b"]\nparams = { message = "m", n = 3, x = [1, 2.5] }',
        'kind = "text"\ninputs = { data = "data/in0.txt" }\ncheck = true\ndescription = "d"',
        'kind = "text"\nparams = { message = { var = "candidate.id" } }',  # resolved later
    ],
)
def test_plainly_valid_tables_are_taken_as_pydantic_gives_them(toml: str) -> None:
    table = tomli.loads(toml)
    plain = plain_step(table)
    ss = _pydantic(table)
    assert plain is not None and ss is not None and _same(plain, ss)


@pytest.mark.parametrize(
    "toml",
    [
        'kind = "text"\nrepeat = 2',  # a repeated step: never re-resolved in place
        'kind = "text"\ninputs = { data = { var = "candidate.patches" } }',  # a VarRef
        'kind = "text"\ncheck = "true"',  # strict: refused by pydantic
        'kind = "text"\nneeds = "a"',
        'kind = "text"\nneeds = ["a", 1]',
        "kind = 1",
        'kind = "text"\ncolour = "red"',  # extra="forbid"
        'needs = ["a"]',  # no kind
        'kind = "text"\ndescription = 3',
        'kind = "text"\nparams = [1]',
    ],
)
def test_anything_else_is_left_to_pydantic(toml: str) -> None:
    assert plain_step(tomli.loads(toml)) is None
