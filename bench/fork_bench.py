"""`trace fork` no-op rows (issue 14, fork half): trace's own time and the processes it starts.

    .venv/bin/python bench/fork_bench.py [--repeat 3] [--candidates 2] [--big-candidates 50]
                                         [--files 40000] [--workdir DIR]

(bench/run_bench.py runs it as a suite: `add_args` and `run` give its rows to run_bench's table.)

Rows (medians of --repeat no-op runs, after one untimed run that builds everything):
  fork no-op        the fixture fork (tests/fixtures/fork) with --candidates candidates
  fork no-op 40k    the same package set plus --files generated files (committed; generated here,
                    never committed to trace) and --big-candidates candidates (copies of one
                    fixture candidate, each with an id of its own)
  fork unrelated commit
                    the first row's fork after a commit that edits a file none of its candidates'
                    packages read (issue 28): the verdicts are kept from the memo of the commit
                    before (engine/fork/memo.py, the carry-over), with no Nix process

Every run is a real `trace fork --no-sign --json` subprocess whose PATH holds a shim in front of
nix, nix-instantiate, nix-store, nix-build and git: each call is counted and timed, so
  own s   = wall time - the time spent in those child processes (trace's own work: imports,
            hashing, loading, judging, writing bundles), the number the goals are about;
  nix     = Nix processes started by trace (goal: 0 on a no-op);
  git     = git processes (must not grow with the candidate count).
  cpu s   = user + sys CPU of trace and the processes it waited for (git on a no-op): what
            the run costs whatever the machine's load (wall and own time grow with the load).
Both rows run as `nix run .#verify` does: with `--source` (the fork's committed tree as Nix
copied it, made here once, untimed, by `builtins.fetchGit`), `--source-nar-hash`, `--system` and
`--nix-version`, so the package set is the source store path and the work tree is not walked.
Two untimed runs come first: the first builds, the second is the full trusted path again and
records the verdict memo (engine/fork/memo.py; the first run's reads are usually too new to
memoise; where they are not, the second run is already a memo hit);
the memo key is a file of the bench's own ($TRACE_MEMO_KEY), never the user's.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "fixtures" / "fork"
TOOLS = ("nix", "nix-instantiate", "nix-store", "nix-build", "git")
NIX_TOOLS = TOOLS[:-1]
OWN_GOALS = {"fork no-op": 0.25, "fork no-op 40k": 0.5, "fork unrelated commit": 0.5}
UNRELATED = "pkgs/cjson/parse.c"  # a file no bench candidate's package reads
BASE = "pager-last-page"
OTHERS = ("roster-wrong-field", "stamp-release", "textcols-zero-width")
GIT_ENV = {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.invalid",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.invalid",
}


@dataclass
class ForkRow:
    case: str
    candidates: int
    files: int
    wall: list[float] = field(default_factory=list)
    own: list[float] = field(default_factory=list)
    nix: list[int] = field(default_factory=list)
    git: list[int] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)  # user + sys of trace and its children

    @property
    def goal(self) -> float:
        return OWN_GOALS[self.case]


def _git(root: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(root), *args],
        check=True,
        capture_output=True,
        env={**os.environ, **GIT_ENV},
    )


def make_fork(root: Path, candidates: int, files: int) -> Path:
    """The fixture fork's package set, `candidates` fixture candidates (copies of BASE with ids of
    their own past the fixture's), and `files` generated files inside the package set."""
    root.mkdir(parents=True)
    for name in ("default.nix", "lib.nix", "pkgs", "trace.toml"):
        src = FIXTURE / name
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, root / name)
    dest = root / "trace" / "candidates"
    names = [BASE, *OTHERS][: min(candidates, 1 + len(OTHERS))] if files == 0 else [BASE]
    for name in names:
        shutil.copytree(FIXTURE / "trace" / "candidates" / name, dest / name)
    base = (FIXTURE / "trace" / "candidates" / BASE / "candidate.toml").read_text()
    for i in range(len(names), candidates):
        copy = dest / f"{BASE}-{i}"
        shutil.copytree(FIXTURE / "trace" / "candidates" / BASE, copy)
        text = base.replace('id = "TRACE-2026-0002-pager"', f'id = "TRACE-2026-{9000 + i}-pager"')
        (copy / "candidate.toml").write_text(text)
    for i in range(files):  # 100 files a folder, as a real tree spreads them
        f = root / "pkgs" / "bulk" / f"d{i // 100:04d}" / f"f{i:05d}.nix"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(f"{{ }}: {{ n = {i}; }}\n")
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "bench fork")
    return root


