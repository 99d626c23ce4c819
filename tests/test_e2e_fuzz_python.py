"""End to end with real nix, a Python target (issue 26): lineesc's wrong fix through `trace
verify --bundle`. Every claim holds with its PoC and no variant crashes it; the fuzzing gate,
tracing bin/unescape in-process, finds an escape cut off by a line's end, the harness confirms
it on both builds (IndexError), and the signing policy denies with fuzz-found-crash. The bundle
carries the found input as a reproducer and the replay rebuilds its run (the traceback again).
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
CAND = "trace/candidates/lineesc-trailing-backslash/candidate.toml"


def cut_off(line: bytes) -> bool:
    """The line ends inside a \\x or \\u escape (fewer hex digits left than it needs)."""
    for k in range(len(line) - 1):
        if line[k : k + 1] == b"\\" and line[k + 1 : k + 2] in (b"x", b"u"):
            need = 2 if line[k + 1 : k + 2] == b"x" else 4
            if len(line) - (k + 2) < need:
                return True
    return False


def test_the_bundle_holds_the_python_fuzzer_s_input_and_the_replay_reruns_it(
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
    assert gate["details"]["fuzz"]["runner"] == "in-process", gate["details"]["fuzz"]
    first = gate["details"]["still_failing"][0]
    assert first["post_crash"] == ["Python: IndexError"]
    found = payload / "fuzz" / first["id"]
    script = (found / "repro.sh").read_text()
    assert "\"$TARGET/bin/unescape\" 'good.txt'" in script
    name = "good.txt" if "good.txt:" in first["description"] else "poc.txt"
    data = (found / "data" / name).read_bytes()
    assert hashlib.sha256(data).hexdigest() == first["files"][name]
    assert any(cut_off(x) for x in data.split(b"\n")), data
    statement = Statement.model_validate_json((bundle / STATEMENT_FILE).read_bytes())
    agree = {c.name: c for c in record_checks(statement, payload, [REPO / "policy"])}
    assert agree["records agree"].ok, agree["records agree"].detail

    (replayed,) = replay_checks(statement, payload, root=fork)
    assert replayed.ok, replayed.detail
    replay = json.loads((payload / "replay.json").read_text())
    assert "fuzz-post" in replay["steps"]  # the found input's run was rebuilt, the crash too
    rebuilt = json.loads((payload / "outcomes" / "fuzz-post.json").read_text())
    (run,) = [r for r in rebuilt["runs"] if r["index"] == first["index"]]
    invs = run["outcome"]["invocations"]
    assert any(i["exit_code"] == 1 and "IndexError" in i["stderr"] for i in invs), invs
