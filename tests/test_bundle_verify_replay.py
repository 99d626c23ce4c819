"""verify-bundle --replay with real nix builds: every recorded step is really rebuilt (built
when the store lacks it, else `nix --check`) and its outcome compared.

A tiny three-step graph (one step writes a non-deterministic byproduct beside a deterministic
outcome); the CLI over the real verify pipeline is in test_e2e_bundle.py. The replay is called
directly: these bundles carry no signing decision (test_bundle_verify covers those checks).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from engine.audit.checks import verify_bundle
from engine.audit.identity import load_identity_policy
from engine.audit.replay import replay_checks
from engine.audit.signature import Check
from engine.candidate import load_candidate
from engine.evidence import PAYLOAD_DIR
from engine.evidence.bundle import assemble, write_bundle
from engine.evidence.collect import candidate_entries, model_pin, outcome_entries
from engine.evidence.replay import build_replay_record
from engine.evidence.statement import PAYLOAD_TYPE
from engine.graph import load_graph
from engine.run import RunResult, run_graph
from engine.signing.keymode import sign_with_key
from engine.signing.keys import keygen, load_private_key
from tests.enginekit import MINIPKGS

TEMPLATE = """\
pkgs.runCommand {{ step.id | store_name }} { value = {{ params.value }}; } ''
  mkdir $out
  printf '{"schema":"test.outcome/v1","value":"%s"}' "$value" > $out/outcome.json
  {% if params.noise %}cat /proc/sys/kernel/random/uuid > $out/noise{% endif %}
