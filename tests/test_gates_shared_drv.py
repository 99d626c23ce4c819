"""Steps of the verify graph that are the same computation are the same derivation (issue 25's
cost goal): Nix builds them once. Only evaluated here (`nix-instantiate`), nothing is built.

Without a named upstream fix, the differential oracle's third side is the unpatched package:
`upstream-fix`, `upstream-fix-run@1` and `variant-upstream` must be the very `.drv` of `pre-fix`,
`pre-fix-run@1` and `variant-pre` (a third package build and a third variant run of every
variant otherwise). With a named upstream fix they must differ (it is a build of its own).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from engine import expression
from engine.candidate import load_candidate
from engine.graph import load_graph, needed_by
from engine.hashing import key_digest
from engine.plan import components
from engine.run import run_graph
from engine.verify.fork_graph import verify_context

REPO = Path(__file__).resolve().parent.parent
FORK = REPO / "tests" / "fixtures" / "fork"
PIPELINE = REPO / "tests" / "fixtures" / "gates" / "pipeline.toml"

pytestmark = pytest.mark.nix

PAIRS = (
    ("upstream-fix", "pre-fix"),
    ("upstream-fix-run@1", "pre-fix-run@1"),
    ("variant-upstream", "variant-pre"),
)


def drvs(candidate: str, tmp: Path) -> dict[str, str]:
    """Every step's .drv of the verify graph of a fixture candidate, from one evaluation."""
    cand = load_candidate(FORK / "trace" / "candidates" / candidate / "candidate.toml")
    graph = load_graph(PIPELINE, root=REPO, context=verify_context(cand, FORK))
    keys: dict[str, str] = {}
    for sid in graph.order:
        keys[sid] = key_digest(components(graph, graph.steps[sid], keys))
    order = list(graph.order)
    path = tmp / "all.nix"
    path.write_text(expression.build(graph, keys, order).text, encoding="utf-8")
    out = subprocess.run(
        ["nix-instantiate", str(path)], capture_output=True, text=True, check=True
    ).stdout.split()
    assert len(out) == len(order)
    return dict(zip(order, out, strict=True))


def test_without_an_upstream_fix_the_third_side_is_the_pre_fix_side(tmp_path: Path) -> None:
    d = drvs("cparse-key-overflow", tmp_path)
    for third, pre in PAIRS:
        assert d[third] == d[pre], third


def test_a_named_upstream_fix_is_a_build_of_its_own(tmp_path: Path) -> None:
    d = drvs("ledger-negative-amounts", tmp_path)
    for third, pre in PAIRS:
        assert d[third] != d[pre], third
    assert d["upstream-fix"] != d["post-fix"]


@pytest.mark.parametrize(
    ("candidate", "reused"),
    [("cparse-key-overflow", True), ("roster-loosened-test", False)],
)
def test_the_base_tests_build_reuses_the_patched_one_only_when_no_test_is_touched(
    tmp_path: Path, candidate: str, reused: bool
) -> None:
    """A patch touching no test file: the post-fix build tested with the base tests IS the
    patched-tests build (byte-identical patches, the base checkPhase): built once. A patch that
    loosens a test: the base-tests build is a build of its own, which the loosened suite fails."""
    cand = load_candidate(FORK / "trace" / "candidates" / candidate / "candidate.toml")
    graph = load_graph(PIPELINE, root=REPO, context=verify_context(cand, FORK))
    result = run_graph(needed_by(graph, ("tests-post", "tests-post-base")), tmp_path / "state")
    post, base = (result.steps[s].outcome for s in ("tests-post", "tests-post-base"))
    assert isinstance(post, dict) and isinstance(base, dict)
    assert base["base_tests"]["reused_patched_suite"] is reused
    # each step IS its suite build: the record is written by the suite's own derivation
    outs = [Path(str(result.steps[s].out)) for s in ("tests-post", "tests-post-base")]
    for out in outs:
        assert {"log", "status", "outcome.json"} <= {p.name for p in out.iterdir()}, out
    if reused:
        assert (base["units"], base["status"]) == (post["units"], post["status"])
        # the very derivation of tests-post, reused, not a suite built alike
        assert (outs[1] / "reused").read_text().strip() == str(outs[0])
    else:
        assert base["status"] != 0 and post["status"] == 0  # the loosened suite passes
