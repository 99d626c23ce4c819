"""The hostile-input catalogue, against the real CLI in a subprocess with a deadline: every case
exits 2 (bad input) within the deadline, prints no traceback, names the user's own file (never
trace's shipped pipeline), and writes nothing: in a fresh project no state directory (or GC-root
folder) appears, and in one whose state directory earlier runs filled, that directory stays as
it was; either way every name, size, modification time and byte of the tree is unchanged
(issue 28: refused before the index is opened, or with the index only read).
Complements tests/test_engine_badinput.py (in-process, one row per
pipeline-file mistake) with what only a real process shows: hangs on FIFOs and devices, symlink
loops, non-UTF-8 argv, deep nesting. Property-based cases (hypothesis) feed arbitrary bytes and
nesting to the loader in-process."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import storelock
from engine.cache import gcroot_folder
from engine.candidate import load_candidate
from engine.errors import InputError
from engine.graph import load_graph
from engine.loader import MAX_DEPTH, read_document
from tests.conftest import own_store_lock_for
from tests.enginekit import KINDS, MINIPKGS, REPO, TEXT_TEMPLATE, make_project
from tests.tiers import repeats

DEADLINE = 60.0  # seconds; a hang fails the case
FORK = REPO / "tests" / "fixtures" / "fork"
CAND = "trace/candidates/cparse-wrong-fix"
STEP = '[steps.a]\nkind = "text"\n'
SHIPPED = ("graphs/gates.toml", "graphs/verify.toml", "/graphs/")


@dataclass
class Case:
    setup: Callable[[Path], list[str]]  # makes the project under the path; returns trace's argv
    fragment: str  # must appear in stderr
    where: str  # the user's own file (or flag) named in stderr
    fork: bool = False  # a copy of the fixture fork instead of an engine project


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("TRACE_MACHINE", None)
    return env


def _run(argv: list[str | bytes], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", *argv],
        cwd=cwd,
        capture_output=True,
        timeout=DEADLINE,
        env=_env(),
        stdin=subprocess.DEVNULL,
    )


LOCK_WAIT = b"trace: waiting for another trace process's Nix build on this store ("


def _run_under_a_held_lock(argv: list[str | bytes], cwd: Path, locks: Path) -> tuple[int, bytes]:
    """`_run` while this test holds the store's build lock (engine/storelock.py), in a lock
    directory of its own (no other process on the machine takes it): bad input is refused
    before any Nix build call, so the run never waits for it. A run that does wait says so on
    stderr after storelock.NOTICE_AFTER; the lock is released then, so that it ends and the
    case fails on the notice, not on the deadline. (exit code, stderr)"""
    env = {**_env(), "TRACE_STORE_LOCK_DIR": str(locks)}
    held = os.open(locks / storelock.lock_path(storelock.store_of([])).name, os.O_RDWR | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_EX)
    once = threading.Lock()

    def release() -> None:
        if once.acquire(blocking=False):
            os.close(held)

    proc = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", *argv],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    err: list[bytes] = []

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            err.append(line)
            if line.startswith(LOCK_WAIT):
                release()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        code = proc.wait(DEADLINE)  # raises TimeoutExpired on a hang
        reader.join(DEADLINE)
    finally:
        proc.kill()
        release()
    return code, b"".join(err)


def _snapshot(root: Path) -> dict[str, tuple[int, int, int, bytes]]:
    """Every entry under root, root included (not following symlinks): type bits, size,
    modification time (a directory's changes when an entry is made or removed in it, even
    one made and removed again) and a file's bytes."""
    found: dict[str, tuple[int, int, int, bytes]] = {}
    for folder, dirs, files in os.walk(root):
        for name in [".", *dirs, *files]:
            path = Path(folder) / name
            st = path.lstat()
            regular = path.is_file() and not path.is_symlink()
            data = path.read_bytes() if regular and st.st_size < 1 << 20 else b""
            kind = st.st_mode & 0o170000
            found[os.path.normpath(path.relative_to(root))] = (
                kind,
                st.st_size,
                st.st_mtime_ns,
                data,
            )
    return found


# --- builders of the project a case runs in


