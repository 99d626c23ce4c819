"""verify-bundle: a clean bundle passes; each tampering fails with its own reason code."""

from __future__ import annotations

import base64
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.bundle_verify.checks import BundleVerdict, verify_bundle
from engine.bundle_verify.identity import IdentityPolicy, load_identity_policy
from engine.evidence import PAYLOAD_DIR, SIGNATURE_FILE, STATEMENT_FILE
from engine.evidence.bundle import assemble, write_bundle
from engine.evidence.payload import PayloadEntry, json_entry, text_entry
from engine.evidence.replay import FilePin, ReplayRecord
from engine.evidence.statement import PAYLOAD_TYPE
from engine.signing.keymode import sign_with_key
from engine.signing.keys import keygen, load_private_key, load_public_key
from tests.sigstore_fake import TEST_ISSUER, FakeSigstore, shared

SIGNER = "signer@trace.test"


def entries() -> list[PayloadEntry]:
    return [
        json_entry("advisory.json", "advisory", {"id": "OSV-1", "aliases": ["CVE-2026-1"]}),
        text_entry("patches/01-fix.patch", "patch", "--- a/x.c\n+++ b/x.c\n@@ -1 +1 @@\n-a\n+b\n"),
        json_entry("outcomes/pre@1.json", "run", {"schema": "trace.run/v1", "exit_code": 1}),
        json_entry("decisions/signing.json", "signing", {"allowed": True}),
    ]


def assembled(versions: dict[str, str]) -> object:
    return assemble(
        entries(),
        replay=ReplayRecord(
            engine_version="0.1.0",
            nix_version="nix (Nix) 2.8.0",
            system="x86_64-linux",
            candidate=FilePin(path="c.toml", sha256="a" * 64),
            graph=FilePin(path="g.toml", sha256="b" * 64),
        ),
        candidate_id="CVE-2026-1-x",
        policy_versions=versions,
        builder_id="tests",
    )


def write_policy(
    path: Path,
    *,
    identity: str = SIGNER,
    issuer: str = TEST_ISSUER,
    versions: dict[str, list[str]] | None = None,
    keys: list[dict[str, str]] | None = None,
) -> IdentityPolicy:
    path.write_text(
        json.dumps(
            {
                "schema": "trace.signing-identity/v1",
                "version": "1.0.0",
                "keyless": [{"identity": identity, "issuer": issuer}],
                "keys": keys or [],
                "policy_versions": {"trace-test": ["1.0.0"]} if versions is None else versions,
            }
        )
    )
    return load_identity_policy(path)


@pytest.fixture(scope="module")
def fake() -> FakeSigstore:
    return shared()


@pytest.fixture(scope="module")
def keyless_bundle(
    fake: FakeSigstore, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Path]:
    """One keyless-signed bundle for the module (tests copy it before tampering)."""
    from engine.signing.keyless import sign_keyless

    base = tmp_path_factory.mktemp("keyless")
    trust = fake.write_trust_config(base / "trust.json")
    asm = assembled({"trace-test": "1.0.0"})
    sig = sign_keyless(asm.statement_bytes, token=fake.token(), trust_config=trust, deadline=20)  # type: ignore[attr-defined]
    return write_bundle(base / "bundle", asm, sig), trust  # type: ignore[arg-type]


def run(bundle: Path, policy: IdentityPolicy, trust: Path) -> BundleVerdict:
    return verify_bundle(bundle, policy, trust_config=trust, deadline=20)


def _edit_byte(b: Path) -> None:
    p = b / PAYLOAD_DIR / "advisory.json"
    p.write_bytes(p.read_bytes().replace(b"OSV-1", b"OSV-2"))


def _edit_statement(b: Path) -> None:
    s = json.loads((b / STATEMENT_FILE).read_bytes())
    s["predicate"]["runDetails"]["builder"]["id"] = "someone-else"
    (b / STATEMENT_FILE).write_text(json.dumps(s))


