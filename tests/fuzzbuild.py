"""A C program compiled as trace's fuzzing build compiles it, for the fuzz loop's tests: gcc with
`-fsanitize-coverage=trace-pc`, ASan and `-g`, trace's coverage runtime (the fork server
included: templates/gates/fuzz-cc/trace_fuzz_rt.c) linked last, compiled once per directory."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RUNTIME = REPO / "templates" / "gates" / "fuzz-cc" / "trace_fuzz_rt.c"
CC = ["gcc", "-fsanitize-coverage=trace-pc", "-fsanitize=address", "-g", "-O0"]


def fuzz_binary(tmp: Path, out: Path, sources: list[Path], *flags: str) -> Path:
    """`out` built from `sources` (C files or objects) with `flags` and the runtime (its object
    kept as tmp/rt.o)."""
    rt = tmp / "rt.o"
    if not rt.exists():
        compile_rt = ["gcc", "-O2", "-fPIC", "-fno-sanitize=all", "-c", str(RUNTIME), "-o", str(rt)]
        subprocess.run(compile_rt, check=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([*CC, *flags, "-o", str(out), *map(str, sources), str(rt)], check=True)
    return out
