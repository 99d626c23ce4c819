"""Issue 28: the verify and fork tables never break a word (`human-review-requir / ed`)."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table

from engine.tables import keep_words_whole


def _render(table: Table, width: int) -> str:
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None).print(table)
    return buf.getvalue()


def _table() -> Table:
    table = Table(title="t")
    for col in ("claim", "evidence", "result", "reason"):
        table.add_column(col, overflow="fold")
    long = "a long explanation of what was measured, " * 6
    table.add_row("gate: variants", long, "[bold red]fails[/]", "fix-misses-upstream-behaviour")
    table.add_row("route", "ok", "[green]holds[/]", "human-review-required")
    return table


def test_a_narrow_table_folds_words_without_it() -> None:
    assert "human-review-required" not in _render(_table(), 60)  # the bug this fixes


def test_every_word_stays_whole() -> None:
    table = _table()
    need = keep_words_whole(table)
    text = _render(table, max(60, need))
    for word in ("human-review-required", "fix-misses-upstream-behaviour", "explanation"):
        assert word in text, text
    assert [c.min_width for c in table.columns] == [14, 11, 6, 29]
