"""The library-side run with the real nix (issue 25): only a mixed patch's library side is built
and run. For a patch that is not mixed the `library-side-run` step writes a trace.not-run/v1
record (no reproducer started: the harness would have written a trace.run/v1 one), keyed on the
`library-plan` step's `unmixed`, which trace's filter alone writes; a mixed patch's run is a real
harness run, and the fault-site gate judges it. Only the steps the fault-site gate needs are
built (the cjsonptr package: pre-fix, its run, the plan, the library side and its run), on the
fixture fork as it is (its builds are shared with the outside campaign's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine.candidate import load_candidate
from engine.graph import load_graph, needed_by
from engine.run import RunResult, run_graph
from engine.verify.fork_graph import verify_context

REPO = Path(__file__).resolve().parent.parent
FORK = REPO / "tests" / "fixtures" / "fork"
OUTSIDE = FORK / "trace" / "outside"
WANT = ("library-side-run", "gate-fault-site")

pytestmark = pytest.mark.nix


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("library-side-state")


def verify(name: str, state: Path) -> RunResult:
    cand = load_candidate(OUTSIDE / name / "candidate.toml")
    graph = load_graph(FORK / "trace.toml", root=FORK, context=verify_context(cand, FORK))
    result = run_graph(needed_by(graph, WANT), state)
    bad = {s: (r.status, r.log_tail) for s, r in result.steps.items() if r.status == "failed"}
    assert not bad, bad
    return result


def outcome(result: RunResult, step: str) -> dict[str, Any]:
    out = result.steps[step].outcome
    assert isinstance(out, dict), (step, result.steps[step].status)
    return out


def test_an_unmixed_patch_s_library_side_run_starts_no_reproducer(state: Path) -> None:
    """The real fix (the library only): the plan says unmixed, the build is the pre-fix copy and
    the run is a not-run record, not a harness run against that copy."""
    result = verify("cjsonptr-cve-2025-57052", state)
    run = outcome(result, "library-side-run@1")
    assert run == {
        "schema": "trace.not-run/v1",
        "run": 1,
        "not_run": "library-plan/unmixed exists: the reproducer was not run",
    }
    assert (Path(result.steps["library-plan"].out) / "unmixed").exists()
    assert (Path(result.steps["library-side"].out) / "reused").exists()
    driver = outcome(result, "gate-fault-site")["details"]["driver"]
    assert driver["summary"] == "the patch changes no program's entry file"


def test_a_mixed_patch_s_library_side_is_built_and_run(state: Path) -> None:
    """The driver filter plus an ineffective library check: the plan says mixed, the library
    side is its own build, the run is the harness's (the target ran) and still prints row 27
    for `/rows/1A`: library-side-still-fails, as before."""
    result = verify("cjsonptr-driver-and-check", state)
    assert not (Path(result.steps["library-plan"].out) / "unmixed").exists()
    assert not (Path(result.steps["library-side"].out) / "reused").exists()
    run = outcome(result, "library-side-run@1")
    assert (run["schema"], run["target_ran"]) == ("trace.run/v1", True)
    gate = outcome(result, "gate-fault-site")
    assert gate["reasons"] == ["library-side-still-fails"]
    assert gate["details"]["driver"]["library_side"] == "still fails"


def test_the_real_fix_beside_a_driver_message_is_not_denied_by_its_library_side(
    state: Path,
) -> None:
    result = verify("cjsonptr-library-and-message", state)
    assert outcome(result, "library-side-run@1")["schema"] == "trace.run/v1"
    gate = outcome(result, "gate-fault-site")
    assert (gate["passed"], gate["reasons"]) == (True, [])
    assert gate["details"]["driver"]["library_side"] == "fixed"


def test_a_mixed_patch_whose_library_half_does_not_build_is_denied(state: Path) -> None:
    """The driver filter plus a library check that reads a global only the driver defines: the
    plan says mixed, the library side fails to link (a failure-as-outcome build), and the gate
    denies with library-side-not-built instead of claiming nothing."""
    result = verify("cjsonptr-driver-and-unbuildable-library", state)
    assert not (Path(result.steps["library-plan"].out) / "unmixed").exists()
    assert (Path(result.steps["library-side"].out) / ".trace-build-failed").exists()
    gate = outcome(result, "gate-fault-site")
    assert (gate["passed"], gate["reasons"]) == (False, ["library-side-not-built"])
    assert gate["details"]["driver"]["library_side"] == "did not build"
