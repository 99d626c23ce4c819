"""`trace record` as one library call: capture the call, run it under the harness against the
unpatched build, refuse a call that does not fail, minimise it when asked, write the skeleton."""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import InputError, TraceError, UsageError
from engine.record.capture import capture
from engine.record.failure import Failure, failure_of, run_summary
from engine.record.minimise import Shrinker, minimise
from engine.record.skeleton import Skeleton, write_skeleton
from engine.record.trials import Trials, work_dir

if TYPE_CHECKING:
    from collections.abc import Iterator

    from engine.record.interaction import Interaction

DEFAULT_BUDGET = 400  # trials minimisation may ask for
CANDIDATES = Path("trace") / "candidates"


@dataclass(frozen=True)
class RecordRequest:
    fork: Path
    package: str
    program: str
    argv: list[str]
    stdin: bytes | None = None
    env: list[str] = field(default_factory=list)
    state: Path | None = None
    out: Path | None = None
    cid: str | None = None
    advisory: Path | None = None
    patches: list[Path] = field(default_factory=list)
    minimise: bool = False
    budget: int = DEFAULT_BUDGET
    jobs: int | None = None
    cwd: Path | None = None


@dataclass(frozen=True)
class RecordResult:
    candidate: Path
    failure: Failure
    recorded: Interaction
    written: Interaction
    trials: Trials
    minimised: bool


def candidate_id(req: RecordRequest, call: Interaction) -> str:
    if req.cid is not None:
        if not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$", req.cid):
            raise UsageError(
                f"--id {req.cid!r} is not a candidate id",
                key="--id",
                hint="letters, digits, '.', '_' and '-', starting with a letter or digit",
            )
        return req.cid
    name = (
        req.package
        if req.package.split(".")[-1] == call.program
        else f"{req.package}-{call.program}"
    )
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")
    return f"{base}-record-{call.digest()[:8]}"


def _read_file(path: Path, option: str) -> bytes:
    if not path.is_file():
        raise UsageError(f"{option} {path}: no such file", key=option, hint="pass an existing file")
    return path.read_bytes()


def _patches(paths: list[Path]) -> tuple[tuple[str, bytes], ...]:
    names = [p.name for p in paths]
    if len(set(names)) != len(names):
        raise UsageError("two --patch files share a name", key="--patch", hint="rename one")
    return tuple((p.name, _read_file(p, "--patch")) for p in paths)


@contextmanager
def _nothing_written_on_bad_input(*paths: Path) -> Iterator[None]:
    """Bad input (exit 2) leaves none of `paths` behind that did not exist before (the state
    directory, trace's work folder in the fork): as every command's bad input."""
    import shutil

    from engine.cache import nothing_written_on_bad_input

    existed = {p: p.exists() for p in paths}
    try:
        with nothing_written_on_bad_input(paths[0]):
            yield
    except TraceError as exc:
        if exc.exit_code == 2:
            for p, was in existed.items():
                if not was:
                    shutil.rmtree(p, ignore_errors=True)
        raise


def _not_failing(trials: Trials, call: Interaction, record: dict[str, Any]) -> TraceError:
    bin_dir = Path(trials.package_out or "/nonexistent") / "bin"
    if not (bin_dir / call.program).exists():
        have = sorted(p.name for p in bin_dir.iterdir()) if bin_dir.is_dir() else []
        return InputError(
            f"pkgs.{trials.package} has no program bin/{call.program}",
            key="PROGRAM",
            hint=f"its programs: {', '.join(have)}" if have else "it installs no bin/ at all",
        )
    runs = [i for i in record.get("invocations") or [] if i.get("target") == f"bin/{call.program}"]
    how = ", ".join(f"exit {i.get('exit_code')}" for i in runs) or "it never ran"
    return InputError(
        f"bin/{call.program} did not fail under the harness ({how}; no signal, no sanitizer "
        "report): nothing to record",
        key="PROGRAM",
        hint="record a call that fails (the arguments, --stdin FILE and --env NAME the failure "
        "needs: only what you pass reaches the program in the sandbox)",
    )


def _folder(req: RecordRequest, cid: str) -> Path:
    """Where the skeleton goes: inside the fork, and not over an existing candidate."""
    folder = (req.out or req.fork / CANDIDATES / cid).resolve()
    if not folder.is_relative_to(req.fork):
        raise UsageError(
            f"--out {folder} is outside the fork {req.fork}",
            key="--out",
            hint="`trace verify` reads a candidate's files inside the fork (its project root): "
            "record into a folder under it, e.g. trace/candidates/ID",
        )
    if (folder / "candidate.toml").exists():
        raise UsageError(
            f"{folder / 'candidate.toml'} exists",
            key="--out",
            hint="record into another folder (--out DIR, --id ID) or remove it",
        )
    return folder


@dataclass(frozen=True)
class _Reproduced:
    failure: Failure  # as the written call shows it
    written: Interaction
    run: dict[str, Any]  # the recorded call's run (run_summary)
    stats: dict[str, Any] | None  # the minimisation's numbers


def _reproduce(req: RecordRequest, call: Interaction, trials: Trials) -> _Reproduced:
    """Run the call (refused when its program did not fail) and, when asked, minimise it."""
    [first] = trials.run([call])
    failure = failure_of(first, call.program)
    if failure is None:
        raise _not_failing(trials, call, first)
    run = run_summary(first, call.program)
    if not req.minimise:
        return _Reproduced(failure, call, run, None)
    written = minimise(call, Shrinker(trials, failure, req.budget))
    [last] = trials.run([written])
    stats = {
        "budget": req.budget,
        "trials": trials.trials,
        "built": trials.built,
        "engine_runs": trials.run_count,
        "bytes": [call.size(), written.size()],
    }
    return _Reproduced(failure_of(last, written.program) or failure, written, run, stats)


def record(req: RecordRequest) -> RecordResult:
    """Capture, run (and minimise) the call, write the skeleton; bad input writes nothing."""
    req = replace(req, fork=req.fork.resolve())
    call, seen = capture(req.program, req.argv, stdin=req.stdin, env=req.env, cwd=req.cwd)
    cid = candidate_id(req, call)
    folder = _folder(req, cid)
    advisory = _read_file(req.advisory, "--advisory") if req.advisory else None
    patches = _patches(req.patches)
    state = (req.state or req.fork / ".trace").resolve()
    trials = Trials(req.fork, state, req.package, req.jobs)
    with _nothing_written_on_bad_input(state, work_dir(req.fork).parent, work_dir(req.fork)):
        got = _reproduce(req, call, trials)
    skeleton = Skeleton(
        cid,
        req.package,
        got.failure,
        call,
        got.written,
        seen,
        advisory,
        patches,
        got.stats,
        got.run,
    )
    candidate = write_skeleton(folder, skeleton)
    return RecordResult(candidate, got.failure, call, got.written, trials, req.minimise)
