"""The harness redacts a target's and the reproducer's output before it cuts a tail off, keeps
the oracles' copy or writes anything (issue 11, item 4), and a variant run redacts every piece
of its PoC's secrets however the variant changed them (the variants gate mutates secrets too).
The harness runs outside the sandbox against a tiny fake package (tests.test_verify_gate)."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

from tests.test_verify_gate import load_harness, run_harness

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
