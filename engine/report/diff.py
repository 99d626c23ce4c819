"""Unified diffs as rows for the page, with each added line's coverage drawn from the coverage
gate's record (`details.files[]`: file, covered, missed; line numbers of the patched file).

Display only: the gates parse patches with their own stdlib code in the sandbox; here a line
that does not parse is simply shown as it is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel

HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
RowKind = Literal["file", "hunk", "add", "del", "ctx", "meta"]
Coverage = Literal["covered", "missed", ""]


class DiffRow(BaseModel):
    kind: RowKind
    text: str
    old: int | None = None
    new: int | None = None
    file: str = ""
    coverage: Coverage = ""


def _strip_prefix(name: str) -> str:
    name = name.split("\t", 1)[0]
    return name[2:] if name[:2] in ("a/", "b/") else name


def coverage_map(record: Any) -> dict[str, dict[int, Coverage]]:
    """file -> line -> covered/missed, from a coverage gate record (any shape tolerated)."""
    out: dict[str, dict[int, Coverage]] = {}
    details = record.get("details") if isinstance(record, Mapping) else None
    files = details.get("files") if isinstance(details, Mapping) else None
    for f in files if isinstance(files, list) else []:
        if not isinstance(f, Mapping) or not isinstance(f.get("file"), str):
            continue
        lines = out.setdefault(_strip_prefix(f["file"]), {})
        for key, mark in (("missed", "missed"), ("covered", "covered")):
            values = f.get(key)
            for n in values if isinstance(values, list) else []:
                if isinstance(n, int):
                    lines[n] = mark  # type: ignore[assignment]
    return out


def diff_rows(
    text: str, coverage: Mapping[str, Mapping[int, Coverage]] | None = None
) -> list[DiffRow]:
    rows: list[DiffRow] = []
    old = new = 0
    current = ""
    cov = coverage or {}
    for line in text.splitlines():
        if line.startswith("+++ "):
            current = _strip_prefix(line[4:])
            rows.append(DiffRow(kind="file", text=line, file=current))
        elif line.startswith("--- ") or line.startswith("diff ") or line.startswith("index "):
            rows.append(DiffRow(kind="meta", text=line))
        elif m := HUNK.match(line):
            old, new = int(m.group(1)), int(m.group(3))
            rows.append(DiffRow(kind="hunk", text=line, file=current))
        elif line.startswith("+"):
            mark = cov.get(current, {}).get(new, "")
            rows.append(DiffRow(kind="add", text=line, new=new, file=current, coverage=mark))
            new += 1
        elif line.startswith("-"):
            rows.append(DiffRow(kind="del", text=line, old=old, file=current))
            old += 1
        elif line.startswith(" "):
            rows.append(DiffRow(kind="ctx", text=line, old=old, new=new, file=current))
            old += 1
            new += 1
        else:
            rows.append(DiffRow(kind="meta", text=line))
    return rows
