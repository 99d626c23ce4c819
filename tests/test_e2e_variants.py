"""End to end with real nix: the symptom-hiding fix (cparse-poc-special-case) through
`trace verify --bundle`. Every claim holds with its one PoC reproducer; the signing policy denies
it with variant-still-fails; the bundle, written unsigned for review, carries the crashing
variant as a reproducer (variants/<id>/repro.sh + data, byte for byte as the gate recorded), a
forged variant file is caught offline, and the replay really rebuilds the variant's run (every
outcome as recorded, the crash included).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import shutil
from pathlib import Path

import pytest

from engine.audit.consistency import record_checks
from engine.audit.replay import replay_checks
from engine.cli import main
from engine.evidence import PAYLOAD_DIR, STATEMENT_FILE
from engine.evidence.statement import Statement
from engine.signing.keys import keygen

pytestmark = pytest.mark.nix

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "fixtures" / "fork"
CAND = "trace/candidates/cparse-poc-special-case/candidate.toml"


def test_the_bundle_holds_the_crashing_variant_and_the_replay_reruns_it(tmp_path: Path) -> None:
    fork = tmp_path / "fork"
    shutil.copytree(FIXTURE, fork, ignore=shutil.ignore_patterns(".trace", "result*"))
    key, _, _ = keygen(tmp_path / "signer.key")
    bundle = tmp_path / "bundle"
    args = ["verify", str(fork / CAND), "--fork", str(fork), "--bundle", str(bundle)]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main([*args, "--key", str(key)])
    out = buf.getvalue()
    assert rc == 1, out
    assert "PASS: every claim holds" in out  # the PoC alone is fixed
    assert "gate: variants" in out and "variants/v001-length/" in out  # the verify table
    assert "variant-still-fails" in out and "DENY" in out

    payload = bundle / PAYLOAD_DIR
    gate = json.loads((payload / "gates" / "variants.json").read_text())
    first = gate["details"]["still_failing"][0]
    variant = payload / "variants" / first["id"]
    assert (variant / "repro.sh").read_text().splitlines()[-1] == (
        "\"$TARGET/bin/cparse\" 'long-key.conf'"
    )
    data = (variant / "data" / "long-key.conf").read_bytes()
    assert hashlib.sha256(data).hexdigest() == first["files"]["long-key.conf"]
    assert b"k" * 41 + b"=" in data
    statement = Statement.model_validate_json((bundle / STATEMENT_FILE).read_bytes())
    agree = {c.name: c for c in record_checks(statement, payload, [REPO / "policy"])}
    assert agree["records agree"].ok, agree["records agree"].detail

    (replayed,) = replay_checks(statement, payload, root=fork)
    assert replayed.ok, replayed.detail
    assert "every outcome as recorded" in replayed.detail
    replay = json.loads((payload / "replay.json").read_text())
    assert "variant-post" in replay["steps"]  # the variants' runs were rebuilt, the crash too
    rebuilt = json.loads((payload / "outcomes" / "variant-post.json").read_text())
    (crash,) = [r for r in rebuilt["runs"] if r["index"] == first["index"]]
    assert crash["outcome"]["sanitizer"]["kind"] == "heap-buffer-overflow"

    # a variant file changed after the fact no longer matches the gate record
    (variant / "data" / "long-key.conf").write_bytes(b"name=demo\n")
    agree = {c.name: c for c in record_checks(statement, payload, [REPO / "policy"])}
    assert not agree["records agree"].ok
    assert "variants/v001-length/data/long-key.conf differs" in agree["records agree"].detail
