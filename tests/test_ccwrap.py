"""templates/lib/ccwrap.sh: the compiler-wrapper prelude that the compile recorder
(templates/verify/cc-record/record.sh) and the fuzzing compiler (templates/gates/fuzz-cc/fuzzcc.sh)
share. Each wrapper is assembled as templates/lib/ccwrap.nix assembles it (a shebang, the prelude,
the script) and run from a directory first on PATH, in front of a fake compiler that prints what
it was given: the wrapper skips itself, runs the next compiler of its name with PATH minus its own
directory, and without one exits 127 naming itself. The real builds are
tests/test_gates_detector_nix.py and the fuzzing gate's tests."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PRELUDE = REPO / "templates" / "lib" / "ccwrap.sh"
RECORD = REPO / "templates" / "verify" / "cc-record" / "record.sh"
FUZZCC = REPO / "templates" / "gates" / "fuzz-cc" / "fuzzcc.sh"
# the fake compiler: which one ran, its arguments, and the PATH it was given
FAKE = '#!/bin/sh\necho "ran $0 $*"\necho "PATH=$PATH"\n'


def install(directory: Path, name: str, text: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(text)
    (directory / name).chmod(0o755)


def wrap(tmp: Path, script: Path, name: str = "cc") -> Path:
    wrappers = tmp / "wrappers"
    install(wrappers, name, "#!/bin/sh\n" + PRELUDE.read_text() + script.read_text())
    return wrappers


def run(tmp: Path, path: list[Path], *argv: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": ":".join(str(p) for p in path) + ":/usr/bin:/bin", "NIX_BUILD_TOP": str(tmp)}
    env |= {"NIX_CFLAGS_COMPILE": "-O1"}
    return subprocess.run(
        argv, env=env, cwd=tmp, capture_output=True, text=True, timeout=30, check=False
    )


def test_the_recorder_logs_the_call_then_runs_the_next_compiler(tmp_path: Path) -> None:
    wrappers = wrap(tmp_path, RECORD)
    install(tmp_path / "real", "cc", FAKE)
    done = run(tmp_path, [wrappers, tmp_path / "real"], "cc", "-c", "x.c")
    assert done.returncode == 0, done.stderr
    ran, path = done.stdout.splitlines()
    assert ran == f"ran {tmp_path / 'real' / 'cc'} -c x.c"
    assert str(wrappers) not in path.split("=", 1)[1].split(":")
    log = (tmp_path / ".trace-cc.log").read_text()
    assert log == (
        f"call cc\ncwd {tmp_path}\nenv NIX_CFLAGS_COMPILE -O1\nenv NIX_CFLAGS_LINK \n"
        "env NIX_LDFLAGS \narg -c\narg x.c\nend\n"
    )


def test_the_fuzzing_compiler_adds_coverage_once_and_skips_itself(tmp_path: Path) -> None:
    wrappers = wrap(tmp_path, FUZZCC, "gcc")
    install(tmp_path / "real", "gcc", FAKE)
    done = run(tmp_path, [wrappers, tmp_path / "real"], "gcc", "-c", "a.c")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == (
        f"ran {tmp_path / 'real' / 'gcc'} -fsanitize-coverage=trace-pc -c a.c"
    )


@pytest.mark.parametrize(
    ("script", "who"),
    [(RECORD, "trace's compile recorder"), (FUZZCC, "trace's fuzzing compiler")],
)
def test_no_next_compiler_is_exit_127_naming_the_wrapper(
    tmp_path: Path, script: Path, who: str
) -> None:
    name = "trace-no-such-cc"  # a name no system directory on PATH holds
    wrappers = wrap(tmp_path, script, name)
    done = run(tmp_path, [wrappers], name, "-c", "a.c")
    assert done.returncode == 127
    assert done.stderr == f"{name}: not found ({who} found no {name} after {wrappers} on PATH)\n"
    assert done.stdout == ""
    assert os.access(wrappers / name, os.X_OK)