''
"""

GRAPH = """\
version = 1
[nix]
package_set = "pkgs"
[kinds.record]
template = "templates/record.nix.j2"
[kinds.record.params.value]
type = "string"
required = true
[kinds.record.params.noise]
type = "bool"
default = false
[steps.pre]
kind = "record"
params = { value = "crashed" }
[steps.post]
kind = "record"
needs = ["pre"]
params = { value = "survived" }
[steps.noisy]
kind = "record"
params = { value = "same every time", noise = true }
"""

CANDIDATE = """\
id = "CVE-2026-0001-demo"
package = "demo"
patches = ["fix.patch"]
[advisory]
osv = "advisory.json"
[reproducer]
script = "repro.sh"
[expect]
exit_code = 1
"""


def project(root: Path, nonce: str = "") -> Path:
    shutil.copytree(MINIPKGS, root / "pkgs")
    (root / "templates").mkdir()
    (root / "templates" / "record.nix.j2").write_text(TEMPLATE)
    graph = GRAPH
    for value in ("crashed", "survived", "same every time"):
        graph = graph.replace(f'"{value}"', f'"{value}{nonce}"')
    (root / "graph.toml").write_text(graph)
    c = root / "cand"
    c.mkdir()
    (c / "candidate.toml").write_text(CANDIDATE)
    (c / "fix.patch").write_text("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n")
    (c / "advisory.json").write_text('{"id": "OSV-DEMO"}\n')
    (c / "repro.sh").write_text("#!/bin/sh\n$TARGET/bin/demo < crash.txt\n")
    key, _, _ = keygen(root / "keys" / "signer.key")
    (root / "identity.json").write_text(
        json.dumps(
            {
                "schema": "trace.signing-identity/v1",
                "version": "1",
                "keys": [{"name": "signer", "public_key": "keys/signer.key.pub"}],
            }
        )
    )
    return key


def make_bundle(root: Path, out: Path, run: RunResult, key: Path) -> Path:
    candidate = load_candidate(root / "cand" / "candidate.toml")
    graph = load_graph(root / "graph.toml", root=root, context={"candidate": candidate.context()})
    replay = build_replay_record(
        graph, run, candidate_file=candidate.path, root=root, model=model_pin(candidate)
    )
    asm = assemble(
        candidate_entries(candidate) + outcome_entries(run),
        replay=replay,
        candidate_id=candidate.spec.id,
        policy_versions={},
        builder_id="tests",
    )
    sig = sign_with_key(asm.statement_bytes, PAYLOAD_TYPE, load_private_key(key))
    return write_bundle(out, asm, sig)


def replay_of(bundle: Path, root: Path) -> Check:
    (check,) = replay_checks(None, bundle / PAYLOAD_DIR, root=root)  # type: ignore[arg-type]
    return check


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, RunResult]:
    base = tmp_path_factory.mktemp("replay")
    root = base / "proj"
    root.mkdir()
    key = project(root)
    candidate = load_candidate(root / "cand" / "candidate.toml")
    graph = load_graph(root / "graph.toml", root=root, context={"candidate": candidate.context()})
    run = run_graph(graph, root / ".trace")
    assert run.steps["pre"].outcome == {"schema": "test.outcome/v1", "value": "crashed"}
    return root, key, run


@pytest.mark.nix
def test_replay_rebuilds_every_step_with_check(
    world: tuple[Path, Path, RunResult], tmp_path: Path
) -> None:
    root, key, run = world
    honest = make_bundle(root, tmp_path / "honest", run, key)
    check = replay_of(honest, root)
    assert check.ok, check
    # the store holds all three outputs: each is rebuilt with --check, none merely found;
    # the noisy step's bytes differ, its outcome record does not
    assert check.detail == (
        "3 steps replayed (2 rebuilt with nix --check, bit-identical, "
        "1 rebuilt with other bytes), every outcome as recorded"
    ), check
    noisy = run.steps["noisy"].out
    assert noisy is not None and not Path(noisy + ".check").exists()  # the kept rebuild is gone
    policy = load_identity_policy(root / "identity.json")

    def replay(statement: object, payload: Path) -> list[Check]:
        return replay_checks(statement, payload, root=root)  # type: ignore[arg-type]

    v = verify_bundle(honest, policy, replay=replay)
    assert v.reasons == ["decision.missing"]  # checked before any replay: nothing is rebuilt
    assert next(c for c in v.checks if c.name == "replay").detail.startswith("not run")


@pytest.mark.nix
def test_replay_catches_forged_outcomes_and_changed_pins(
    world: tuple[Path, Path, RunResult], tmp_path: Path
) -> None:
    root, key, run = world
    # A signer who records an outcome the build never produced: the signature and every digest
    # hold, only the replay can tell.
    forged_step = dataclasses.replace(
        run.steps["pre"], outcome={"schema": "test.outcome/v1", "value": "survived"}
    )
    forged_run = dataclasses.replace(run, steps={**run.steps, "pre": forged_step})
    forged = make_bundle(root, tmp_path / "forged", forged_run, key)
    check = replay_of(forged, root)
    assert check.reason == "replay.mismatch" and "pre:" in check.detail, check
    assert "post" not in check.detail

    # a derivation the record pins that this checkout does not instantiate
    honest = make_bundle(root, tmp_path / "honest", run, key)
    replay_json = honest / PAYLOAD_DIR / "replay.json"
    doc = json.loads(replay_json.read_bytes())
    doc["steps"]["post"]["drv"] = "/nix/store/" + "0" * 32 + "-post.drv"
    replay_json.write_text(json.dumps(doc))
    check = replay_of(honest, root)
    assert check.reason == "replay.pin-mismatch" and "post: derivation" in check.detail, check

    # a pinned input that changed since: the replay refuses to compare (nothing is built)
    again = make_bundle(root, tmp_path / "again", run, key)
    template = root / "templates" / "record.nix.j2"
    template.write_text(TEMPLATE + "\n")
    try:
        check = replay_of(again, root)
    finally:
        template.write_text(TEMPLATE)
    assert check.reason == "replay.pin-mismatch", check
    assert "templates/record.nix.j2" in check.detail


@pytest.mark.nix
def test_replay_builds_what_the_store_lacks(tmp_path: Path) -> None:
    """Outputs deleted from the store are built from scratch, and counted as built."""
    from engine.nix import Nix

    root = tmp_path / "proj"
    root.mkdir()
    key = project(root, nonce=uuid.uuid4().hex)  # outputs no other test or run holds
    candidate = load_candidate(root / "cand" / "candidate.toml")
    graph = load_graph(root / "graph.toml", root=root, context={"candidate": candidate.context()})
    run = run_graph(graph, root / ".trace")
    bundle = make_bundle(root, tmp_path / "b", run, key)
    shutil.rmtree((root / ".trace" / "gcroots").resolve())  # the run's GC roots (this test's)
    outs = [r.out for r in run.steps.values() if r.out]
    proc = subprocess.run(["nix-store", "--delete", *outs], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert Nix(graph.nix).invalid(outs) == set(outs)
    check = replay_of(bundle, root)
    assert check.ok, check
    assert check.detail.startswith("3 steps replayed (3 built (not in the store), 0 rebuilt"), check