def graph_project(
    text: str, extra: Callable[[Path], None] | None = None
) -> Callable[[Path], list[str]]:
    """An engine project whose graph.toml is `text` (after extra() adjusts it): `trace run`."""

    def setup(p: Path) -> list[str]:
        make_project(p, "")
        (p / "graph.toml").write_text(text)
        if extra:
            extra(p)
        return ["run", "graph.toml", "-q"]

    return setup


def graph_file(make: Callable[[Path], None], name: str = "g.toml") -> Callable[[Path], list[str]]:
    """An engine project plus a pipeline file `name` made by make(path): `trace run name`."""

    def setup(p: Path) -> list[str]:
        make_project(p, STEP)
        make(p / name)
        return ["run", name, "-q"]

    return setup


def candidate(
    edit: Callable[[Path], None], command: str = "mutants", extra: tuple[str, ...] = ()
) -> Callable[[Path], list[str]]:
    """A copy of the fixture fork with one candidate edited: `trace COMMAND candidate.toml`."""

    def setup(p: Path) -> list[str]:
        shutil.copytree(FORK, p, symlinks=True)
        edit(p / CAND)
        return [command, f"{CAND}/candidate.toml", *extra]

    return setup


def candidate_file(make: Callable[[Path], None]) -> Callable[[Path], list[str]]:
    """The candidate file itself replaced by what make(path) creates."""

    def edit(c: Path) -> None:
        (c / "candidate.toml").unlink()
        make(c / "candidate.toml")

    return candidate(edit)


def toml_set(key: str, value: str) -> Callable[[Path], None]:
    """Replace the line `key = ...` of the candidate file by `key = value`."""

    def edit(c: Path) -> None:
        f = c / "candidate.toml"
        lines = f.read_text().splitlines()
        lines = [f"{key} = {value}" if ln.split(" = ")[0] == key else ln for ln in lines]
        f.write_text("\n".join(lines) + "\n")

    return edit


def fifo(path: Path) -> None:
    os.mkfifo(path)


def to_dev_zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


def loop(path: Path) -> None:
    other = path.with_name(path.name + ".other")
    other.symlink_to(path.name)
    path.symlink_to(other.name)


def through_a_file(path: Path) -> None:
    """`path` names a file below a regular file (ENOTDIR): unreadable even to root."""
    path.parent.write_text("x")


def nested(depth: int) -> Callable[[Path], None]:
    return lambda path: path.write_text("a = " + "[" * depth + "]" * depth + "\n")


def big_int_param(value: int) -> str:
    return KINDS + STEP + f"params = {{ sleep = {value} }}\n"


def with_input(make: Callable[[Path], None]) -> Callable[[Path], None]:
    def extra(p: Path) -> None:
        (p / "data").mkdir()
        (p / "data" / "ok.txt").write_text("ok\n")
        make(p / "data" / "bad")

    return extra


def in_package_set(make: Callable[[Path], None]) -> Callable[[Path], None]:
    return lambda p: make(p / "pkgs" / "bad")


def escaping_patch(c: Path) -> None:
    shutil.copy(c / "fix.patch", c.parents[3] / "outside.patch")
    toml_set("patches", '["../../../../outside.patch"]')(c)


def not_evaluating(command: str) -> Callable[[Path], list[str]]:
    """A graph that loads and renders but does not evaluate (an undefined Nix variable)."""

    def setup(p: Path) -> list[str]:
        make_project(p, STEP)
        (p / "templates" / "text.nix.j2").write_text('pkgs.runCommand "a" { x = nosuch; } ""\n')
        return [command, "graph.toml", *(["-q"] if command == "run" else [])]

    return setup


def outside_candidate(p: Path) -> list[str]:
    """A candidate (all its files) outside the fork: `trace verify C --fork FORK`."""
    shutil.copytree(FORK, p, symlinks=True)
    shutil.copytree(p / CAND, p.parent / "elsewhere")
    return ["verify", "../elsewhere/candidate.toml", "--fork", ".", "-q"]


