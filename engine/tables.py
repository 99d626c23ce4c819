"""Terminal tables that never break a word: codes such as `human-review-required` stay whole.

rich folds a cell's text where its column is narrower than a word; a column is given at least
its longest word's width (markup stripped), and the console is widened to fit the table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.table import Table


SHORT = 40  # a column whose every line fits in this many characters is never wrapped


def _plain(cell: object) -> str:
    from rich.text import Text

    return cell.plain if isinstance(cell, Text) else Text.from_markup(str(cell)).plain


def longest_word(cell: object) -> int:
    return max((len(w) for w in _plain(cell).split()), default=0)


def longest_line(cell: object) -> int:
    return max((len(line) for line in _plain(cell).splitlines()), default=0)


def keep_words_whole(table: Table) -> int:
    """Set each column's min_width to its longest word (to its longest line where every line
    is short: codes, verdicts, ids are never wrapped); returns the width the table needs then
    (rich's own measure: padding, rules and the column minimums together)."""
    from rich.console import Console

    for column in table.columns:
        cells = [column.header, *column.cells]
        line = max(longest_line(c) for c in cells)
        word = max(longest_word(c) for c in cells)
        if line <= SHORT:
            column.no_wrap = True  # rich then shrinks only the columns that may wrap
        column.min_width = max(column.min_width or 0, line if line <= SHORT else word)
    return Console(width=10_000).measure(table).minimum
