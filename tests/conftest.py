"""Suite-wide hooks."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.verified import VerifiedFork

# The suite runs on no binary cache, whatever the machine's configuration says: no trace machine
# config (engine/machine.py), and Nix's own substituters empty. Tests of caches and
# builders pass their own settings explicitly (tests/test_scale_*.py).
os.environ["TRACE_MACHINE_CONFIG"] = ""
os.environ["NIX_CONFIG"] = os.environ.get("NIX_CONFIG", "") + "\nsubstituters =\n"
# The fork verdict memo's key (engine/fork/memo.py): one for the suite, never the user's.
os.environ["TRACE_MEMO_KEY"] = os.path.join(
    tempfile.mkdtemp(prefix="trace-tests-memo-"), "memo.key"
)

# The load cache's MAC key (engine/loadcache.py, engine/userkey.py): the suite's, never the user's.
os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="trace-tests-state-")

# Fixture packages carry their own test suites (run inside their Nix builds by the regression
# gate); they are data here, never part of trace's suite.
collect_ignore = ["fixtures"]


@pytest.fixture(scope="session")
def verified_fork(tmp_path_factory: pytest.TempPathFactory) -> VerifiedFork:
    """The session's one copy of the fixture fork, each candidate verified on first use
    (tests/verified.py): the calibration table and test_verify read the same verdicts."""
    from tests.verified import VerifiedFork, copy_fork

    return VerifiedFork(copy_fork(tmp_path_factory.mktemp("verified") / "fork"))


@pytest.fixture()
def own_store_lock(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A store build lock of this test's own (TRACE_STORE_LOCK_DIR, engine/storelock.py), for a
    test that asserts which Nix processes a later run starts: one nix-build when the lock is
    free at once, else nix-instantiate then nix-store --realise (engine/run.py `_build`), so
    with the user's shared lock the answer would depend on other trace processes on the
    machine; and for a fast-tier build that would otherwise wait behind any other trace
    process's build on the machine (another engineer's verify campaign: 92 s for a 6-step
    rebuild in one fast-tier run). Only for tests whose derivations are their own (a salted
    graph): no other process builds those, so no cycle of Nix output locks can form without
    the shared lock."""
    with own_store_lock_for(tmp_path_factory) as locks:
        yield locks


