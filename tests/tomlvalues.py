"""Hypothesis strategies of values as TOML gives them (tomli's types: str, int, bool, float,
dates, arrays, tables), for properties that compare trace's plain checks with pydantic's
(tests/test_steptable.py, tests/test_plainfile.py)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from hypothesis import strategies as st


def toml_values(text: int = 8, ints: tuple[int, int] = (-5, 5), leaves: int = 6) -> Any:
    """Any TOML value: scalars, and arrays and tables of them (nested up to `leaves` leaves)."""
    scalars = st.one_of(
        st.text(max_size=text),
        st.integers(*ints),
        st.booleans(),
        st.floats(allow_nan=False, allow_infinity=False),
        st.just(dt.date(2026, 12, 2)),
    )
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)
        ),
        max_leaves=leaves,
    )
