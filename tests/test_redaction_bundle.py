"""Redaction keeps honest bundles honest and leaks nothing (issue 11, items 3 and 4).

The audit: one e-mail address in a target's output made `verify-bundle` fail an honest, freshly
signed bundle with `records.disagree` (outcome pins taken before redaction); a PEM body whose
BEGIN line a tail cut off leaked; a 27-character `ghp_` token passed; a secret used as a data
file's name stood in statement.json and index.json. Here a candidate carries secrets in every
field it can (its files, a data file's name, the reproducer's and the target's output on both
sides, the advisory), is verified, bundled and signed for real, verifies, replays, and a scan of
every byte and every name of the bundle finds none of the secrets.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from engine.cli import main
from engine.evidence import SIGNATURE_FILE
from engine.evidence.redact import redact_text
from engine.signing.keys import keygen
from tests.enginekit import cli
from tests.test_bundle_verify import write_policy

pytestmark = pytest.mark.nix

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "fixtures" / "fork"
CAND = "trace/candidates/pager-last-page"

EMAIL = "mallory.secret@example.org"
GHP = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n"  # 27 characters after the prefix
NAME_SECRET = "owner.leak@example.net"
PEM_LINES = [
    base64.b64encode(hashlib.sha512(str(i).encode()).digest()[:48]).decode() for i in range(54)
]


def _pem() -> str:
    return "-----BEGIN PRIVATE KEY-----\n" + "\n".join(PEM_LINES) + "\n-----END PRIVATE KEY-----\n"


def test_pem_body_without_its_header_and_short_tokens_are_redacted() -> None:
    tail = _pem()[700:]  # the BEGIN line and the first lines cut off, mid-line
    assert "BEGIN" not in tail
    text, counts = redact_text(f"x {GHP} y\n{tail}")
    assert GHP not in text and counts.get("github-token") == 1
    assert not any(line[-40:] in text for line in PEM_LINES), text
    assert counts.get("pem-body") == 1


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    base = tmp_path_factory.mktemp("redact")
    fork = base / "fork"
    shutil.copytree(FIXTURE, fork, ignore=shutil.ignore_patterns(".trace", "result*"))
    cand = fork / CAND
    repro = cand / "repro.py"
    leak = (
        "import sys\n"
        f"print('contact {EMAIL} token {GHP}')\n"
        f"print('debug: {EMAIL}', file=sys.stderr)\n"
        "print('x' * 1500)\n"
        f"print({_pem()!r})\n"
    )
    repro.write_text(leak + repro.read_text())
    (cand / NAME_SECRET).write_text(f"owner {EMAIL}\n")
    toml = (cand / "candidate.toml").read_text()
    toml = toml.replace('data = ["repro.py"]', f'data = ["repro.py", "{NAME_SECRET}"]')
    (cand / "candidate.toml").write_text(toml + f"\n# reported by {EMAIL} with {GHP}\n")
    advisory = json.loads((cand / "advisory.json").read_text())
    advisory["details"] = f"found by {EMAIL}"
    (cand / "advisory.json").write_text(json.dumps(advisory))
    key, _, _ = keygen(base / "keys" / "signer.key")
    identity = base / "policy" / "signing-identity.json"  # beside copies of the policy files
    identity.parent.mkdir()
    write_policy(identity, keys=[{"name": "signer", "public_key": str(key) + ".pub"}])
    out = base / "bundle"
    rc, stdout, err = cli(
        "verify", str(cand / "candidate.toml"), "--fork", str(fork), "-q",
        "--bundle", str(out), "--key", str(key),
    )  # fmt: skip
    assert rc == 0, stdout + err
    assert (out / SIGNATURE_FILE).is_file()
    return fork, out, identity


def test_an_honest_bundle_with_secrets_everywhere_verifies(
    bundle: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    fork, out, identity = bundle
    capsys.readouterr()
    rc = main(["verify-bundle", str(out), "--identity", str(identity), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["passed"], doc
    rc = main(["verify-bundle", str(out), "--identity", str(identity), "--json",
               "--fork", str(fork), "--replay"])  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["passed"], doc


def test_a_scan_of_the_bundle_finds_no_secret(bundle: tuple[Path, Path, Path]) -> None:
    """Every byte and every name, variants included: the variants gate mutates the PoC's data,
    secrets included (a PEM line with one byte substituted), and the variant runs redact every
    piece of the PoC's secrets (trace_sandbox/harness/redaction.py)."""
    _, out, _ = bundle
    secrets = [EMAIL, GHP, NAME_SECRET, *(line[-40:] for line in PEM_LINES)]
    found: list[str] = []
    names = 0
    for path in sorted(out.rglob("*")):
        rel = path.relative_to(out).as_posix()
        found += [f"name {rel}: {s}" for s in secrets if s in rel]
        if path.is_file():
            data = path.read_bytes()
            # the signature envelope holds the statement base64-encoded
            texts = [data.decode("utf-8", "replace")]
            if path.name == SIGNATURE_FILE:
                envelope = json.loads(data)["dsseEnvelope"]["payload"]
                texts.append(base64.b64decode(envelope).decode())
            found += [f"{rel}: {s}" for s in secrets for t in texts if s in t]
            names += 1
    assert names > 10
    assert not found, found
    index = (out / "payload" / "index.json").read_text()
    assert "[REDACTED:email]" in index  # the data file is there, under its redacted name
