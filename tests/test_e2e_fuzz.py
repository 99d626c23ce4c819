"""End to end with real nix: urldec's length special case through `trace verify --bundle`.
Every claim holds with its PoC and no variant of the PoC crashes it; the fuzzing gate finds an
input of another length that decodes to the buffer's 16 bytes, and the signing policy denies it
with fuzz-found-crash. The bundle carries that input as a reproducer (fuzz/<id>/repro.sh +
data, byte for byte as the gate recorded), a forged input file is caught offline, and the replay
rebuilds the found input's run against the post-fix build (the crash again).
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
CAND = "trace/candidates/urldec-length-special-case/candidate.toml"


def decoded_length(line: bytes) -> int:
    hexd = b"0123456789abcdefABCDEF"
    line = line.split(b"\0")[0]
    n = i = 0
    while i < len(line):
        escape = line[i : i + 1] == b"%" and len(line) > i + 2
        if escape and line[i + 1] in hexd and line[i + 2] in hexd:
            i += 2
        n += 1
        i += 1
    return n


def test_the_bundle_holds_the_fuzzer_s_crashing_input_and_the_replay_reruns_it(
    tmp_path: Path,
) -> None:
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
    assert "gate: fuzz" in out and "fuzz-found-crash" in out and "DENY" in out

    payload = bundle / PAYLOAD_DIR
    gate = json.loads((payload / "gates" / "fuzz.json").read_text())
    first = gate["details"]["still_failing"][0]
    found = payload / "fuzz" / first["id"]
    assert (found / "repro.sh").read_text().splitlines()[-1] == "\"$TARGET/bin/urldec\" 'poc.txt'"
    data = (found / "data" / "poc.txt").read_bytes()
    assert hashlib.sha256(data).hexdigest() == first["files"]["poc.txt"]
    lines = data.split(b"\n")
    assert any(len(x) != 16 and decoded_length(x) == 16 for x in lines), data
    statement = Statement.model_validate_json((bundle / STATEMENT_FILE).read_bytes())
    agree = {c.name: c for c in record_checks(statement, payload, [REPO / "policy"])}
    assert agree["records agree"].ok, agree["records agree"].detail

    (replayed,) = replay_checks(statement, payload, root=fork)
    assert replayed.ok, replayed.detail
    replay = json.loads((payload / "replay.json").read_text())
    assert "fuzz-post" in replay["steps"]  # the found input's run was rebuilt, the crash too
    rebuilt = json.loads((payload / "outcomes" / "fuzz-post.json").read_text())
    (crash,) = [r for r in rebuilt["runs"] if r["index"] == first["index"]]
    assert crash["outcome"]["sanitizer"]["kind"] == "heap-buffer-overflow"

    (found / "data" / "poc.txt").write_bytes(b"AAAAAAAAAAAAAAAA\n")
    agree = {c.name: c for c in record_checks(statement, payload, [REPO / "policy"])}
    assert not agree["records agree"].ok
    assert f"fuzz/{first['id']}/data/poc.txt differs" in agree["records agree"].detail