def _edit_signature(b: Path) -> None:
    doc = json.loads((b / SIGNATURE_FILE).read_bytes())
    sig = bytearray(base64.b64decode(doc["dsseEnvelope"]["signatures"][0]["sig"]))
    sig[-1] ^= 0x01
    doc["dsseEnvelope"]["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()
    (b / SIGNATURE_FILE).write_text(json.dumps(doc))


def _edit_signed_payload(b: Path) -> None:
    """Change the statement inside the envelope (and statement.json to match)."""
    doc = json.loads((b / SIGNATURE_FILE).read_bytes())
    payload = base64.b64decode(doc["dsseEnvelope"]["payload"]).replace(b"tests", b"evil!")
    doc["dsseEnvelope"]["payload"] = base64.b64encode(payload).decode()
    (b / SIGNATURE_FILE).write_text(json.dumps(doc))
    (b / STATEMENT_FILE).write_bytes(payload)


TAMPER: dict[str, tuple[Callable[[Path], None], str]] = {
    "payload byte changed": (_edit_byte, "subject.digest-mismatch"),
    "payload removed": (
        lambda b: (b / PAYLOAD_DIR / "patches" / "01-fix.patch").unlink(),
        "subject.missing-file",
    ),
    "extra file": (
        lambda b: (b / PAYLOAD_DIR / "notes.txt").write_text("hi\n"),
        "subject.extra-file",
    ),
    "statement edited": (_edit_statement, "statement.not-signed"),
    "signature edited": (_edit_signature, "signature.invalid"),
    "signed statement edited": (_edit_signed_payload, "signature.invalid"),
    "signature removed": (lambda b: (b / SIGNATURE_FILE).unlink(), "bundle.unsigned"),
}


def test_clean_keyless_bundle_passes(keyless_bundle: tuple[Path, Path], tmp_path: Path) -> None:
    bundle, trust = keyless_bundle
    v = run(bundle, write_policy(tmp_path / "id.json"), trust)
    assert v.reasons == [] and v.passed
    assert v.mode == "keyless"
    assert v.signer == {"mode": "keyless", "identity": SIGNER, "issuer": TEST_ISSUER}
    names = {c.name for c in v.checks if c.ok}
    assert {"DSSE signature", "signer identity", "certificate, SCT, transparency log"} <= names


@pytest.mark.parametrize("case", sorted(TAMPER))
def test_tamper_matrix(case: str, keyless_bundle: tuple[Path, Path], tmp_path: Path) -> None:
    bundle, trust = keyless_bundle
    copy = tmp_path / "b"
    shutil.copytree(bundle, copy)
    tamper, expected = TAMPER[case]
    tamper(copy)
    v = run(copy, write_policy(tmp_path / "id.json"), trust)
    assert v.reasons == [expected], v.checks
    assert not v.passed


@pytest.mark.parametrize(
    ("policy_kwargs", "expected"),
    [
        ({"identity": "someone@else.test"}, "identity.mismatch"),
        ({"issuer": "https://other-issuer.test"}, "identity.issuer"),
        ({"versions": {}}, "policy.unknown-version"),
    ],
    ids=["wrong identity", "wrong issuer", "unknown policy version"],
)
def test_policy_side_failures(
    policy_kwargs: dict[str, object],
    expected: str,
    keyless_bundle: tuple[Path, Path],
    tmp_path: Path,
) -> None:
    bundle, trust = keyless_bundle
    v = run(bundle, write_policy(tmp_path / "id.json", **policy_kwargs), trust)  # type: ignore[arg-type]
    assert v.reasons == [expected], v.checks


def test_other_sigstore_instance_is_not_trusted(
    keyless_bundle: tuple[Path, Path], tmp_path: Path
) -> None:
    """Verifying against another instance's trust root fails the chain, not the digests."""
    from tests.sigstore_fake import FakeSigstore as Instance

    other = Instance()
    try:
        other_trust = other.write_trust_config(tmp_path / "other.json")
    finally:
        other.stop()
    bundle, _ = keyless_bundle
    v = run(bundle, write_policy(tmp_path / "id.json"), other_trust)
    assert v.reasons == ["signature.certificate"], v.checks


def test_key_mode_round_trip_and_unknown_key(tmp_path: Path) -> None:
    priv, pub, _ = keygen(tmp_path / "keys" / "k")
    asm = assembled({"trace-test": "1.0.0"})
    sig = sign_with_key(asm.statement_bytes, PAYLOAD_TYPE, load_private_key(priv))  # type: ignore[attr-defined]
    bundle = write_bundle(tmp_path / "bundle", asm, sig)  # type: ignore[arg-type]
    trusted = write_policy(tmp_path / "id.json", keys=[{"name": "k", "public_key": "keys/k.pub"}])
    v = verify_bundle(bundle, trusted)
    assert v.passed and v.mode == "key", v.checks
    untrusted = write_policy(tmp_path / "id2.json")
    assert verify_bundle(bundle, untrusted).reasons == ["signature.unknown-key"]
    from engine.signing.keys import key_hint

    k = load_public_key(pub)
    assert verify_bundle(bundle, untrusted, extra_keys={key_hint(k): k}).passed
    copy = tmp_path / "b2"
    shutil.copytree(bundle, copy)
    _edit_signature(copy)
    assert verify_bundle(copy, trusted).reasons == ["signature.invalid"]


def test_cli_verify_bundle_json(
    keyless_bundle: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from engine.cli import main

    bundle, trust = keyless_bundle
    write_policy(tmp_path / "id.json")
    args = ["verify-bundle", str(bundle), "--json", "--trust-config", str(trust)]
    assert main([*args, "--identity", str(tmp_path / "id.json")]) == 0
    assert json.loads(capsys.readouterr().out)["passed"] is True
    write_policy(tmp_path / "bad.json", identity="x@y.test")
    assert main([*args, "--identity", str(tmp_path / "bad.json")]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["reasons"] == ["identity.mismatch"]
    assert "identity.mismatch" in doc["reason_details"]


def test_shipped_identity_policy_loads() -> None:
    repo = Path(__file__).resolve().parent.parent
    policy = load_identity_policy(repo / "policy" / "signing-identity.json")
    assert policy.keyless and all(s.issuer.startswith("https://") for s in policy.keyless)
    assert "redaction" in policy.known_versions
