"""`trace record [OPTIONS] -- PROGRAM ARGS…`: run a package's program under the verify harness,
capture the failing call and write it as a candidate skeleton (the library: engine.record)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.cli.args import positive_int

if TYPE_CHECKING:
    from engine.record.recorder import RecordResult


def register(sub: Any) -> None:
    p = sub.add_parser(
        "record",
        help="capture a failing call of a package's program as a candidate skeleton",
        description="Run PROGRAM (a name in the package's bin/) with ARGS under the verify "
        "harness against the unpatched build, capture the call (arguments, the files they name "
        "by content, --stdin, --env), and write candidate.toml, repro.sh and the data with an "
        "[expect] block saying how it failed (docs/record.md). Exit 0; 1 when the package does "
        "not build; 2 on bad input, a program that does not exist or a call that does not fail.",
    )
    p.add_argument("--package", required=True, help="attribute path in the fork's package set")
    p.add_argument(
        "--fork", type=Path, default=None,
        help="the package set (default: the nearest directory at or above this one holding a "
        "trace.toml, else this one)",
    )  # fmt: skip
    p.add_argument("--state-dir", type=Path, default=None, help="default: FORK/.trace")
    p.add_argument(
        "--stdin", type=Path, default=None, metavar="FILE",
        help="what the program reads on stdin ('-': this command's own stdin)",
    )  # fmt: skip
    p.add_argument(
        "--env", action="append", default=[], metavar="NAME[=VALUE]",
        help="an environment variable the call needs (its value here, or VALUE); repeatable. "
        "Nothing else of this environment reaches the program",
    )  # fmt: skip
    p.add_argument(
        "--minimise", "--minimize", action="store_true",
        help="shrink the call (arguments, then each file's and the stdin's lines and bytes) "
        "while it still fails the same way: same sanitizer kind and faulting function",
    )  # fmt: skip
    p.add_argument(
        "--budget", type=positive_int, default=None,
        help="trials minimisation may run (default: 400); each is a cached step",
    )  # fmt: skip
    p.add_argument("--out", type=Path, default=None,
                   help="the candidate folder (default: FORK/trace/candidates/ID)")  # fmt: skip
    p.add_argument("--id", dest="cid", default=None, help="candidate id (default: derived)")
    p.add_argument("--advisory", type=Path, default=None, metavar="OSV",
                   help="the advisory's OSV JSON (default: a stub to replace)")  # fmt: skip
    p.add_argument("--patch", action="append", type=Path, default=[], metavar="FILE",
                   help="the fix, when you have it already (repeatable)")  # fmt: skip
    p.add_argument(
        "-j", "--jobs", type=positive_int, default=None, help="parallel builds (nix -j), >= 1"
    )
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- PROGRAM ARGS…")
    p.set_defaults(handler=cmd_record)


def _stdin(path: Path | None) -> bytes | None:
    if path is None:
        return None
    if str(path) == "-":
        return sys.stdin.buffer.read()
    from engine.errors import UsageError

    if not path.is_file():
        raise UsageError(f"--stdin {path}: no such file", key="--stdin", hint="pass a file, or -")
    return path.read_bytes()


def _fork(given: Path | None) -> Path:
    from engine.verify.fork_graph import find_fork

    return (given or find_fork(Path.cwd() / "_") or Path.cwd()).resolve()


def cmd_record(args: argparse.Namespace) -> int:
    from engine.errors import UsageError
    from engine.record.recorder import DEFAULT_BUDGET, RecordRequest, record

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise UsageError("no program to record", hint="trace record --package P -- PROGRAM ARGS…")
    if args.budget is not None and not args.minimise:
        raise UsageError("--budget limits minimisation", hint="add --minimise")
    request = RecordRequest(
        fork=_fork(args.fork), package=args.package, program=command[0], argv=command[1:],
        stdin=_stdin(args.stdin), env=args.env, state=args.state_dir, out=args.out,
        cid=args.cid, advisory=args.advisory, patches=args.patch, minimise=args.minimise,
        budget=args.budget or DEFAULT_BUDGET, jobs=args.jobs,
    )  # fmt: skip
    result = record(request)
    for line in report_lines(result):
        print(line)
    return 0


def report_lines(result: RecordResult) -> list[str]:
    from engine.paths import cli

    lines = [f"recorded {result.failure.describe()}"]
    if result.minimised:
        t = result.trials
        lines.append(
            f"minimised: {result.recorded.size()} -> {result.written.size()} bytes of input, "
            f"{len(result.recorded.args)} -> {len(result.written.args)} argument(s); "
            f"{t.trials} trial(s) in {t.run_count} engine run(s), {t.built} built now"
        )
    folder = result.candidate.parent
    lines.append(
        f"wrote {result.candidate} ({', '.join(sorted(p.name for p in folder.iterdir()))})"
    )
    if not (folder / "fix.patch").exists() and "fix.patch" in result.candidate.read_text():
        fix = folder / "fix.patch"
        lines.append(f"next: write the fix as {fix}, then {cli('verify')} {result.candidate}")
    else:
        lines.append(f"next: {cli('verify')} {result.candidate}")
    return lines