CASES: dict[str, Case] = {
    # --- the pipeline file itself
    "pipeline-fifo": Case(graph_file(fifo), "FIFO", "g.toml"),
    "pipeline-dev-zero": Case(graph_file(to_dev_zero), "character device", "g.toml"),
    "pipeline-directory": Case(graph_file(os.mkdir), "is a directory", "g.toml"),
    "pipeline-symlink-loop": Case(graph_file(loop), "symlink loop", "g.toml"),
    "pipeline-through-a-file": Case(
        graph_file(through_a_file, "plain/g.toml"), "is a file, not a directory", "plain/g.toml"
    ),
    "pipeline-latin1": Case(
        graph_file(lambda p: p.write_bytes(b"version = 1\n# caf\xe9\n")), "not UTF-8", "g.toml:2"
    ),
    "pipeline-utf16": Case(
        graph_file(lambda p: p.write_text("version = 1\n", encoding="utf-16")), "UTF-16", "g.toml"
    ),
    "pipeline-nested-500": Case(graph_file(nested(500)), "nested too deeply", "g.toml"),
    "pipeline-nested-100000": Case(graph_file(nested(100_000)), "nested too deeply", "g.toml"),
    "pipeline-proc-file": Case(
        lambda p: [*graph_file(lambda q: None)(p)[:1], "/proc/self/status", "-q"],
        "kernel file",
        "/proc/self/status",
    ),
    "pipeline-name-5000-chars": Case(
        lambda p: [*graph_file(lambda q: None)(p)[:1], "g" * 5000 + ".toml", "-q"],
        "too long",
        "ggg",
    ),
    "pipeline-17-mib": Case(
        graph_file(lambda p: (p.write_bytes(b"#"), os.truncate(p, 17 << 20))),
        "larger than",
        "g.toml",
    ),
    "include-shipped-verify-without-a-candidate": Case(
        graph_project('include = ["trace:graphs/verify.toml"]\n[nix]\npackage_set = "pkgs"\n'),
        "which this run does not provide",
        "graph.toml, key 'include'",
    ),
    # --- strict types in the pipeline
    "version-true": Case(
        graph_project(KINDS.replace("version = 1", "version = true") + STEP),
        "integer 1",
        "graph.toml:1",
    ),
    "version-float": Case(
        graph_project(KINDS.replace("version = 1", "version = 1.0") + STEP),
        "integer 1",
        "graph.toml:1",
    ),
    "nix-cores-abc": Case(
        graph_project(KINDS.replace("[nix]\n", '[nix]\noptions = { cores = "abc" }\n') + STEP),
        "'cores' must be a whole number",
        "graph.toml",
    ),
    "nix-max-jobs-0": Case(
        graph_project(KINDS.replace("[nix]\n", '[nix]\noptions = { max-jobs = "0" }\n') + STEP),
        "'max-jobs' must be a whole number",
        "graph.toml",
    ),
    "int-param-min-int64": Case(graph_project(big_int_param(-(2**63))), "64-bit", "graph.toml:18"),
    "int-param-2-pow-63": Case(graph_project(big_int_param(2**63)), "64-bit", "graph.toml:18"),
    "package-set-empty": Case(
        graph_project(KINDS.replace('package_set = "pkgs"', 'package_set = ""') + STEP),
        "at least 1 character",
        "graph.toml",
    ),
    "var-not-a-string": Case(
        graph_project(KINDS + STEP + "params = { message = { var = 1 } }\n"),
        "`var` must be a string",
        "graph.toml:18",
    ),
    "trace-ref-escapes": Case(
        graph_project(KINDS + STEP + 'inputs = { f = "trace:../../../../etc/hostname" }\n'),
        "escapes trace's data directory",
        "graph.toml:18",
    ),
    "trace-include-escapes": Case(
        graph_project('include = ["trace:../../../../etc/hostname"]\n' + KINDS + STEP),
        "escapes trace's data directory",
        "graph.toml:1",
    ),
    # --- inputs and the package set
    "input-fifo": Case(
        graph_project(KINDS + STEP + 'inputs = { f = "data/bad" }\n', with_input(fifo)),
        "FIFO",
        "data/bad",
    ),
    "fifo-in-input-directory": Case(
        graph_project(KINDS + STEP + 'inputs = { f = "data" }\n', with_input(fifo)),
        "FIFO",
        "data/bad",
    ),
    "input-symlink-loop": Case(
        graph_project(KINDS + STEP + 'inputs = { f = "data/bad" }\n', with_input(loop)),
        "does not exist",
        "graph.toml:18",
    ),
    "fifo-in-package-set": Case(
        graph_project(KINDS + STEP, in_package_set(fifo)), "FIFO", "pkgs/bad"
    ),
    "template-fifo": Case(
        graph_project(
            KINDS + STEP,
            lambda p: ((p / "templates/text.nix.j2").unlink(), fifo(p / "templates/text.nix.j2")),
        ),
        "FIFO",
        "text.nix.j2",
    ),
    "template-proc-mem": Case(
        graph_project(KINDS.replace("templates/text.nix.j2", "/proc/self/mem") + STEP),
        "kernel file",
        "graph.toml:5, key 'kinds.text.template'",
    ),
    # --- paths given on the command line
    "state-dir-not-utf8": Case(
        lambda p: [
            *graph_project(KINDS + STEP)(p),
            "--state-dir",
            os.fsencode(str(p)) + b"/st\xff",
        ],
        "not valid UTF-8",
        "--state-dir",
    ),
    "pipeline-name-not-utf8": Case(
        lambda p: [
            *graph_project(KINDS + STEP)(p)[:1],
            (
                shutil.copy(p / "graph.toml", os.fsdecode(os.fsencode(str(p)) + b"/g\xff.toml")),
                b"g\xff.toml",
            )[1],
            "-q",
        ],
        "not valid UTF-8",
        "g\\udcff.toml",
    ),
    "state-dir-through-a-file": Case(
        lambda p: [*graph_project(KINDS + STEP)(p), "--state-dir", "graph.toml/st"],
        "cannot use",
        "--state-dir",
    ),
    "state-dir-read-only-fs": Case(
        lambda p: [*graph_project(KINDS + STEP)(p), "--state-dir", "/proc/sys/trace-state"],
        "cannot use",
        "--state-dir",
    ),
    # --- the candidate file
    "candidate-fifo": Case(candidate_file(fifo), "FIFO", "candidate.toml", fork=True),
    "candidate-dev-zero": Case(
        candidate_file(to_dev_zero), "character device", "candidate.toml", fork=True
    ),
    "candidate-directory": Case(
        candidate_file(os.mkdir), "is a directory", "candidate.toml", fork=True
    ),
    "candidate-symlink-loop": Case(
        candidate_file(loop), "symlink loop", "candidate.toml", fork=True
    ),
    "candidate-latin1": Case(
        candidate_file(lambda p: p.write_bytes(b'id = "caf\xe9"\n')),
        "not UTF-8",
        "candidate.toml:1",
        fork=True,
    ),
    "candidate-utf16": Case(
        candidate_file(lambda p: p.write_text('id = "x"\n', encoding="utf-16")),
        "UTF-16",
        "candidate.toml",
        fork=True,
    ),
    "candidate-nested-500": Case(
        candidate_file(nested(500)), "nested too deeply", "candidate.toml", fork=True
    ),
    "candidate-exit-code-string": Case(
        candidate(toml_set("exit_code", '"1"')), "valid integer", "candidate.toml:18", fork=True
    ),
    "candidate-exit-code-empty-list": Case(
        candidate(toml_set("exit_code", "[]")), "at least 1 item", "candidate.toml", fork=True
    ),
    "candidate-exit-code-2-pow-70": Case(
        candidate(toml_set("exit_code", str(2**70))),
        "less than or equal to 255",
        "candidate.toml:18",
        fork=True,
    ),
    "candidate-runs-string": Case(
        candidate(toml_set("runs", '"3"')), "valid integer", "candidate.toml:14", fork=True
    ),
    "candidate-id-250-chars": Case(
        candidate(toml_set("id", '"' + "a" * 250 + '"')),
        "at most 128 characters",
        "candidate.toml:1",
        fork=True,
    ),
    "candidate-unknown-key": Case(
        candidate(
            lambda c: (c / "candidate.toml").write_text(
                (c / "candidate.toml").read_text().replace("origin", "orign")
            )
        ),
        "did you mean 'origin'",
        "candidate.toml:4",
        fork=True,
    ),
    "candidate-patch-fifo": Case(
        candidate(lambda c: ((c / "fix.patch").unlink(), fifo(c / "fix.patch"))),
        "not a regular file",
        "candidate.toml",
        fork=True,
    ),
    "candidate-patch-escapes-the-fork": Case(
        candidate(escaping_patch, "verify", ("--fork", ".", "-q")),
        "escapes the project root",
        "candidate.toml, key 'patches'",
        fork=True,
    ),
    "candidate-outside-the-fork": Case(
        outside_candidate, "escapes the project root", "candidate.toml, key 'patches'", fork=True
    ),
    "candidate-package-does-not-evaluate": Case(
        candidate(toml_set("package", '"nosuchpkg"'), "verify", ("-q",)),
        "attribute 'nosuchpkg' missing",
        "candidate.toml",
        fork=True,
    ),
    "decide-never-verified": Case(
        candidate(lambda c: None, "decide"), "never verified", "candidate.toml", fork=True
    ),
    "bundle-never-verified": Case(
        candidate(lambda c: None, "bundle", ("--out", "../bundle")),
        "never verified",
        "candidate.toml",
        fork=True,
    ),
    "graph-does-not-evaluate-plan": Case(not_evaluating("plan"), "does not evaluate", "graph.toml"),
    "graph-does-not-evaluate-run": Case(not_evaluating("run"), "does not evaluate", "graph.toml"),
    "advisory-nested-100000": Case(
        candidate(
            lambda c: (c / "advisory.json").write_text("[" * 100_000 + "]" * 100_000), "route"
        ),
        "nested too deeply",
        "advisory.json",
        fork=True,
    ),
}


