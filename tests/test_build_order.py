"""The verify graph's build order (templates/lib/default.nix, "Build order").

Of the builds that are ready, Nix starts them in the order of their derivation names, not in
the order trace lists them. These tests evaluate the real verify graph of a fixture candidate
(nix-instantiate, nothing built) and check what that order gives: the PoC's runs and the chain
to the mutation gate sort before the package set's own builds (test suites, mutants, coverage,
the fuzzing build) and before the gate records, which no step waits on. Renaming one of them
back to its step's bare name fails a test here.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from engine import expression
from engine.cache import Index
from engine.candidate import load_candidate
from engine.graph import load_graph
from engine.nix import Nix
from engine.plan import plan
from engine.verify.fork_graph import verify_context

FORK = Path(__file__).resolve().parent / "fixtures" / "fork"
CANDIDATE = "cparse-key-overflow"
# what other steps wait on, first: the PoC's runs; then the chain to the mutation gate
RUNS = ("pre-fix-run", "post-fix-run")
CHAIN = (
    "variant-plan",
    "variant-post",
    "variant-pre",
    "fuzz-plan",
    "patched-source",
    "mutant-runs",
)
GATE_RECORDS = ("expectation", "gate-")


def _name(drv: str) -> str:
    """What Nix orders a .drv by: its name with `.drv` (/nix/store/<hash>-<name>.drv)."""
    return Path(drv).name.split("-", 1)[1]


@pytest.fixture(scope="module")
def order(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """Every step's derivation name and the names of every derivation its closure builds."""
    tmp = tmp_path_factory.mktemp("order")
    cand = load_candidate(FORK / "trace" / "candidates" / CANDIDATE / "candidate.toml")
    graph = load_graph(FORK / "trace.toml", root=FORK, context=verify_context(cand, FORK))
    with Index(tmp / "state") as index:
        p, _ = plan(graph, index)
    keys = {sid: sp.key for sid, sp in p.steps.items()}
    file = tmp / "verify.nix"
    file.write_text(expression.build(graph, keys, list(graph.order)).text)
    rc, drvs, err = Nix(graph.nix, None).instantiate(file)
    assert rc == 0, err
    steps = {sid: _name(drv) for sid, drv in zip(graph.order, drvs, strict=True)}
    closure = subprocess.run(
        ["nix-store", "--query", "--requisites", *drvs], capture_output=True, text=True, check=True
    ).stdout.split()
    built = {_name(d) for d in closure if d.endswith(".drv")}
    return {"steps": steps, "base": {s: graph.steps[s].base_id for s in graph.order}, "all": built}


def _of(order: dict[str, object], bases: tuple[str, ...]) -> list[str]:
    steps, base = order["steps"], order["base"]
    assert isinstance(steps, dict) and isinstance(base, dict)
    return [steps[s] for s in steps if base[s] in bases]


def _package_builds(order: dict[str, object]) -> list[str]:
    """The package set's own builds in the closure: `<pname>-<version>[-suffix]`."""
    names = order["all"]
    assert isinstance(names, set)
    return sorted(n for n in names if n.startswith("cparse-"))


def _records(order: dict[str, object]) -> list[str]:
    names = order["all"]
    assert isinstance(names, set)
    return sorted(n for n in names if n.startswith(GATE_RECORDS))


def test_the_pocs_runs_sort_before_everything_but_the_builds_they_run_against(
    order: dict[str, object],
) -> None:
    runs = _of(order, RUNS)
    assert len(runs) == 6  # three runs a side
    others = _of(order, CHAIN) + _package_builds(order) + _records(order)
    assert others and max(runs) < min(others), json.dumps(sorted(runs + others))


def test_the_chain_to_the_mutation_gate_sorts_before_package_builds_and_gate_records(
    order: dict[str, object],
) -> None:
    chain = _of(order, CHAIN)
    assert len(chain) == len(CHAIN)
    packages = _package_builds(order)
    # the builds the chain competes with: test suites, mutants, coverage, the fuzzing build
    assert any(n.endswith("_tests.drv") for n in packages)
    assert any("_mutant-" in n for n in packages)
    records = _records(order)
    assert len(records) >= 8
    assert max(chain) < min(packages + records), json.dumps(sorted(chain + packages + records))


def test_the_package_builds_every_step_waits_on_sort_before_its_other_builds(
    order: dict[str, object],
) -> None:
    """pre-fix and post-fix are the package's own name; trace's other builds of the package
    (test suites, mutants, coverage, fuzzing, library side) add `_<what>`, which sorts after
    it (`-<what>` sorted before: `cparse-1.0-tests.drv` < `cparse-1.0.drv`)."""
    packages = _package_builds(order)
    own = _of(order, ("pre-fix", "post-fix"))
    assert own == ["cparse-1.0.drv", "cparse-1.0.drv"]
    others = [n for n in packages if n not in own]
    assert len(others) >= 8  # tests, mutants, coverage, fuzzing, library side
    assert max(own) < min(others), json.dumps(sorted(packages))
