"""The fixture fork's stdenv behaves like nixpkgs' where it matters to verdicts (issue 13, item
13): GNU patch (fuzz), a real `ar`, a tarball `src` unpacked, and a compiler wrapper that applies
NIX_CFLAGS_COMPILE / NIX_CFLAGS_LINK to every compiler call, including those `make` runs.
Real builds with the fixture's stdenv (tests/fixtures/stdenv-check)."""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.nix

CHECK = Path(__file__).parent / "fixtures" / "stdenv-check"
SANDBOX = "/usr /lib64 /bin /lib"


@pytest.fixture(scope="module")
def tarball(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("src") / "proj-1.tar.gz"
    with tarfile.open(dest, "w:gz") as tar:
        tar.add(CHECK / "proj", arcname="proj-1")
    return dest


def build(tarball: Path, patch: str, **args: str) -> subprocess.CompletedProcess[str]:
    cmd = ["nix-build", str(CHECK / "check.nix"), "--no-out-link"]
    cmd += ["--arg", "src", str(tarball), "--arg", "patch", str(CHECK / patch)]
    for name, value in args.items():
        cmd += ["--argstr", name, value]
    cmd += ["--option", "extra-sandbox-paths", SANDBOX]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)


def test_tarball_fuzz_ar_and_flags_through_make(tarball: Path) -> None:
    proc = build(tarball, "fuzz.patch")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = Path(proc.stdout.strip())
    # NIX_CFLAGS_COMPILE (-DMAGIC=42) reached the `cc -c m.c` that make ran
    assert (out / "answer").read_text() == "42\n"
    # GNU patch applied a hunk whose context changed upstream (busybox patch refuses it)
    assert "with fuzz" in proc.stderr
    assert "/* context C */" in (out / "main.c").read_text()
    # a real archive: binutils' ar created it (busybox ar cannot create archives)
    members = subprocess.run(
        ["ar", "t", str(out / "lib" / "libm.a")], capture_output=True, text=True, check=True
    )
    assert members.stdout.split() == ["m.o"]


def test_coverage_flags_reach_every_compile_and_link(tarball: Path) -> None:
    proc = build(tarball, "fuzz.patch", cflags="-DMAGIC=7 --coverage", linkflags="--coverage")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = Path(proc.stdout.strip())
    assert (out / "answer").read_text() == "7\n"
    notes = (out / "notes").read_text().split()
    assert any(n.endswith("m.gcno") for n in notes), notes
    assert any(n.endswith("main.gcno") or "prog-main.gcno" in n for n in notes), notes


def test_a_patch_that_does_not_apply_fails_the_build_naming_the_hunk(tarball: Path) -> None:
    proc = build(tarball, "broken.patch")
    assert proc.returncode != 0
    assert "Hunk #1 FAILED" in proc.stderr