def shim(dir_: Path, log: Path) -> dict[str, str]:
    """PATH with a timing, counting wrapper in front of each of TOOLS."""
    dir_.mkdir(parents=True, exist_ok=True)
    for tool in TOOLS:
        real = shutil.which(tool)
        if real is None:
            raise SystemExit(f"bench: {tool} is not on PATH")
        (dir_ / tool).write_text(
            "#!/bin/sh\n"
            "s=$(date +%s%N)\n"
            f'{real} "$@"\n'
            "rc=$?\n"
            f'echo "{tool} $(( $(date +%s%N) - s ))" >> {log}\n'
            "exit $rc\n"
        )
        (dir_ / tool).chmod(0o755)
    # PYTHONDONTWRITEBYTECODE: an installed trace has its bytecode; without it every run would
    # compile its imports again (~2x the import time)
    drop = ("TRACE_DATA_DIR", "TRACE_CLI", "PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return {**env, "PATH": f"{dir_}:{env['PATH']}"}


def source_args(root: Path) -> list[str]:
    """What `nix run .#verify` passes (nix/verify-app.nix): the committed tree in the store."""
    expr = (
        f"let s = builtins.fetchGit {{ url = {json.dumps(str(root))}; }}; in "
        "{ path = s.outPath; narHash = s.narHash; system = builtins.currentSystem; "
        "version = builtins.nixVersion; }"
    )
    proc = subprocess.run(
        ["nix-instantiate", "--eval", "--strict", "--json", "--read-write-mode", "-E", expr],
        capture_output=True,
        text=True,
        check=True,
        timeout=1800,
    )
    got = json.loads(proc.stdout)
    return [
        "--source",
        got["path"],
        "--source-nar-hash",
        got["narHash"],
        "--system",
        got["system"],
        "--nix-version",
        f"nix (Nix) {got['version']}",
    ]


def fork_run(
    root: Path, env: dict[str, str], log: Path, source: list[str]
) -> tuple[float, float, int, int, float]:
    """One `trace fork` run: (wall, own, nix processes, git processes, cpu)."""
    log.unlink(missing_ok=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    # the trace of the Python running this bench (.venv/bin/python bench/... works without
    # activating the venv), else the one on PATH
    beside = Path(sys.executable).parent / "trace"
    trace = str(beside) if beside.exists() else shutil.which("trace", path=env["PATH"]) or "trace"
    t0 = time.perf_counter()
    proc = subprocess.run(
        [trace, "fork", "--no-sign", "--json", "-q", *source],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=7200,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"bench: trace fork failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    json.loads(proc.stdout)  # a real report, or the run did not do what it should
    rows = [line.split() for line in log.read_text().splitlines()] if log.is_file() else []
    child = sum(int(r[1]) for r in rows) / 1e9
    nix = sum(r[0] in NIX_TOOLS for r in rows)
    git = sum(r[0] == "git" for r in rows)
    return wall, wall - child, nix, git, cpu


def measure(row: ForkRow, work: Path, repeat: int, log_: list[str]) -> ForkRow:
    root = make_fork(work / row.case.replace(" ", "-"), row.candidates, row.files)
    log = work / f"{root.name}.calls"
    env = {**shim(work / "bin", log), "TRACE_MEMO_KEY": str(work / "memo.key")}
    source = source_args(root)
    if row.case == "fork unrelated commit":
        for _ in range(2):  # builds, then the full trusted path (memoised): not timed
            fork_run(root, env, log, source)
        edited = root / UNRELATED
        edited.write_text(edited.read_text() + "/* unrelated */\n")
        _git(root, "commit", "-q", "-am", "an unrelated commit")
        source = source_args(root)  # the new commit's source store path, as the app passes it
        log_.append(f"{row.case}: committed an edit of {UNRELATED}")
        return _timed(row, root, env, log, source, repeat, log_)
    t0 = time.perf_counter()
    fork_run(root, env, log, source)  # builds what is missing: not timed
    log_.append(f"{row.case}: first run (builds) {time.perf_counter() - t0:.1f} s")
    t0 = time.perf_counter()
    fork_run(root, env, log, source)  # the full trusted path (memoised), not timed
    # the first run already memoises where no file it read was modified within a second of its
    # start (racy-clean): then this run is a memo hit too
    log_.append(f"{row.case}: second run (full path or memo hit) {time.perf_counter() - t0:.1f} s")
    return _timed(row, root, env, log, source, repeat, log_)


def _timed(
    row: ForkRow,
    root: Path,
    env: dict[str, str],
    log: Path,
    source: list[str],
    repeat: int,
    log_: list[str],
) -> ForkRow:
    load = os.getloadavg()[0]
    for _ in range(repeat):
        wall, own, nix, git, cpu = fork_run(root, env, log, source)
        row.wall.append(wall)
        row.own.append(own)
        row.nix.append(nix)
        row.git.append(git)
        row.cpu.append(cpu)
    log_.append(f"{row.case}: load average {load:.1f} -> {os.getloadavg()[0]:.1f} (1 min)")
    return row


def fork_rows(
    work: Path,
    repeat: int = 3,
    candidates: int = 2,
    big_candidates: int = 50,
    files: int = 40_000,
    cases: list[str] | None = None,
) -> tuple[list[ForkRow], list[str]]:
    notes: list[str] = []
    rows = [
        ForkRow("fork no-op", candidates, 0),
        ForkRow("fork no-op 40k", big_candidates, files),
        ForkRow("fork unrelated commit", candidates, 0),
    ]
    done = [measure(r, work, repeat, notes) for r in rows if not cases or r.case in cases]
    return done, notes


def fork_table(rows: list[ForkRow]) -> str:
    head = f"{'case':<21} {'cands':>5} {'files':>6}  {'wall s':>7}  {'own s':>6}  {'goal':>6}"
    head += f"  met  {'nix':>4}  goal  met  {'git':>4}  {'cpu s':>6}"
    lines = [head, "-" * len(head)]
    for r in rows:
        own = statistics.median(r.own)
        nix = max(r.nix)
        lines.append(
            f"{r.case:<21} {r.candidates:>5} {r.files:>6}  {statistics.median(r.wall):7.3f}"
            f"  {own:6.3f}  {f'<={r.goal}':>6}  {'yes' if own <= r.goal else 'NO ':<3}"
            f"  {nix:>4}  {'0':>4}  {'yes' if nix == 0 else 'NO ':<3}  {max(r.git):>4}"
            f"  {statistics.median(r.cpu):6.3f}"
        )
    lines.append(
        "own = wall - time in nix*/git child processes (median); nix, git = processes per run; "
        "cpu = user + sys of trace and every process it waited for (median; load does not "
        "inflate it)"
    )
    return "\n".join(lines)


def add_args(ap: argparse.ArgumentParser) -> None:
    """bench/run_bench.py's suite interface: this module's options there."""
    ap.add_argument("--fork-candidates", type=int, default=2, help="fork no-op candidates")
    ap.add_argument("--fork-big-candidates", type=int, default=50, help="in the 40k-file fork")
    ap.add_argument("--fork-files", type=int, default=40_000, help="generated package-set files")


def run(args: argparse.Namespace, work: Path) -> list[Any]:
    """bench/run_bench.py's suite interface: the rows as its table prints them (bench/rows.py);
    the goal is on trace's own time, the Nix processes (goal 0) are in the note."""
    from rows import Row  # bench/rows.py, beside run_bench.py

    work.mkdir(parents=True, exist_ok=True)
    rows, notes = fork_rows(
        work, args.repeat, args.fork_candidates, args.fork_big_candidates, args.fork_files
    )
    for note in notes:
        print(f"fork_bench: {note}", file=sys.stderr)
    return [
        Row(
            case=f"{r.case} (own time)",
            n=r.candidates,
            trace=r.own,
            goal=r.goal,
            note=f"{r.files} files; wall {statistics.median(r.wall):.3f} s; Nix processes "
            f"{max(r.nix)} (goal 0: {'yes' if max(r.nix) == 0 else 'NO'}); git {max(r.git)}; "
            f"cpu {statistics.median(r.cpu):.3f} s",
        )
        for r in rows
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--candidates", type=int, default=2)
    ap.add_argument("--big-candidates", type=int, default=50)
    ap.add_argument("--files", type=int, default=40_000)
    ap.add_argument("--workdir", type=Path, default=None, help="default: a new temp dir")
    ap.add_argument(
        "--case", action="append", choices=list(OWN_GOALS), help="only this row (repeatable)"
    )
    args = ap.parse_args(argv)
    if args.repeat < 1 or args.candidates < 1 or args.big_candidates < 1 or args.files < 0:
        ap.error("need --repeat, --candidates and --big-candidates >= 1 and --files >= 0")
    with tempfile.TemporaryDirectory(prefix="trace-fork-bench-", dir=args.workdir) as tmp:
        rows, notes = fork_rows(
            Path(tmp), args.repeat, args.candidates, args.big_candidates, args.files, args.case
        )
    print(fork_table(rows))
    for note in notes:
        print(note)
    return 0


if __name__ == "__main__":
    sys.exit(main())
