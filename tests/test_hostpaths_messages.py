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


FORK_CLI = "nix run .#trace --"


def test_hints_in_a_fork_name_the_forks_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under `nix run .#trace` (TRACE_CLI set by the fork's apps) a hint names the command the
    user can run there, never a bare `trace keygen` (issue 28, item 9)."""
    import subprocess
    import sys

    from engine.errors import InputError
    from engine.signing.keys import load_private_key, load_public_key

    monkeypatch.setenv("TRACE_CLI", FORK_CLI)
    bad = tmp_path / "key.pem"
    bad.write_text("not a key\n")
    for load in (load_private_key, load_public_key):
        with pytest.raises(InputError) as err:
            load(bad)
        assert f"`{FORK_CLI} keygen`" in (err.value.hint or "")
        assert "`trace keygen`" not in (err.value.hint or "")
    # the verify-bundle catalogue is read at import: in a fork's process, its form
    code = "from engine.audit.reasons import REASONS; print(REASONS['bundle.unsigned'][1])"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert f"`{FORK_CLI} bundle --sign`" in out