@pytest.fixture(scope="module")
def built_state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One engine project after a real `trace run` of a good graph, built once for the module:
    each engine-project case copies its state directory instead of building again. Salted, so
    it builds under a store lock of its own, never behind another process's build."""
    project = tmp_path_factory.mktemp("built") / "p"
    project.mkdir()
    shutil.copytree(MINIPKGS, project / "ok" / "pkgs")
    (project / "ok" / "text.nix.j2").write_text(TEXT_TEMPLATE)
    kinds = KINDS.replace('"pkgs"', '"ok/pkgs"').replace("templates/", "ok/")
    salted = f'params = {{ message = "{uuid.uuid4().hex}" }}\n'
    (project / "ok.toml").write_text(kinds + STEP + salted)
    with own_store_lock_for(tmp_path_factory):
        proc = _run(["run", "ok.toml", "-q"], project)
    assert proc.returncode == 0, proc.stderr.decode()
    return project


def _existing_state(project: Path, fork: bool, request: pytest.FixtureRequest) -> None:
    """Give the project a state directory with content, as earlier runs leave it: the state of
    a real `trace run` of a good graph (an engine project), or an index with a recorded key, a
    stat cache and a generated file (a fork: a real verify is minutes)."""
    if not fork:
        built: Path = request.getfixturevalue("built_state")
        shutil.copytree(built / "ok", project / "ok")
        shutil.copy2(built / "ok.toml", project / "ok.toml")
        shutil.copytree(built / ".trace", project / ".trace", symlinks=True)
        roots = gcroot_folder(built / ".trace")  # outside the state dir, one per state path
        shutil.copytree(roots, gcroot_folder(project / ".trace"), symlinks=True)
        return
    from engine.cache import Index
    from engine.hashing import StatCache

    with Index(project / ".trace") as index:
        index.record([], {"a": ("k" * 64, "a", {})}, "earlier-graph")
        hasher = StatCache(index.writable())
        hasher.file_digest(project / "default.nix")
        hasher.flush()
    (project / ".trace" / "build").mkdir()
    (project / ".trace" / "build" / "earlier.nix").write_text("{ }\n")