@contextmanager
def own_store_lock_for(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """`own_store_lock` for a block (a module-scoped fixture's build of a salted graph)."""
    with pytest.MonkeyPatch.context() as mp:
        locks = tmp_path_factory.mktemp("store-lock")
        mp.setenv("TRACE_STORE_LOCK_DIR", str(locks))
        yield locks


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Tests make many temporary state directories; drop the GC-root folders of those that are
    gone, so a test run does not pin its outputs in the Nix store forever."""
    from engine.cache import sweep_orphans

    sweep_orphans()


# ---- test tiers (issue 30, docs/performance.md "Test tiers") ------------------------------------
# `./scripts/test` runs the fast tier (`--fast`): every test that builds nothing with Nix, plus
# the explicit, small list FAST_NIX of real-build tests that cover each gate and the fork path.
# `./scripts/test --all` (and .ci/run) runs everything. A real-build test is one marked `nix`,
# or one that uses a fixture defined in a module marked `nix` (marked here, at collection): a
# new real-build test goes to --all by itself unless it is added to FAST_NIX. In the fast tier,
# an unlisted test that still starts a Nix build (nix-build, nix-store --realise, nix build)
# fails with a message saying to mark it: it never slows the fast tier silently. A test marked
# `slow` (costly without a Nix build, or repeating a claim the fast tier covers elsewhere) runs in
# --all only, as an unlisted real-build test does; FAST_NIX cannot bring it back.

FAST_NIX: tuple[str, ...] = (
    # every gate, end to end on the fixture fork (tests/test_gates_calibration.py's rows): a right
    # fix (all gates pass), a wrong one (mutation, variants, fault site), a weakened test
    # (regression), a detector switched off, a PoC value special-cased (scope, differential)
    "tests/test_gates_calibration.py::test_calibration[pager-last-page-",
    "tests/test_gates_calibration.py::test_calibration[cparse-wrong-fix-",
    "tests/test_gates_calibration.py::test_calibration[roster-loosened-test-",
    "tests/test_gates_calibration.py::test_calibration[cparse-blind-drop-asan-",
    "tests/test_gates_calibration.py::test_calibration[ledger-poc-amount-",
    # verify -> decide -> bundle -> sign -> verify-bundle --replay (the warm memo's two real
    # builds, ~14 s on a quiet machine, run in --all; its logic tests are non-build tests)
    "tests/test_e2e_bundle.py::test_trace_verify_bundle_signs_and_the_replay_agrees",
    # `trace watch`: an edited input rebuilt, then Ctrl-C (the resident rounds' real-build test,
    # ~18 s, runs in --all; their logic is tests/test_resident.py's, a non-build test)
    "tests/test_watch.py::test_trace_watch_rebuilds_an_edited_input_and_stops_on_ctrl_c",
    # trace run itself: cold, no-op, one input changed, failure (not the 97 s GC test)
    "tests/test_engine_run.py::test_cold_build_builds_every_step",
    "tests/test_engine_run.py::test_noop_run_builds_and_evaluates_nothing",
    "tests/test_engine_run.py::test_one_input_changed_rebuilds_exactly_its_cone",
    "tests/test_engine_run.py::test_failure_is_reported_not_cached_and_downstream_skipped",
    # the fork path: two real `trace fork` runs of a fixture candidate (loaded, verified,
    # decided, bundled; the second sees no dirty tree). The fork's own signing policy in a
    # bundle (tests/test_fork_policy_bundle.py, `trace verify`) runs in --all
    "tests/test_fork_state_dir.py::test_a_state_dir_anywhere_runs_twice_without_a_dirty_tree"
    "[outside]",
    # exit 2 writes nothing on a state directory a real `trace run` filled (issue 28)
    "tests/test_hostile_input.py::test_hostile_input_exits_2_names_the_file_and_writes_nothing"
    "[graph-does-not-evaluate-run-existing-state-dir]",
)
BUILD_TOOLS = {  # tool -> the arguments that make a call a build (empty: every call)
    "nix-build": (),
    "nix-store": ("--realise", "--realize", "-r"),
    "nix": ("build",),
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fast",
        action="store_true",
        help="the fast tier: tests without real Nix builds plus the FAST_NIX list (conftest.py)",
    )


BUILDING_FIXTURES = {"verified_fork"}  # this file's fixtures that run real builds


def pytest_configure(config: pytest.Config) -> None:
    """The tier, for the tests that repeat a claim fewer times in the fast one (tests/tiers.py);
    set before any test module is imported (their @settings read it)."""
    from tests import tiers

    if config.getoption("--fast"):
        os.environ[tiers.ENV] = "fast"
    else:
        os.environ.pop(tiers.ENV, None)


def _builds(item: pytest.Item) -> bool:
    """Marked `nix`, or using a fixture defined in a module marked `nix` (or listed above)."""
    import sys

    if item.get_closest_marker("nix") is not None:
        return True
    info = getattr(item, "_fixtureinfo", None)
    if info and BUILDING_FIXTURES & set(info.names_closure):
        return True
    for defs in info.name2fixturedefs.values() if info else []:
        for fixturedef in defs:
            module = sys.modules.get(getattr(fixturedef.func, "__module__", ""))
            marks = getattr(module, "pytestmark", [])
            for mark in marks if isinstance(marks, list) else [marks]:
                if getattr(mark, "name", None) == "nix":
                    return True
    return False


def _listed(nodeid: str) -> bool:
    return any(nodeid.startswith(prefix) for prefix in FAST_NIX)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("nix") is None and _builds(item):
            item.add_marker(pytest.mark.nix)
    if not config.getoption("--fast"):
        return
    _check_listed(items)
    keep = [i for i in items if in_fast_tier(i)]
    dropped = [i for i in items if i not in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
    _guard_builds(config, {i.nodeid for i in keep if i.get_closest_marker("nix") is None})


def in_fast_tier(item: pytest.Item) -> bool:
    """The fast tier's rule (after the `nix` marks above): not `slow`, and either no real build
    or listed in FAST_NIX."""
    if item.get_closest_marker("slow") is not None:
        return False
    return item.get_closest_marker("nix") is None or _listed(item.nodeid)


def _check_listed(items: list[pytest.Item]) -> None:
    """Every FAST_NIX entry names collected tests that are not all `slow` (a renamed or
    slow-marked test must not leave the fast tier without its real builds unnoticed)."""
    files = {i.nodeid.partition("::")[0] for i in items}
    stale = [
        p
        for p in FAST_NIX
        if p.partition("::")[0] in files
        and not any(i.nodeid.startswith(p) and i.get_closest_marker("slow") is None for i in items)
    ]
    if stale:
        raise pytest.UsageError(
            f"FAST_NIX in tests/conftest.py names no test outside the `slow` mark: {stale}"
        )


def _guard_builds(config: pytest.Config, unmarked: set[str]) -> None:
    """Put Nix's build commands behind shims that refuse a build started by a test of the fast
    tier that is not marked `nix` (PYTEST_CURRENT_TEST names the test running)."""
    shims = Path(tempfile.mkdtemp(prefix="trace-tests-nix-guard-"))
    write_shims(shims, unmarked)
    os.environ["PATH"] = f"{shims}{os.pathsep}{os.environ['PATH']}"


def write_shims(shims: Path, unmarked: set[str]) -> None:
    """One script per tool of BUILD_TOOLS in `shims`: exit 97 with a message when the test
    running (PYTEST_CURRENT_TEST) is in `unmarked` and the call builds; else the real tool."""
    import shutil
    import stat

    allowed = shims / "unmarked.txt"
    allowed.write_text("".join(f"{n}\n" for n in sorted(unmarked)))
    for tool, build_args in BUILD_TOOLS.items():
        real = shutil.which(tool)
        if real is None:
            continue
        pattern = "|".join(build_args) or "*"
        script = shims / tool
        script.write_text(
            "#!/bin/sh\n"
            'test="${PYTEST_CURRENT_TEST% (*}"\n'
            f'building=""; [ "{pattern}" = "*" ] && building=1\n'
            f'for a in "$@"; do case "$a" in {pattern}) building=1;; esac; done\n'
            f'if [ -n "$building" ] && [ -n "$test" ] && grep -qxF "$test" {allowed}; then\n'
            f'  echo "trace tests: $test runs a Nix build ({tool}) but is not marked nix:" >&2\n'
            '  echo "  mark it @pytest.mark.nix (it then runs in ./scripts/test --all), or add it'
            ' to FAST_NIX in tests/conftest.py" >&2\n'
            "  exit 97\n"
            "fi\n"
            f'exec {real} "$@"\n'
        )
        script.chmod(script.stat().st_mode | stat.S_IEXEC)


# ---- parallel runs (pytest-xdist, issue 30, docs/performance.md) -------------------
# `TRACE_TEST_WORKERS=2 TRACE_TEST_DIST=loadgroup ./scripts/test --all` spreads the tests over 2
# worker processes with `--dist loadgroup` (scripts/test's default is loadfile: xdist 3.8's
# loadgroup groups nothing under pytest 9.2, docs/performance.md). Shared state is never built
# twice nor raced: every test that reads the session's verified fork is sent to ONE worker
# (group "verified-fork": that worker verifies each candidate once, as a serial run does;
# trace's own state-dir lock would serialise verifies in one shared fork anyway), and the tests
# that share a module- or class-scoped fixture of their module go to one worker together (the
# fixture runs once). Other tests go wherever a worker is free. Without loadgroup, no marks.

SHARED_FIXTURE_SCOPES = {"module", "class", "package", "session"}


def worker_group(item: pytest.Item) -> str | None:
    """The xdist group an item must share a worker with, or None (any worker)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    if BUILDING_FIXTURES & set(info.names_closure):
        return "verified-fork"
    for name in sorted(info.names_closure):
        for fixturedef in info.name2fixturedefs.get(name, ()):
            # baseid: where the fixture is visible (a module, a class, "tests" for this file);
            # "" for pytest's and plugins' own (tmp_path_factory: nothing to share)
            if fixturedef.scope in SHARED_FIXTURE_SCOPES and fixturedef.baseid:
                return str(fixturedef.baseid)
    return None


def pytest_itemcollected(item: pytest.Item) -> None:
    """Grouped as collected: before any collection_modifyitems hook (xdist's own reads the
    marks there, and the fast tier's build guard then sees the node ids xdist gives)."""
    group_for_workers(item.config, [item])


def group_for_workers(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each item with its group, only when xdist groups them (`--dist loadgroup`)."""
    # the controller has --dist; xdist's workers get dist "no" and the `loadgroup` flag instead
    grouped = getattr(config.option, "loadgroup", False)
    if not grouped and config.getoption("dist", default=None) != "loadgroup":
        return
    for item in items:
        group = worker_group(item)
        if group is not None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))
