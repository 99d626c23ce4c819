"""Instruction counts of one changed step, per code version (issue 30; bench/README.md, rounds
twelve and thirteen): wall times on this shared machine are noise, `valgrind --tool=callgrind`
counts of the trace process are not (Nix runs natively, uncounted).

    .venv/bin/python bench/callgrind_one_change.py [--rounds 5] [--n 1000] NAME=SRC [NAME=SRC ...]

e.g. `main=/tmp/main` (from `git archive main | tar x -C /tmp/main`) `branch=$PWD`. Each code
gets its own generated project (bench/graphgen.py) and state dir, built once; every round
edits one sink's note in each project (a note of its own, so each really builds one
derivation) and runs `trace run` of that code (PYTHONPATH=SRC, this venv's interpreter) under
callgrind, the codes' order swapped every other round. Prints the total instructions per run.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

from graphgen import Project
from tools import ENV, drop_gcroots

CODE = "import sys; from engine.cli import main; sys.exit(main())"


def run(src: str, proj: Project, state: Path, out: Path | None) -> str:
    """`trace run` of the code at `src` (under callgrind when `out`): its summary line."""
    pre = [] if out is None else ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
    cmd = [*pre, sys.executable, "-c", CODE, "run", str(proj.graph), "--root", str(proj.root)]
    cmd += ["--state-dir", str(state), "-j", "2", "--quiet"]
    proc = subprocess.run(
        cmd, cwd=proj.root, env={**ENV, "PYTHONPATH": src}, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SystemExit(f"{src}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    return proc.stdout.strip().splitlines()[-1]


def instructions(out: Path) -> int:
    m = re.search(r"^summary:\s+(\d+)", out.read_text(), re.M)
    if m is None:
        raise SystemExit(f"no summary in {out}")
    return int(m.group(1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("codes", nargs="+", metavar="NAME=SRC")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=1000)
    args = ap.parse_args()
    codes = [tuple(c.split("=", 1)) for c in args.codes]
    nonce = uuid.uuid4().hex[:8]
    with tempfile.TemporaryDirectory(prefix="cg-one-change-") as tmp:
        work = Path(tmp)
        projects: dict[str, tuple[Project, Path]] = {}
        try:
            for name, src in codes:
                proj = Project(root=work / f"proj-{name}", n=args.n, salt=f"cg-{nonce}")
                proj.write()
                projects[name] = (proj, work / f"state-{name}")
                print(f"{name}: initial build: {run(src, proj, projects[name][1], None)}")
            for r in range(args.rounds):
                for name, src in codes if r % 2 == 0 else codes[::-1]:
                    proj, state = projects[name]
                    proj.notes = {proj.sinks()[0]: f"cg-{nonce}-{name}-{r}"}
                    proj.write()
                    out = work / f"callgrind.{name}.{r}"
                    summary = run(src, proj, state, out)
                    count, load = instructions(out) / 1e6, os.getloadavg()[0]
                    print(f"round {r} {name}: {count:.1f}M ({summary}), load {load:.2f}")
        finally:
            for _, state in projects.values():
                drop_gcroots(state)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
