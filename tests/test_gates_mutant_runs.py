"""The mutant-runs step (issue 25's cost): every mutant run in ONE derivation
(trace_sandbox/gates/mutant_variants.py `run_mutants`), each mutant's records as its own
`mutant-run` derivation made them (`run_mutant` alone, in a fresh build directory). Real harness
runs outside Nix, against tests.test_verify_gate's fake package; the real-build side is
tests/test_gates_nix.py."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.test_gates_landing import FIX
from tests.test_verify_gate import HARNESS, run_harness
from trace_sandbox.gates.mutant_variants import mutant_dirs, run_mutant, run_mutants
from trace_sandbox.gates.mutation import write_mutant
from trace_sandbox.gates.variant_runs import run_harness as run_variant


@pytest.fixture
def build() -> Iterator[Path]:
    """A short build directory (the harness's sockets live under it)."""
    path = Path(tempfile.mkdtemp(prefix="mr-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def package(tmp_path: Path, name: str, ok: str) -> Path:
    """A copy of the fake package whose `ok` program is `ok`."""
    pkg = tmp_path / name
    shutil.copytree(tmp_path / "pkg", pkg)
    (pkg / "bin" / "ok").write_text(ok)
    return pkg


def files(root: Path) -> dict[str, Any]:
    """Every file under `root`, JSON parsed."""
    return {
        str(p.relative_to(root)): json.loads(p.read_text())
        if p.suffix == ".json"
        else p.read_text()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def setup(tmp_path: Path, build: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """Four mutants of one patch against the fake package: m1 byte-identical to the post-fix
    build (equivalent), m2 crashes on the PoC (killed by it), m3 does not build (stillborn), m4
    survives the PoC and crashes on its one variant (a variant run, against its post-fix
    baseline)."""
    run_harness(tmp_path, "setup", "true\n")  # the fake package at tmp_path/pkg
    post = package(tmp_path, "post", "#!/bin/sh\necho fine\n")
    patch = tmp_path / "fix.patch"
    patch.write_text((FIX / "fix.patch").read_text())
    crash = "#!/bin/sh\nkill -SEGV $$\n"
    targets = {
        1: package(tmp_path, "m1", "#!/bin/sh\necho fine\n"),
        2: package(tmp_path, "m2", crash),
        3: package(tmp_path, "m3", "#!/bin/sh\necho fine\n"),
        4: package(tmp_path, "m4", '#!/bin/sh\n[ "$1" = v ] && kill -SEGV $$\necho fine\n'),
    }
    (targets[3] / ".trace-build-failed").write_text("2\n")
    (tmp_path / "poc.sh").write_text('"$TARGET/bin/ok"\n')
    plan = tmp_path / "plan"
    (plan / "v" / "1" / "data").mkdir(parents=True)
    (plan / "v" / "1" / "repro.sh").write_text('"$TARGET/bin/ok" v\n')
    env = {"harness": str(HARNESS), "run": "1", "tools": "/usr", "timeout": "30"}
    env |= {"script": str(tmp_path / "poc.sh"), "TMPDIR": str(build), "symbolize": "0"}
    baseline = tmp_path / "variant-post" / "v" / "1"
    run_variant(str(plan / "v" / "1"), str(baseline), base={**env, "target": str(post)})
    meta = {"id": "v001", "index": 1, "description": "an argument"}
    (baseline / "variant.json").write_text(json.dumps(meta))
    mutants = []
    for n, target in targets.items():
        write_mutant({"patches": [str(patch)], "index": n}, str(tmp_path / "mutants" / str(n)))
        mutants.append({"index": n, "target": str(target), "mutant": f"{tmp_path}/mutants/{n}"})
    cfg = {"mutants": mutants, "post": str(post), "plan": str(plan), "oracles": "{}"}
    cfg["variant_runs"] = [str(tmp_path / "variant-post")]
    return cfg, env


def test_one_derivation_writes_what_a_derivation_per_mutant_wrote(
    tmp_path: Path, build: Path, setup: tuple[dict[str, Any], dict[str, str]]
) -> None:
    cfg, env = setup
    alone: dict[int, dict[str, Any]] = {}
    for m in cfg["mutants"]:  # the old mutant-run steps: one build directory each
        own = Path(tempfile.mkdtemp(prefix="own-", dir=build))
        out = tmp_path / "alone" / str(m["index"])
        one = {**cfg, "target": m["target"], "mutant": m["mutant"]}
        run_mutant(
            one, {**env, "target": m["target"], "out": str(out), "TMPDIR": str(own)}, str(out)
        )
        alone[m["index"]] = files(out)
    out = tmp_path / "batch"
    summary = run_mutants(cfg, env, str(out), parallel=2)
    assert {n: files(out / str(n)) for n in alone} == alone  # byte for byte, every record
    statuses = [(r["index"], r["check"]["status"]) for r in summary["runs"]]
    assert statuses == [(1, "equivalent"), (2, "run"), (3, "stillborn"), (4, "run")]
    assert alone[2]["outcome.json"]["invocations"][0]["signal"] == "SIGSEGV"
    assert alone[2]["variants.json"]["skipped"] == "the reproducer already kills it"
    killed = alone[4]["variants.json"]["killed_by"]  # the PoC missed it, its variant did not
    assert (killed["index"], killed["id"]) == (1, "v001") and "SIGSEGV" in killed["why"]
    assert alone[4]["variants/1/outcome.json"]["invocations"][0]["signal"] == "SIGSEGV"
    assert alone[3]["outcome.json"]["build"] == "failed"
    assert json.loads((out / "outcome.json").read_text()) == summary
    assert summary["schema"] == "trace.mutant-runs/v1" and summary["mutants"] == 4
    assert [r["outcome"] for r in summary["runs"]] == [alone[n]["outcome.json"] for n in alone]
    assert sorted(p.name for p in build.iterdir() if not p.name.startswith("own-")) == []


def test_a_reproducer_does_not_see_the_other_mutants_records(
    tmp_path: Path, build: Path, setup: tuple[dict[str, Any], dict[str, str]]
) -> None:
    """The batch's $out (every mutant's records) is hidden from each reproducer, as a
    derivation of its own kept the other mutants' records out of reach."""
    cfg, env = setup
    out = tmp_path / "batch"
    spy = tmp_path / "spy.sh"
    spy.write_text(f'ls "{out}" "{out}/1" 2>&1; "$TARGET/bin/ok"\n')
    last = {**cfg["mutants"][-1], "index": 5}
    cfg = {**cfg, "mutants": [*cfg["mutants"], last]}
    run_mutants(cfg, {**env, "script": str(spy)}, str(out), parallel=1)  # 5 runs after 1 to 4
    seen = json.loads((out / "5" / "outcome.json").read_text())["stdout_tail"]
    assert "outcome.json" not in seen and "check.json" not in seen, seen
    assert "fine" in seen  # the run itself happened


def test_the_gate_reads_each_mutant_of_the_batch(tmp_path: Path) -> None:
    """mutant_dirs: a mutant-runs output is its mutants' directories in its order; a directory
    without the summary (an old mutant-run step's output) is one mutant."""
    batch = tmp_path / "batch"
    (batch / "2").mkdir(parents=True)
    (batch / "10").mkdir()
    runs = [{"index": 2}, {"index": 10}]
    schema = "trace.mutant-runs/v1"
    (batch / "outcome.json").write_text(json.dumps({"schema": schema, "runs": runs}))
    single = tmp_path / "single"
    single.mkdir()
    (single / "outcome.json").write_text(json.dumps({"schema": "trace.run/v1"}))
    assert mutant_dirs([str(batch), str(single)]) == [f"{batch}/2", f"{batch}/10", str(single)]


def test_a_mutants_variant_runs_redact_their_pocs_secrets(
    tmp_path: Path, setup: tuple[dict[str, Any], dict[str, str]]
) -> None:
    """A mutant's variant runs are told the variants' PoC (`taint`, the plan's poc.json), as
    the variant-runs steps are: a PoC key the variant changed (a shape no rule knows) leaves
    no 12-character piece in the mutant's records."""
    from tests.test_harness_redaction import LINES, PEM, _leaks

    cfg, env = setup
    plan = Path(cfg["plan"])
    original = tmp_path / "poc-key.pem"
    original.write_text(PEM)
    mutated = PEM.replace("-----BEGIN PRIVATE KEY-----\n", "").replace(
        LINES[7], LINES[7][:30] + "," + LINES[7][31:]
    )
    (plan / "poc.json").write_text(json.dumps({"files": [str(original)], "args": []}))
    (plan / "v" / "1" / "data" / "key.pem").write_text(mutated[:1000])
    (plan / "v" / "1" / "repro.sh").write_text("\"$TARGET/bin/ok\" 'key.pem'\n")
    # mutant 4 survives the PoC (no argument) and shows the variant's file
    survivor = Path(cfg["mutants"][3]["target"])
    (survivor / "bin" / "ok").write_text('#!/bin/sh\n[ -n "$1" ] && cat "$1"\necho fine\n')
    out = tmp_path / "batch"
    run_mutants(cfg, env, str(out), parallel=2)
    record = json.loads((out / "4" / "variants" / "1" / "outcome.json").read_text())
    [inv] = record["invocations"]
    assert "[REDACTED:secret-fragment]" in inv["stdout_tail"], inv["stdout_tail"]
    secrets = [LINES[7][:30], LINES[7][31:], *(line[:12] for line in LINES[:16])]
    assert _leaks(record, secrets) == []
