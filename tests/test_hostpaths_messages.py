"""A tool missing from the sandbox is told apart from a broken patch (issue 28, item 4)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.hostpaths import ADVICE, missing_tool
from engine.verify.buildlog import build_failure_detail


@pytest.mark.parametrize(
    ("log", "tool"),
    [
        ("unpacking\nsh: gcc: not found\n", "gcc"),
        ("bash: line 3: cc: command not found", "cc"),
        ("/nix/store/abc-setup.sh: line 9: python3: command not found", "python3"),
        ("       > sh: g++: not found", "g++"),
        ("sh: 1: cc: not found", "cc"),
        ("make: cc: No such file or directory", "cc"),
        (
            "cc: not found (trace's compile recorder found no cc after /nix/store/x/bin on PATH)",
            "cc",
        ),
    ],
)
def test_a_shell_that_found_no_program(log: str, tool: str) -> None:
    found = missing_tool(log)
    assert found is not None and found[0] == tool


@pytest.mark.parametrize(
    "log",
    [
        "key: not found",
        "test lookup: not found",
        "error: gcc failed",
        "FAIL: not found: 3",
        "cat: data.txt: No such file or directory",
        "sh: ./configure: No such file or directory",
    ],
)
def test_other_lines_are_not_a_missing_tool(log: str) -> None:
    assert missing_tool(log) is None


def test_a_build_broken_by_a_missing_compiler_says_what_to_do() -> None:
    detail = build_failure_detail("building\nsh: gcc: not found\n", "/nix/store/x.drv", [])
    assert detail.startswith("sh: gcc: not found: ")
    assert ADVICE in detail and "extra_sandbox_paths" in detail
    assert detail.endswith("full log: nix log /nix/store/x.drv")


def test_a_build_broken_otherwise_keeps_its_last_line(tmp_path: Path) -> None:
    detail = build_failure_detail("cparse.c:3: error: expected ';'\n", None, [])
    assert detail == "cparse.c:3: error: expected ';'"
