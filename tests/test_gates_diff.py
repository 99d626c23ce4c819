"""Unified-diff parsing and the canonical `git diff -U0 --no-color` form."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from trace_sandbox.gates.diff import DiffError, canonical, parse, parse_series

FIXTURES = Path(__file__).parent / "fixtures" / "gates"


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.email=t@t", "-c", "user.name=t", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def _strip_u0(text: str) -> str:
    """git's -U0 output without `index` lines and without the function-name section heading."""
    out = []
    for line in text.splitlines():
        if line.startswith("index "):
            continue
        if line.startswith("@@ "):
            line = line[: line.index(" @@", 3) + 3]
        out.append(line)
    return "\n".join(out) + "\n"


def test_canonical_matches_git_diff_u0(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    repo.mkdir()
    (repo / "a.c").write_text("".join(f"int v{i} = {i};\n" for i in range(30)))
    (repo / "gone.py").write_text("x = 1\ny = 2\n")
    (repo / "b.py").write_text("def f(a):\n    return a\n\n\ndef g():\n    pass\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "base")
    lines = (repo / "a.c").read_text().splitlines()
    lines[3] = "int v3 = 33;"  # change
    del lines[10:12]  # removal
    lines.insert(20, "int extra = 0;")  # addition
    lines.insert(21, "int extra2 = 0;")
    lines[25] = "int v27 = -1;"
    (repo / "a.c").write_text("\n".join(lines) + "\n")
    (repo / "gone.py").unlink()
    (repo / "new.h").write_text("int f(int);\n")
    (repo / "b.py").write_text("def f(a, b):\n    return a + b\n\n\ndef g():\n    pass\n")
    _git(repo, "add", "-A")
    full = _git(repo, "diff", "--cached", "--no-color")  # 3 lines of context
    u0 = _git(repo, "diff", "--cached", "-U0", "--no-color")
    assert canonical(parse(full)) == _strip_u0(u0)
    assert canonical(parse(u0)) == _strip_u0(u0)


def test_parse_counts_files_hunks_and_lines() -> None:
    patch = parse((FIXTURES / "cparse-fix.patch").read_text())
    assert [f.path for f in patch.files] == ["cparse.c"]
    assert patch.summary() == {"files": 1, "hunks": 1, "lines_added": 2, "lines_removed": 0}
    added = patch.files[0].added
    assert [(ln.new_no, ln.text.strip()) for ln in added] == [
        (15, "if (klen >= KEY_MAX)"),
        (16, "return -1;"),
    ]


def test_parse_plain_diff_u_with_timestamps_and_no_newline_marker() -> None:
    text = (
        "--- old/x.py\t2024-01-01 00:00:00.000000000 +0000\n"
        "+++ new/x.py\t2024-01-02 00:00:00.000000000 +0000\n"
        "@@ -1,2 +1,2 @@\n"
        " a = 1\n"
        "-b = 2\n"
        "\\ No newline at end of file\n"
        "+b = 3\n"
        "\\ No newline at end of file\n"
        "--- old/y.py\n"
        "+++ new/y.py\n"
        "@@ -0,0 +1 @@\n"
        "+z = 0\n"
    )
    patch = parse(text)
    assert [(f.path, f.status) for f in patch.files] == [("x.py", "modified"), ("y.py", "modified")]
    assert patch.summary() == {"files": 2, "hunks": 2, "lines_added": 2, "lines_removed": 1}
    assert patch.files[1].added[0].new_no == 1


def test_series_keeps_patch_order_and_index() -> None:
    texts = [(FIXTURES / n).read_text() for n in ("cparse-fix.patch", "pager-fix.patch")]
    series = parse_series(texts)
    assert [(f.path, f.patch) for f in series.files] == [
        ("cparse.c", 0),
        ("pager/__init__.py", 1),
    ]
    assert series.summary() == {"files": 2, "hunks": 2, "lines_added": 3, "lines_removed": 1}


def test_truncated_hunk_is_an_error_with_a_line() -> None:
    text = "--- a/x.c\n+++ b/x.c\n@@ -1,3 +1,3 @@\n a\n-b\n"
    with pytest.raises(DiffError, match="line 5: hunk ends early"):
        parse(text)
