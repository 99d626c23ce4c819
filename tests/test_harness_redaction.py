"""The harness redacts a target's and the reproducer's output before it cuts a tail off, keeps
the oracles' copy or writes anything (issue 11, item 4), and a variant run redacts every piece
of its PoC's secrets however the variant changed them (the variants gate mutates secrets too).
The harness runs outside the sandbox against a tiny fake package (tests.test_verify_gate)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.test_verify_gate import load_harness, run_harness
from trace_sandbox.harness import redaction

LINES = [base64.b64encode(hashlib.sha512(b"k%d" % i).digest()[:48]).decode() for i in range(100)]
PEM = "-----BEGIN PRIVATE KEY-----\n" + "\n".join(LINES) + "\n-----END PRIVATE KEY-----\n"
TOKEN = "ghp_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m"


def _strings(v: Any) -> list[str]:
    if isinstance(v, str):
        return [v]
    if isinstance(v, dict):
        return [s for x in v.values() for s in _strings(x)]
    if isinstance(v, list):
        return [s for x in v for s in _strings(x)]
    return []


def _leaks(record: dict[str, Any], secrets: list[str]) -> list[str]:
    return [s for text in _strings(record) for s in secrets if s in text]


def test_a_pem_block_longer_than_the_tail_is_redacted_before_the_cut(tmp_path: Path) -> None:
    """6.5 KB of PEM, printed by a target and by the reproducer: the 4000-character tails would
    start inside the block (its BEGIN line cut off); redacted first, nothing of it is kept."""
    harness = load_harness()
    assert len(PEM) > harness.TAIL_CHARS
    (tmp_path / "key.pem").write_text(PEM + f"token {TOKEN}\n")
    script = f'"$TARGET/bin/show" {tmp_path}/key.pem\ncat {tmp_path}/key.pem >&2\n'
    rec = run_harness(tmp_path, "pem", script)
    [inv] = rec["invocations"]
    assert "[REDACTED:private-key]" in inv["stdout_tail"] and inv["stdout"] == inv["stdout_tail"]
    assert "[REDACTED:private-key]" in rec["stdout_tail"]
    assert "[REDACTED:private-key]" in rec["stderr_tail"]
    assert "[REDACTED:github-token]" in rec["stderr_tail"]
    assert _leaks(rec, [line[-24:] for line in LINES] + [TOKEN[4:]]) == []
    # the digests are of the streams as written (a golden file compares), not of the redaction
    assert inv["stdout_sha256"] == hashlib.sha256((PEM + f"token {TOKEN}\n").encode()).hexdigest()


def test_a_variant_run_redacts_every_piece_of_its_pocs_secrets(tmp_path: Path) -> None:
    """The PoC's data holds a key; the variant changed one byte inside a base64 line (a shape
    no rule knows) and dropped the BEGIN line: told its PoC's inputs (`taint`, the variant
    plan's poc.json), the harness keeps no 12-character piece of the key."""
    original = tmp_path / "poc-key.pem"
    original.write_text(PEM)
    mutated = PEM.replace("-----BEGIN PRIVATE KEY-----\n", "").replace(
        LINES[7], LINES[7][:30] + "," + LINES[7][31:]
    )
    (tmp_path / "variant.pem").write_text(mutated[:1000])
    poc = tmp_path / "poc.json"
    poc.write_text(json.dumps({"files": [str(original)], "stdin_b64": [], "args": [TOKEN]}))
    script = f'"$TARGET/bin/show" {tmp_path}/variant.pem\necho "{TOKEN[:-1]}x" >&2\n'
    secrets = [LINES[7][:30], LINES[7][31:], *(line[:12] for line in LINES[:16]), TOKEN[4:20]]
    bare = run_harness(tmp_path, "variant-bare", script)
    assert _leaks(bare, secrets)  # without its PoC's inputs the mutated line gets through
    rec = run_harness(tmp_path, "variant", script, extra_env={"taint": str(poc)})
    assert _leaks(rec, secrets) == [], rec["invocations"][0]["stdout_tail"]
    assert "[REDACTED:secret-fragment]" in rec["invocations"][0]["stdout_tail"]
    # what the gate judges (exit, signal, sanitizer) is untouched
    assert rec["invocations"][0]["exit_code"] == 0 and rec["target_ran"] is True


def test_a_run_records_stdin_is_redacted_inside_its_base64() -> None:
    """A PoC that pipes a secret to its target: the record keeps stdin whole, base64; the
    bundle's redaction decodes it, redacts the text and encodes it again (binary stays)."""
    from engine.evidence.redact import redact_value

    secret = f"user=x token={TOKEN}\n".encode()
    binary = bytes(range(256))
    record = {"invocations": [{"stdin": {"b64": base64.b64encode(secret).decode()}},
                              {"stdin": {"b64": base64.b64encode(binary).decode()}}]}  # fmt: skip
    out, counts = redact_value(record)
    text = base64.b64decode(out["invocations"][0]["stdin"]["b64"]).decode()
    assert TOKEN[4:] not in text and "[REDACTED:" in text and counts
    assert base64.b64decode(out["invocations"][1]["stdin"]["b64"]) == binary


def test_a_batch_reads_its_pocs_inputs_once_and_again_once_they_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every run of a variant batch is given the same poc.json: its inputs are read and scanned
    once per process (issue 30), and again when poc.json or a file it names changed, even to
    the same size and mtime (the ctime moves)."""
    scans: list[list[str]] = []

    def counted(texts: list[str]) -> frozenset[str]:
        scans.append(texts)
        return real(texts)

    real = redaction.secret_fragments
    monkeypatch.setattr(redaction, "secret_fragments", counted)
    key = tmp_path / "key.pem"
    key.write_text(PEM)
    poc = tmp_path / "poc.json"
    poc.write_text(json.dumps({"files": [str(key)], "stdin_b64": [], "args": []}))
    first = redaction.taint_fragments(str(poc))
    assert LINES[3][:12] in first
    assert redaction.taint_fragments(str(poc)) == first and len(scans) == 1
    st = key.stat()
    key.write_text(PEM.replace(LINES[3], LINES[4]))  # the same size
    os.utime(key, ns=(st.st_atime_ns, st.st_mtime_ns))  # and its old mtime
    changed = redaction.taint_fragments(str(poc))
    assert len(scans) == 2 and LINES[3][:12] not in changed and LINES[4][:12] in changed
    poc.write_text(json.dumps({"files": [str(key)], "stdin_b64": [], "args": [TOKEN]}))
    assert TOKEN[4:16] in redaction.taint_fragments(str(poc)) and len(scans) == 3
