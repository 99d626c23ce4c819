"""The compile recorder (templates/verify/cc-record) on real builds of the fixture fork: it
records every compiler call, including those make runs and the cc-wrapper's flag variables,
and changes nothing about the program built."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from trace_sandbox.gates import ccflags

pytestmark = pytest.mark.nix

REPO = Path(__file__).resolve().parent.parent
FORK = REPO / "tests" / "fixtures" / "fork"
RECORD = REPO / "templates" / "verify" / "cc-record"
LIB = REPO / "templates" / "lib"
SANDBOX = "/usr /lib64 /bin /lib"


def build(expr: str) -> Path:
    cmd = ["nix-build", "--no-out-link", "-E", f"let pkgs = import {FORK} {{ }}; in {expr}"]
    cmd += ["--option", "extra-sandbox-paths", SANDBOX]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return Path(proc.stdout.strip())


def recorded(attr: str) -> Path:
    trace = f"import {LIB} {{ inherit pkgs; }}"
    return build(f"import {RECORD} {{ inherit pkgs; trace = {trace}; drv = pkgs.{attr}; }}")


def test_a_makefile_build_is_recorded_and_unchanged() -> None:
    out = recorded("cparse")
    text = (out / "nix-support" / "trace-cc.log").read_text()
    [call] = ccflags.parse_log(text)
    assert (call.name, call.cwd) == ("cc", "/build/source")
    assert ccflags.summary(text) == {"source/cparse.c": "-fsanitize=address"}
    # the recorder only looks: the program is byte for byte the one the package builds alone
    plain = build("pkgs.cparse")
    assert (out / "bin" / "cparse").read_bytes() == (plain / "bin" / "cparse").read_bytes()


def test_the_cc_wrapper_s_flags_are_part_of_each_call() -> None:
    # cjson: its own Makefile runs cc for each unit; ASan comes from NIX_CFLAGS_COMPILE only
    text = (recorded("cjson") / "nix-support" / "trace-cc.log").read_text()
    units = ccflags.summary(text)
    assert units["source/cJSON.c"] == "-fsanitize=address", units
    assert all(
        "-fsanitize=address" in c.env.get("NIX_CFLAGS_COMPILE", "") for c in ccflags.parse_log(text)
    )
    assert ccflags.compare(text, text) == []