def _case_states() -> list[object]:
    """Every case on a fresh and on an existing state directory. An engine project's existing
    state comes from a real `trace run`, so those are marked `nix` (--all); one of them is on
    the fast tier's FAST_NIX list (tests/conftest.py)."""
    params: list[object] = []
    for name, case in CASES.items():
        params.append(pytest.param(name, "fresh", id=f"{name}-fresh"))
        marks = () if case.fork else (pytest.mark.nix,)
        params.append(
            pytest.param(name, "existing-state-dir", marks=marks, id=f"{name}-existing-state-dir")
        )
    return params


@pytest.mark.parametrize(("name", "state"), _case_states())
def test_hostile_input_exits_2_names_the_file_and_writes_nothing(
    name: str,
    state: str,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> None:
    case = CASES[name]
    project = tmp_path / "p"
    argv = case.setup(project)
    if state != "fresh":
        if case.where.startswith("--state-dir"):
            pytest.skip("the case is about the state directory itself")
        _existing_state(project, case.fork, request)
    existed = (project / ".trace").exists()
    before = _snapshot(tmp_path)
    locks = tmp_path_factory.mktemp("locks")  # outside the snapshot of tmp_path
    code, stderr = _run_under_a_held_lock(argv, project, locks)
    err = stderr.decode("utf-8", "backslashreplace")
    # a Nix build call (nix-build, which evaluates too) waited for the store's lock: the bad
    # input was found only after another process's build would have ended
    assert LOCK_WAIT not in stderr, f"{name}: waited for the store's build lock:\n{err}"
    assert code == 2, f"{name}: exit {code}\n{err}"
    assert "Traceback" not in err, f"{name}:\n{err}"
    assert err.startswith("trace: error: "), f"{name}:\n{err}"
    assert case.fragment in err, f"{name}: {case.fragment!r} not in\n{err}"
    assert case.where in err, f"{name}: {case.where!r} not in\n{err}"
    assert not any(s in err.split("hint:")[0] for s in SHIPPED), f"{name}: blames trace:\n{err}"
    assert not case.fork or "--root" not in err, f"{name}: names an option verify lacks:\n{err}"
    after = _snapshot(tmp_path)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"{name}: wrote {changed}"
    assert (project / ".trace").exists() == existed
    assert (gcroot_folder(project / ".trace").exists()) == existed, f"{name}: a GC-root folder"


def test_the_catalogue_covers_every_class() -> None:
    classes = ("fifo", "dev-zero", "directory", "symlink-loop", "latin1", "utf16", "nested")
    for cls in classes:
        assert any(cls in n and n.startswith("pipeline") for n in CASES), cls
        assert any(cls in n and n.startswith("candidate") for n in CASES), cls


# --- property-based: the loader's only failure is an InputError


@settings(
    max_examples=repeats(150, 40),  # the fast tier: 40 (tests/tiers.py)
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.binary(max_size=300))
def test_any_bytes_as_a_candidate_file_are_loaded_or_refused_cleanly(
    tmp_path: Path, data: bytes
) -> None:
    path = tmp_path / "candidate.toml"
    path.write_bytes(data)
    with pytest.raises(InputError):  # never a UnicodeDecodeError, TOMLDecodeError, ...
        load_candidate(path)


@settings(
    max_examples=repeats(60, 20),  # the fast tier: 20 (tests/tiers.py)
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    depth=st.integers(min_value=1, max_value=3000),
    opener=st.sampled_from(["[", "{ a = ", "[[", "[{ b = "]),
)
def test_any_nesting_is_read_or_refused_never_a_recursion_error(
    tmp_path: Path, depth: int, opener: str
) -> None:
    closer = {"[": "]", "{ a = ": "}", "[[": "]]", "[{ b = ": "}]"}[opener]
    inner = "1" if opener.startswith("{") or opener.endswith("= ") else ""
    path = tmp_path / "f.toml"
    path.write_text("x = " + opener * depth + inner + closer * depth + "\n")
    try:
        read_document(path, "test file")
    except InputError as exc:
        assert "nested too deeply" in exc.message or "syntax" in exc.message
        return
    assert depth * len(closer.strip("{ ")) <= MAX_DEPTH + 1


@settings(
    max_examples=repeats(60, 15),  # the fast tier: 15 (tests/tiers.py)
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(text=st.text(max_size=200))
def test_any_text_as_a_pipeline_file_is_loaded_or_refused_cleanly(
    tmp_path: Path, text: str
) -> None:
    project = tmp_path / "hp"
    make_project(project, "")
    (project / "graph.toml").write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        load_graph(project / "graph.toml", root=project)
    except InputError as exc:  # anything else (a traceback) fails the test
        assert exc.file, exc


def test_a_latin1_patch_is_read_by_one_rule_everywhere(tmp_path: Path) -> None:
    """A patch with Latin-1 bytes (as `patch` applies it): `trace mutants` lists its mutants
    instead of crashing, and every reader gets the same text, which gives the bytes back."""
    project = tmp_path / "p"
    shutil.copytree(FORK, project, symlinks=True)
    patch = project / CAND / "fix.patch"
    data = patch.read_bytes().replace(b"KEY_MAX 64", b"KEY_MAX 64 /* caf\xe9 */")
    assert b"\xe9" in data
    patch.write_bytes(data)
    proc = _run(["mutants", f"{CAND}/candidate.toml"], project)
    err = proc.stderr.decode("utf-8", "backslashreplace")
    assert proc.returncode == 0 and "Traceback" not in err, err
    assert b"--- a/" in proc.stdout
    cand = load_candidate(project / CAND / "candidate.toml")
    (text,) = cand.patch_texts()
    assert "\udce9" in text and text.encode("utf-8", "surrogateescape") == data


# --- every other file format: the same classes through each format's own load function

HOSTILE_FILES: dict[str, Callable[[Path], None]] = {
    "fifo": fifo,
    "dev-zero": to_dev_zero,
    "directory": os.mkdir,
    "symlink-loop": loop,
    "through-a-file": through_a_file,
    "latin1": lambda p: p.write_bytes(b"# caf\xe9\n"),
    "utf16": lambda p: p.write_text("a = 1\n", encoding="utf-16"),
    "nested-100000": nested(100_000),
}


def _loaders() -> dict[str, Callable[[Path], object]]:
    from engine.advisory import load_advisory
    from engine.machine import load_machine
    from engine.policy.critical import load_critical
    from engine.policy.reasons import load_catalogue
    from engine.policy.routing import load_routing
    from engine.policy.signing_decision import load_signing
    from engine.roles.agentfile import load_agent

    return {
        "agent": load_agent,
        "machine": load_machine,
        "routing-policy": load_routing,
        "signing-policy": load_signing,
        "reason-catalogue": load_catalogue,
        "critical-list": load_critical,
        "advisory": load_advisory,
        "candidate-for-routing": lambda p: load_candidate(p, for_routing=True),
    }


@pytest.mark.parametrize("fmt", list(_loaders()))
@pytest.mark.parametrize("hostile", list(HOSTILE_FILES))
def test_every_format_refuses_every_hostile_file_in_time(
    fmt: str, hostile: str, tmp_path: Path
) -> None:
    import signal

    path = tmp_path / ("sub/f.toml" if hostile == "through-a-file" else "f.toml")
    HOSTILE_FILES[hostile](path)

    def too_slow(*_: object) -> None:
        raise TimeoutError(f"{fmt} hung on a {hostile}")

    old = signal.signal(signal.SIGALRM, too_slow)
    signal.alarm(10)
    try:
        with pytest.raises(InputError) as info:
            _loaders()[fmt](path)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert "f.toml" in info.value.render() or "sub" in info.value.render(), info.value


def test_load_validates_strictly_and_names_file_line_key_and_the_closest_key(
    tmp_path: Path,
) -> None:
    from engine.loader import load
    from engine.machinefile import MachineConfig

    path = tmp_path / "machine.toml"
    path.write_text('\ufeff# a BOM, dropped\nmax-jobs = "2"\n')  # a string where an int goes
    with pytest.raises(InputError) as info:
        load(path, MachineConfig, "machine config")
    assert (info.value.file, info.value.line, info.value.key) == (str(path), 2, "max-jobs")
    path.write_text("max-job = 2\n")
    with pytest.raises(InputError) as info:
        load(path, MachineConfig, "machine config")
    assert info.value.key == "max-job" and "did you mean 'max-jobs'" in (info.value.hint or "")
    path.write_text("max-jobs = 2\n")
    assert load(path, MachineConfig, "machine config").max_jobs == 2
