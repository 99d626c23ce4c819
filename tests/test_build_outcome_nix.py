"""templates/lib/build-outcome.nix with the real nix: the failure marker is the wrapper's word.

The gates read `$out/.trace-build-failed` as "this build failed" (the library side, mutants,
coverage, fuzzing, equivalence). A package's own install could write that name: a patch's
library half that installs it would make its library side read "did not build: no claim". A
build that passes has the marker removed (its log says so); a build that fails gets the
wrapper's marker, holding the exit status, in an otherwise empty output."""

from __future__ import annotations

import secrets
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FORK = REPO / "tests" / "fixtures" / "fork"
LIB = REPO / "templates" / "lib"

pytestmark = pytest.mark.nix

# a builder run by the fixture fork's busybox shell: SCRIPT is its shell text
EXPR = """
let
  pkgs = import %(fork)s { };
  trace = import %(lib)s { inherit pkgs; };
  drv = derivation {
    name = "outcome-probe";
    system = builtins.currentSystem;
    builder = "${pkgs.busybox}/bin/sh";
    PATH = "${pkgs.busybox}/bin";
    args = [ "-c" %(script)s ];
  };
in trace.outcome { inherit pkgs drv; suffix = "probe"; }
"""


def build(tmp: Path, script: str) -> tuple[Path, str]:
    """The outcome build of a derivation running SCRIPT: (its out path, the build's stderr)."""
    nix = tmp / "probe.nix"
    # salted: a derivation built by an earlier run would not be built
    # again, and its log (the removal notice) would not be printed
    script = f": {secrets.token_hex(8)}; {script}"
    text = EXPR % {"fork": FORK, "lib": LIB, "script": '"' + script.replace('"', '\\"') + '"'}
    nix.write_text(text)
    done = subprocess.run(
        ["nix-build", "--no-out-link", str(nix)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return Path(done.stdout.strip()), done.stderr


def test_a_marker_the_package_installs_is_removed_from_a_build_that_passed(
    tmp_path: Path,
) -> None:
    script = "mkdir $out; echo 1 > $out/.trace-build-failed; echo kept > $out/lib.so"
    out, log = build(tmp_path, script)
    assert not (out / ".trace-build-failed").exists()
    assert (out / "lib.so").read_text() == "kept\n"
    assert "the build installed $out/.trace-build-failed" in log


def test_a_marker_directory_or_link_is_removed_too(tmp_path: Path) -> None:
    script = "mkdir -p $out/.trace-build-failed/x; ln -s /nowhere $out/other; echo ok > $out/f"
    out, _ = build(tmp_path, script)
    assert not (out / ".trace-build-failed").exists()
    link = "mkdir $out; ln -s /nowhere $out/.trace-build-failed"
    out2, _ = build(tmp_path, link)
    assert not (out2 / ".trace-build-failed").is_symlink()
    assert sorted(p.name for p in out2.iterdir()) == []


def test_a_build_that_fails_gets_the_wrapper_s_marker_in_an_empty_output(tmp_path: Path) -> None:
    script = "mkdir $out; echo half > $out/half; exit 3"
    out, _ = build(tmp_path, script)
    assert sorted(p.name for p in out.iterdir()) == [".trace-build-failed"]
    assert (out / ".trace-build-failed").read_text() == "3\n"
