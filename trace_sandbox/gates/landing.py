"""Where a patch actually landed: its added lines' numbers in the patched tree.

A hunk header's line numbers are the patch author's account; `patch` (GNU and busybox alike)
applies a hunk wherever its context matches, at an offset when the header is stale. Coverage and
mutation must read the lines the patch landed on, so the `patched-source` step copies each
changed file out of the package's own patched source tree (after its patch phase) and `locate`
finds every hunk there: its new side (context and added lines, in order) matched exactly, the
match nearest to where the header says it goes (after the previous hunk) winning; failing that,
its added lines alone (a hunk applied with fuzz). A hunk found nowhere (a later patch of the
series rewrote it) keeps the header's numbers and is reported as `unlocated`.

Stdlib only: `write_patched_source` runs in the sandbox, inside the package's own build.
"""

from __future__ import annotations

import json
import os
import shutil

from .diff import FileDiff, Hunk, parse_series

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def _find(block: list[str], lines: list[str], want: int, floor: int) -> int | None:
    """Start index of `block` in `lines` nearest to `want`, not before `floor`."""
    if not block:
        return None
    best: int | None = None
    for start in range(floor, len(lines) - len(block) + 1):
        if lines[start : start + len(block)] == block and (
            best is None or abs(start - want) < abs(best - want)
        ):
            best = start
    return best


def locate_file(f: FileDiff, lines: list[str]) -> dict[str, Any]:
    """Stated new-file line -> landed line for every added line of one file's diff, plus the
    hunks' offsets and the hunks not found."""
    mapping: dict[int, int] = {}
    offsets: list[int | None] = []
    unlocated: list[int] = []
    floor = 0
    for k, h in enumerate(f.hunks):
        new_side = [ln for ln in h.lines if ln.kind != "-"]
        first = new_side[0].new_no if new_side else h.new_start
        want = (first or 1) - 1
        start = _find([ln.text for ln in new_side], lines, want, floor)
        anchor: list[int | None] = [ln.new_no for ln in new_side]
        if start is None:
            added = [ln for ln in h.lines if ln.kind == "+"]
            start = _find([ln.text for ln in added], lines, (added[0].new_no or 1) - 1, floor)
            anchor = [ln.new_no for ln in added] if start is not None else anchor
            first = added[0].new_no if added else first
        if start is None:
            offsets.append(None)
            unlocated.append(k + 1)
            for ln in h.added:
                if ln.new_no is not None:
                    mapping[ln.new_no] = ln.new_no
            continue
        offset = start + 1 - (first or 1)
        offsets.append(offset)
        for n in _added(h):
            if n is not None:
                mapping[n] = n + offset
        floor = start + sum(1 for a in anchor if a is not None)
    return {"lines": mapping, "offsets": offsets, "unlocated": unlocated}


def _added(h: Hunk) -> list[int | None]:
    return [ln.new_no for ln in h.lines if ln.kind == "+"]


def read_lines(path: str) -> list[str]:
    with open(path, encoding="utf-8", errors="surrogateescape") as fh:
        return fh.read().split("\n")


def locate(patches: list[str], tree: str) -> dict[str, dict[str, Any]]:
    """Per changed file (new path): its landing (see `locate_file`) in `tree`, the copied
    patched files. A file missing from the tree maps every line to itself, `missing: true`."""
    out: dict[str, dict[str, Any]] = {}
    for f in parse_series(patches).files:
        if f.new_path is None or f.binary:
            continue
        path = os.path.join(tree, f.new_path)
        if not os.path.isfile(path):
            same = {n: n for n in (ln.new_no for ln in f.added) if n is not None}
            out.setdefault(f.new_path, {"lines": {}, "offsets": [], "unlocated": []})
            out[f.new_path]["lines"].update(same)
            out[f.new_path]["missing"] = True
            continue
        found = locate_file(f, read_lines(path))
        entry = out.setdefault(f.new_path, {"lines": {}, "offsets": [], "unlocated": []})
        entry["lines"].update(found["lines"])
        entry["offsets"] += found["offsets"]
        entry["unlocated"] += found["unlocated"]
    return out


def landed(landing: dict[str, Any], path: str, line: int) -> int:
    """The landed line of a stated added line (itself when unknown)."""
    lines = (landing.get(path) or {}).get("lines") or {}
    return int(lines.get(str(line), lines.get(line, line)))


def load_landing(path: str | None) -> dict[str, Any]:
    """landing.json of a patched-source step ({} when there is none)."""
    if not path or not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    return data if isinstance(data, dict) else {}


def write_patched_source(cfg: dict[str, Any], src: str, out: str) -> None:
    """In the package's build, after its patch phase (cwd `src`): copy every changed file to
    `out/files/<path>` and write `out/landing.json`."""
    texts = []
    for p in cfg["patches"]:
        with open(p, encoding="utf-8", errors="surrogateescape") as fh:
            texts.append(fh.read())
    files = os.path.join(out, "files")
    for f in parse_series(texts).files:
        if f.new_path is None or f.binary:
            continue
        source = os.path.join(src, f.new_path)
        if os.path.isfile(source):
            dest = os.path.join(files, f.new_path)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            shutil.copyfile(source, dest)
    landing = locate(texts, files)
    with open(os.path.join(out, "landing.json"), "w", encoding="utf-8") as fh:
        json.dump(landing, fh, indent=2, sort_keys=True)
        fh.write("\n")
