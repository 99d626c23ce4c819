"""The gates as real derivations, with the real nix, against the fixture fork.

One state directory for the module: the three candidates share the fork's builds. Exact mutation
scores on a small fixture (tests/fixtures/gates/cparse-ptr: killed, survived and did-not-build);
the plausible-but-wrong fix (KEY_MAX 16 -> 64) goes through every gate, and the test says which
gate catches it: the mutation gate (both mutants of the changed constant survive the reproducer).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from engine.candidate import load_candidate
from engine.graph import load_graph
from engine.policy.signing_decision import load_signing_rules
from engine.run import RunResult, run_graph
from engine.verify.fork_graph import verify_context

REPO = Path(__file__).resolve().parent.parent
FORK = REPO / "tests" / "fixtures" / "fork"
CANDIDATES = FORK / "trace" / "candidates"
PIPELINE = REPO / "tests" / "fixtures" / "gates" / "pipeline.toml"
PTR = REPO / "tests" / "fixtures" / "gates" / "cparse-ptr" / "candidate.toml"
BOUNDARY = REPO / "tests" / "fixtures" / "gates" / "cparse-boundary" / "candidate.toml"

pytestmark = pytest.mark.nix


def run(candidate: Path, state: Path, root: Path = REPO) -> RunResult:
    cand = load_candidate(candidate)
    ctx = verify_context(cand, FORK)  # the gates apply the shipped signing policy
    graph = load_graph(PIPELINE, root=root, context=ctx)
    return run_graph(graph, state)


def gate(result: RunResult, step: str) -> dict[str, Any]:
    s = result.steps[step]
    assert s.status in ("built", "cached", "reused"), (step, s.status, s.log_tail)
    assert isinstance(s.outcome, dict)
    return s.outcome


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gates-state")


@pytest.fixture(scope="module")
def wrong(state: Path) -> RunResult:
    return run(CANDIDATES / "cparse-wrong-fix" / "candidate.toml", state)


@pytest.fixture(scope="module")
def ptr(state: Path) -> RunResult:
    return run(PTR, state)


def test_the_wrong_fix_is_caught_by_the_mutation_gate(wrong: RunResult) -> None:
    assert gate(wrong, "expectation")["passed"] is True  # verify alone lets it through
    scope = gate(wrong, "gate-scope")
    assert (scope["passed"], scope["reasons"]) == (True, [])  # small, in scope: scope cannot see it
    mutation = gate(wrong, "gate-mutation")
    assert (mutation["passed"], mutation["score"]) == (False, 0.0)
    assert mutation["reasons"] == ["mutation-score-below-threshold"]
    assert [s["diff"].splitlines()[-1] for s in mutation["details"]["survivors"]] == [
        "+#define KEY_MAX 65",
        "+#define KEY_MAX 63",
    ]
    coverage = gate(wrong, "gate-coverage")  # a #define executes nothing: not a pass either
    assert (coverage["passed"], coverage["measurable"]) == (False, False)
    assert coverage["reasons"] == ["coverage-not-measurable"]


def test_mutation_scores_are_exact_on_the_small_fixture(ptr: RunResult) -> None:
    mutation = gate(ptr, "gate-mutation")
    statuses = [(r["id"], r["operator"], r["status"]) for r in mutation["details"]["results"]]
    assert statuses == [
        # `>` instead of `>=`: no input tried (the 40-byte key, its variants, the fuzz corpus)
        # tells it from the fix: possibly equivalent (issue 26), left out of the score
        ("m001", "relational", "possibly-equivalent"),
        ("m002", "arithmetic", "stillborn"),  # pointer + pointer does not compile: counted nowhere
        ("m003", "negate", "killed"),  # long keys parsed again: ASan report
        ("m004", "constant", "killed"),  # return 1: cparse exits 1
        ("m005", "constant", "killed"),  # return -1 (issue 25: 0 -> -1): cparse exits 1 too
        ("m006", "early-return", "killed"),  # the guard falls through: ASan report
    ]
    assert mutation["score"] == 1.0  # 4 of 4 judged
    assert mutation["details"]["score_all_survivors"] == 0.8  # m001 counted: the threshold
    assert "possibly equivalent m001" in mutation["details"]["summary"]  # in the verify table
    assert mutation["details"]["threshold"] == 0.8  # policy/signing.toml [gates.mutation]
    shipped, _, _ = load_signing_rules(REPO / "policy" / "signing.toml")
    assert mutation["details"]["policy"] == shipped.applied("mutation")
    scope = gate(ptr, "gate-scope")
    assert scope["details"]["policy"] == shipped.applied("scope")
    assert scope["details"]["limits"] == {"max_files": 5, "max_hunks": 10, "max_lines": 100}
    assert (mutation["passed"], mutation["reasons"]) == (True, [])
    runs = ptr.steps["mutant-runs"].outcome["runs"]  # every mutant in one step (issue 25)
    assert [(r["index"], r["outcome"]["build"]) for r in runs] == [
        (1, "ok"),
        (2, "failed"),
        (3, "ok"),
        (4, "ok"),
        (5, "ok"),
        (6, "ok"),
    ]
    assert not [s for s in ptr.steps if s.startswith("mutant-run@")]


def test_the_mutants_run_in_one_derivation_each_built_in_its_own(ptr: RunResult) -> None:
    """Issue 25's cost: one mutant-runs derivation runs the six mutants; each mutant is still a
    package build of its own (what TCE compares with post-fix), and each mutant's records are
    its own directory of the step's output, read by the mutation gate."""
    import subprocess

    step = ptr.steps["mutant-runs"]
    assert step.drv is not None and step.out is not None
    refs = subprocess.run(
        ["nix-store", "--query", "--references", step.drv],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    builds = sorted(r.split("_mutant-")[-1] for r in refs if "_mutant-" in r)
    assert builds == [f"{n}.drv" for n in range(1, 7)], refs
    for n in range(1, 7):
        names = {p.name for p in (Path(step.out) / str(n)).iterdir()}
        assert {"check.json", "mutant.json", "outcome.json"} <= names, (n, names)
    mutation = gate(ptr, "gate-mutation")
    assert mutation["details"]["mutants"] == 6


def test_a_variant_of_the_poc_kills_the_boundary_mutant_the_reproducer_misses(
    state: Path,
) -> None:
    """Issue 10: mutants run against the reproducer AND the variants. The PoC's key is one byte
    past the bound: `>` for `>=` (m001) survives it; the variant one byte shorter overflows the
    mutant (ASan) where the post-fix build rejects it, so the variant kills m001."""
    result = run(BOUNDARY, state)
    mutation = gate(result, "gate-mutation")
    results = {r["id"]: r for r in mutation["details"]["results"]}
    m001 = results["m001"]
    assert (m001["operator"], m001["status"]) == ("relational", "killed")
    assert m001["why"].startswith("variant v") and "AddressSanitizer" in m001["why"], m001
    step = result.steps["mutant-runs"]
    assert isinstance(step.outcome, dict) and step.out is not None
    m1 = json.loads((Path(step.out) / "1" / "outcome.json").read_text())
    assert m1["target_ran"] and not m1.get("target_failed")  # PoC: survived
    ran = json.loads((Path(step.out) / "1" / "variants.json").read_text())
    assert ran["killed_by"]["index"] == ran["ran"][-1]  # it stopped at the first kill
    (killer,) = [
        r
        for r in gate(result, "gate-variants")["details"]["results"]
        if r["index"] == ran["killed_by"]["index"]
    ]
    assert killer["status"] == "survives" and killer["operator"] == "length"  # post-fix: fine
    killed_by_poc = json.loads(
        (Path(str(result.steps["mutant-runs"].out)) / "3" / "variants.json").read_text()
    )
    assert killed_by_poc["ran"] == [] and killed_by_poc["skipped"]  # m003: the PoC kills it
    assert mutation["details"]["killed_by_variants"] == 1
    assert (mutation["score"], mutation["passed"]) == (1.0, True)


def test_c_diff_coverage_through_gcov(ptr: RunResult) -> None:
    coverage = gate(ptr, "gate-coverage")
    assert coverage["details"]["tools"] == ["gcov"]
    (f,) = coverage["details"]["files"]
    assert (f["file"], f["executable"], f["covered"]) == ("cparse.c", [14, 15], [14, 15])
    assert (coverage["score"], coverage["passed"]) == (1.0, True)


def test_python_diff_coverage_and_mutation(state: Path) -> None:
    result = run(CANDIDATES / "pager-last-page" / "candidate.toml", state)
    coverage = gate(result, "gate-coverage")
    assert coverage["details"]["tools"] == ["python-settrace"]
    (f,) = coverage["details"]["files"]
    assert (f["coverage_file"], f["covered"]) == ("lib/python/pager/__init__.py", [8])
    mutation = gate(result, "gate-mutation")
    d = mutation["details"]
    # the reproducer checks the boundary variants too: every mutant of the fix is killed
    assert (d["killed"], d["survived"], d["did_not_build"]) == (6, 0, 0)
    assert mutation["score"] == 1.0
    assert (mutation["passed"], mutation["reasons"]) == (True, [])


def test_no_change_reruns_nothing(ptr: RunResult, state: Path) -> None:
    again = run(PTR, state)
    assert {s.status for s in again.steps.values()} == {"cached"}
    assert again.steps["gate-mutation"].key == ptr.steps["gate-mutation"].key


def test_a_changed_reproducer_reruns_the_mutants_and_not_the_builds(tmp_path: Path) -> None:
    src = CANDIDATES / "cparse-key-overflow"
    cand = tmp_path / "cand"
    cand.mkdir()
    shutil.copy(PTR.parent / "fix.patch", cand / "fix.patch")
    (cand / "repro.sh").write_text((PTR.parent / "repro.sh").read_text())
    text = PTR.read_text().replace("../../fork/trace/candidates/cparse-key-overflow/", f"{src}/")
    (cand / "candidate.toml").write_text(text.replace(f'"{src}/repro.sh"', '"repro.sh"'))
    state = tmp_path / "state"
    first = run(cand / "candidate.toml", state, root=Path("/"))  # inputs outside the repo
    assert first.ok
    (cand / "repro.sh").write_text(
        "# a changed reproducer\n" + (PTR.parent / "repro.sh").read_text()
    )
    second = run(cand / "candidate.toml", state, root=Path("/"))
    rebuilt = sorted(s for s, r in second.steps.items() if r.status != "cached")
    variants = ["gate-variants", "variant-plan"]  # the PoC's runs changed: so may its variants
    variants += ["variant-post", "variant-pre"]  # one step per side runs every variant
    # the differential oracle's third side: no upstream fix named, so its derivations are the
    # pre-fix side's own (re-keyed, never built twice) and its gate says not measurable
    variants += ["gate-differential", "upstream-fix-run@1", "variant-upstream"]
    # the fuzzing gate (issue 26) starts from the PoC's runs and the variants: it explores
    # again (its coverage build, a derivation inside fuzz-plan, does not read them: cached)
    variants += ["fuzz-plan", "fuzz-post", "fuzz-pre", "gate-fuzz"]
    # the driver check's library side (issue 25): a patch that is not mixed copies the pre-fix
    # build (cached: it does not read the reproducer); its one reproducer run runs again
    variants += ["library-side-run@1"]
    assert rebuilt == sorted(
        [
            "coverage-run",
            "expectation",
            "gate-coverage",
            "gate-detector",  # reads the pre-fix runs' failing stacks too
            "gate-fault-site",  # reads the pre-fix runs' failing stacks
            "gate-mutation",
            "gate-scope",  # it reads the reproducer too (fix-matches-poc-literal)
            "mutant-runs",  # all six mutants' runs, not their builds
            "post-fix-run@1",
            "pre-fix-run@1",
            *variants,
        ]
    )  # not the builds, nor the package's own tests (tests-pre, tests-post)
    # the sixth mutant (0 -> -1) is killed (issue 25)
    assert gate(second, "gate-mutation")["details"]["score_all_survivors"] == 0.8
