"""The warm rows of bench/run_bench.py (issue 30): `trace verify --bundle --key` and `trace
decide` repeated with nothing changed, goal <= 0.5 s each.

    .venv/bin/python bench/warm_bench.py [--repeat 5] [--workdir DIR]

A copy of the fixture fork (tests/fixtures/fork, every file older than the memo's racy window)
is verified once with real builds, then `verify --bundle --key` and `decide` run once more each,
untimed: those runs take the full trusted path and record the authenticated memo
(engine/fork/warm.py). Each timed repetition is a fresh `trace` process of each command; it must
print what the untimed run printed and say on stderr that the memo served it (else the row is a
failure, not a fast number). The memo key is a file of the bench's own ($TRACE_MEMO_KEY), never
the user's. *cpu* is user + sys of the process, which the machine's load does not inflate.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "fixtures" / "fork"
CAND = "trace/candidates/pager-last-page/candidate.toml"
GOAL_WARM = 0.5
PAST = 1_600_000_000_000_000_000  # ns: older than any racy window
SERVED = "served from the authenticated memo"


def add_args(ap: argparse.ArgumentParser) -> None:
    """bench/run_bench.py's suite interface (no options of its own)."""


def _trace() -> str:
    beside = Path(sys.executable).with_name("trace")
    return str(beside) if beside.exists() else shutil.which("trace") or "trace"


def _run(
    cmd: list[str], env: dict[str, str]
) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """(wall, cpu, process) of one trace command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return wall, cpu, proc


def _fork(work: Path) -> Path:
    fork = work / "fork"
    shutil.copytree(FIXTURE, fork, ignore=shutil.ignore_patterns(".trace", "result*"))
    for p in [fork, *fork.rglob("*")]:
        os.utime(p, ns=(PAST, PAST), follow_symlinks=False)
    return fork


def commands(work: Path) -> tuple[dict[str, list[str]], dict[str, str]]:
    """The two warm commands on a verified fork copy, and their environment."""
    trace = _trace()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["TRACE_MEMO_KEY"] = str(work / "memo.key")
    fork = _fork(work)
    cand = str(fork / CAND)
    key = work / "keys" / "signer.key"
    key.parent.mkdir()
    # bytecode first, as an installed trace has it: a run that writes .pyc files under the
    # engine's own directory reads it racily new and is (rightly) not memoised
    compiled = [sys.executable, "-m", "compileall", "-q", str(REPO / "engine")]
    for cmd in (
        compiled,
        [trace, "keygen", str(key)],
        [trace, "verify", cand, "--fork", str(fork), "-q"],
    ):
        _, _, proc = _run(cmd, env)
        if proc.returncode != 0:
            raise SystemExit(f"warm_bench: {cmd[1]} failed ({proc.returncode}):\n{proc.stderr}")
    time.sleep(1.1)  # the fork's mtime (moved by the first verify) older than the racy window
    bundle = work / "bundle"
    verify = [trace, "verify", cand, "--fork", str(fork), "-q", "--bundle", str(bundle)]
    return {
        "warm verify --bundle --key": [*verify, "--key", str(key)],
        "warm decide": [trace, "decide", cand, "--fork", str(fork)],
    }, env


def measure(work: Path, repeat: int) -> list[tuple[str, list[float], list[float]]]:
    """Per command: (case, wall samples, cpu samples) of `repeat` memo-served runs."""
    cmds, env = commands(work)
    out = []
    for case, cmd in cmds.items():
        _, _, first = _run(cmd, env)  # the full trusted path: records the memo
        if first.returncode != 0:
            raise SystemExit(f"warm_bench: {case} failed ({first.returncode}):\n{first.stderr}")
        walls, cpus = [], []
        for _ in range(repeat):
            wall, cpu, proc = _run(cmd, env)
            if (proc.returncode, proc.stdout) != (0, first.stdout) or SERVED not in proc.stderr:
                raise SystemExit(f"warm_bench: {case} was not served from the memo:\n{proc.stderr}")
            walls.append(wall)
            cpus.append(cpu)
        out.append((case, walls, cpus))
    return out


def run(args: argparse.Namespace, work: Path) -> list[Any]:
    """bench/run_bench.py's suite interface: one row per command, goal on the median wall."""
    from rows import Row

    work.mkdir(parents=True, exist_ok=True)
    return [
        Row(case, trace=walls, goal=GOAL_WARM, note=f"cpu {statistics.median(cpus):.3f} s")
        for case, walls, cpus in measure(work, args.repeat)
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--workdir", type=Path, default=None, help="default: a new temp dir")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("need --repeat >= 1")
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="trace-warm-bench-", dir=args.workdir) as tmp:
        rows = measure(Path(tmp), args.repeat)
    for case, walls, cpus in rows:
        wall = statistics.median(walls)
        print(
            f"{case:<28} wall {wall:.3f} s  cpu {statistics.median(cpus):.3f} s  "
            f"goal <= {GOAL_WARM} s: {'met' if wall <= GOAL_WARM else 'NO'}  "
            f"samples {' '.join(f'{w:.3f}' for w in walls)}"
        )
    print(f"load average (1, 5, 15 min) at start {load}, at end {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
