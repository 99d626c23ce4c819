"""verify-bundle --replay with real nix builds: recorded outcomes are rebuilt and compared.

A tiny two-step graph; the CLI over the real verify pipeline is in test_e2e_bundle.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from engine.bundle_verify.checks import verify_bundle
from engine.bundle_verify.identity import load_identity_policy
from engine.bundle_verify.replay import replay_checks
from engine.candidate import load_candidate
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
[steps.pre]
kind = "record"
params = { value = "crashed" }
[steps.post]
kind = "record"
needs = ["pre"]
params = { value = "survived" }
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


def project(root: Path) -> Path:
    shutil.copytree(MINIPKGS, root / "pkgs")
    (root / "templates").mkdir()
    (root / "templates" / "record.nix.j2").write_text(TEMPLATE)
    (root / "graph.toml").write_text(GRAPH)
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


@pytest.mark.nix
def test_replay_agrees_and_a_forged_outcome_is_caught(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    key = project(root)
    candidate = load_candidate(root / "cand" / "candidate.toml")
    graph = load_graph(root / "graph.toml", root=root, context={"candidate": candidate.context()})
    run = run_graph(graph, root / ".trace")
    assert run.steps["pre"].outcome == {"schema": "test.outcome/v1", "value": "crashed"}
    policy = load_identity_policy(root / "identity.json")

    def replay(statement: object, payload: Path) -> list:  # type: ignore[type-arg]
        return replay_checks(statement, payload, root=root)  # type: ignore[arg-type]

    honest = make_bundle(root, tmp_path / "honest", run, key)
    v = verify_bundle(honest, policy, replay=replay)
    assert v.passed, v.checks
    assert any(c.name == "replay" and c.ok and "2 steps rebuilt" in c.detail for c in v.checks)

    # A signer who records an outcome the build never produced: the signature and every digest
    # hold, only the replay can tell.
    forged_step = run.steps["pre"].model_copy(
        update={"outcome": {"schema": "test.outcome/v1", "value": "survived"}}
    )
    forged_run = run.model_copy(update={"steps": {**run.steps, "pre": forged_step}})
    forged = make_bundle(root, tmp_path / "forged", forged_run, key)
    assert verify_bundle(forged, policy).passed  # without --replay nothing is wrong
    v = verify_bundle(forged, policy, replay=replay)
    assert v.reasons == ["replay.mismatch"], v.checks
    assert "pre:" in next(c.detail for c in v.checks if c.reason == "replay.mismatch")

    # a pinned input that changed since: the replay refuses to compare (nothing is built)
    (root / "templates" / "record.nix.j2").write_text(TEMPLATE + "\n")
    v = verify_bundle(honest, policy, replay=replay)
    assert v.reasons == ["replay.pin-mismatch"], v.checks
    assert "templates/record.nix.j2" in next(c.detail for c in v.checks if not c.ok)
