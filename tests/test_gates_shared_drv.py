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
from engine.graph import load_graph
from engine.hashing import key_digest
from engine.run import components
from engine.verify.pipeline import verify_context

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
