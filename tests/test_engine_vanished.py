"""An output another process removes between Nix's build and trace's GC root (engine/vanished.py).

Nix runs without a daemon here: every Nix process opens the store itself, and nix-build holds
what it built only by temporary roots, which end with it. A result is trace's (a root under the
state directory's gcroots/) once trace holds it. In between, another process on the same store
can delete it: another state directory's `nix-store --delete` of the same derivation's output
(the fixture candidates are the same derivations in every checkout at the same commit), a
`nix-collect-garbage`. The step was then reported built with its output gone (no outcome), or,
beside a failed step, failed with no build log. Real builds; the other process is simulated by a
`nix-store --delete` at that moment."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from engine.graph import load_graph
from engine.run import RunResult, run_graph
from tests.enginekit import layered_steps, make_project, write_inputs

# Which Nix processes a run starts depends on the store lock (engine/run.py `_build`): these tests
# assert the nix-build path unless they say otherwise, so each takes a lock of its own (their
# graphs are salted: tests/conftest.py `own_store_lock`); under two test workers the shared lock
# held by the other worker sent them down the two-process path
pytestmark = [pytest.mark.nix, pytest.mark.usefixtures("own_store_lock")]


def delete(path: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["nix-store", "--delete", path], capture_output=True, text=True)


def project(tmp_path: Path) -> Path:
    """4 steps in 2 layers of 2; s3 needs s0 and s1, nothing needs s3."""
    graph = make_project(tmp_path / "p", layered_steps(4, width=2, salt=uuid.uuid4().hex))
    write_inputs(graph.parent, width=2)
    return graph


def run(graph: Path) -> RunResult:
    return run_graph(load_graph(graph, root=graph.parent), graph.parent / ".trace")


def test_an_output_deleted_as_nix_build_ends_is_built_again_and_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine import nix

    graph = project(tmp_path)
    real, gone = nix.Nix.build, []

    def build(self: nix.Nix, *args: Any, **kw: Any) -> nix.RealiseReport:
        rep = real(self, *args, **kw)
        out = nix.output_of(str(rep.traced[3]))  # s3, built by this nix-build (sorted: s0..s3)
        proc = delete(out)  # another process, now: nothing holds it any more
        assert proc.returncode == 0 and not Path(out).exists(), proc.stderr
        gone.append(out)
        return rep

    monkeypatch.setattr(nix.Nix, "build", build)
    result = run(graph)
    assert gone == [result.steps["s3"].out]
    assert result.ok, {s: (r.status, r.log_tail) for s, r in result.steps.items()}
    assert (Path(gone[0]) / "text").read_text().startswith("step 3")  # built again
    assert result.steps["s3"].status == "built"
    refused = delete(gone[0])  # and this time held by the state directory's root
    assert refused.returncode != 0 and "alive" in refused.stderr


@pytest.mark.parametrize("way", ["nix-build", "realise-in-chunks"])
def test_what_nix_build_made_is_held_before_the_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, way: str
) -> None:
    """Rooted as soon as nix-build returns, before outcomes are read, --check rebuilds run
    and the index is written: another process's delete is refused from then on. The same after
    each `nix-store --realise` of the two-process path (past REALISE_CHUNK steps, after an
    evaluation error, or when another trace process holds the store lock: engine/run.py
    `_instantiate_and_realise`), which held nothing until the first two-worker suite run found it
    (the lock taken by the other worker sent this test down that path)."""
    import engine.run

    if way == "realise-in-chunks":
        monkeypatch.setattr(engine.run, "REALISE_CHUNK", 2)  # 4 steps: 2 realises
    graph = project(tmp_path)
    real, refused = engine.run._collect, []

    def collect(*args: Any, **kw: Any) -> Any:
        built = args[3]  # _collect(graph, plan, dirty, built, nix, report)
        refused.extend(delete(out) for out in built.out_of.values())
        return real(*args, **kw)

    monkeypatch.setattr(engine.run, "_collect", collect)
    result = run(graph)
    assert result.ok and len(refused) == 4
    assert all(p.returncode != 0 and "alive" in p.stderr for p in refused), refused
