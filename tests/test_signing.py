"""Signing: keygen, key mode, keyless through the offline fake Sigstore, OIDC, deadlines."""

from __future__ import annotations

import base64
import json
import os
import socket
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.errors import InputError, SigningError
from engine.signing.keymode import parse_key_bundle, sign_with_key, verify_envelope_with_key
from engine.signing.keys import key_hint, keygen, load_private_key, load_public_key
from tests.sigstore_fake import GITHUB_ISSUER, REQUEST_TOKEN, FakeSigstore, shared

STATEMENT = json.dumps(
    {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "a.txt", "digest": {"sha256": "0" * 64}}],
        "predicateType": "https://slsa.dev/provenance/v1",
        "predicate": {},
    }
).encode()
PAYLOAD_TYPE = "application/vnd.in-toto+json"


@pytest.fixture(scope="module")
def fake() -> FakeSigstore:
    return shared()


@pytest.fixture(scope="module")
def trust_config(fake: FakeSigstore, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fake.write_trust_config(tmp_path_factory.mktemp("sigstore") / "trust.json")


def test_keygen_writes_0600_and_never_overwrites(tmp_path: Path) -> None:
    priv, pub, hint = keygen(tmp_path / "keys" / "trace.key")
    assert stat.S_IMODE(priv.stat().st_mode) == 0o600
    assert pub == tmp_path / "keys" / "trace.key.pub"
    assert key_hint(load_public_key(pub)) == hint
    before = priv.read_bytes()
    with pytest.raises(InputError, match="already exists") as info:  # bad input: exit 2
        keygen(priv)
    assert info.value.exit_code == 2
    assert priv.read_bytes() == before
    (tmp_path / "other.key.pub").write_text("x")  # a stray public key blocks a new pair too
    with pytest.raises(InputError, match="already exists"):
        keygen(tmp_path / "other.key")
    assert not (tmp_path / "other.key").exists()


def test_keygen_encrypted_needs_password(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACE_KEY_PASSWORD", "correct horse")
    priv, _, _ = keygen(tmp_path / "k")
    assert b"ENCRYPTED" in priv.read_bytes()
    load_private_key(priv)
    monkeypatch.setenv("TRACE_KEY_PASSWORD", "wrong")
    with pytest.raises(InputError, match="not a usable private key"):
        load_private_key(priv)


def test_bad_input_exits_2_through_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad --key PEM, an existing keygen path and a malformed --trust-config are input errors
    (exit 2); exit 1 stays for checks that fail."""
    from engine.cli import main
    from engine.signing.keyless import load_trust_config

    (tmp_path / "bad.pem").write_text(
        "-----BEGIN PUBLIC KEY-----\nnope\n-----END PUBLIC KEY-----\n"
    )
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    assert main(["verify-bundle", str(bundle), "--key", str(tmp_path / "bad.pem")]) == 2
    assert "bad.pem: not a usable public key" in capsys.readouterr().err
    assert main(["keygen", str(tmp_path / "k")]) == 0
    assert main(["keygen", str(tmp_path / "k")]) == 2
    assert "already exists" in capsys.readouterr().err
    (tmp_path / "trust.json").write_text('{"mediaType": "something else"}')
    with pytest.raises(InputError, match="not a Sigstore ClientTrustConfig") as info:
        load_trust_config(tmp_path / "trust.json")
    assert info.value.exit_code == 2
    with pytest.raises(InputError, match="cannot read trust config"):
        load_trust_config(tmp_path / "missing.json")


def test_no_network_tuf_error_is_a_signing_error_with_a_hint(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --trust-config the production trust root comes from TUF; with no network
    sigstore raises TUFError. An explicit fake stands in for the TUF client here (no test may
    reach a real Sigstore host): the error becomes a SigningError, never a traceback."""
    from sigstore.errors import TUFError
    from sigstore.models import ClientTrustConfig

    from engine.cli import main
    from engine.signing.keyless import load_trust_config, sign_keyless

    calls: list[str] = []

    def offline(*args: object, **kwargs: object) -> ClientTrustConfig:
        calls.append("production")
        raise TUFError("Failed to refresh TUF metadata")

    monkeypatch.setattr(ClientTrustConfig, "production", offline)
    with pytest.raises(SigningError) as info:
        load_trust_config(None, deadline=5)
    assert "pass --trust-config or check the network" in info.value.render()
    assert "TUFError" in info.value.message and info.value.exit_code == 1
    with pytest.raises(SigningError, match="trust root"):
        sign_keyless(STATEMENT, token="t", trust_config=None, deadline=5)
    assert calls == ["production", "production"]

    # `trace verify-bundle` on a keyless bundle without --trust-config: the same message as a
    # failed check (signature.trust-root) in the verdict, exit 1
    fake = shared()
    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "payload").mkdir()
    (bundle / "statement.json").write_bytes(STATEMENT)
    trust = fake.write_trust_config(tmp_path / "trust.json")
    sig = sign_keyless(STATEMENT, token=fake.token(), trust_config=trust, deadline=20)
    (bundle / "statement.sigstore.json").write_text(sig)
    capsys.readouterr()
    assert main(["verify-bundle", str(bundle), "--json"]) == 1
    out = capsys.readouterr()
    doc = json.loads(out.out)  # --json prints a verdict even without a trust root
    assert "signature.trust-root" in doc["reasons"] and "Traceback" not in out.err
    assert any("pass --trust-config or check the network" in c["detail"] for c in doc["checks"])


def test_key_mode_bundle_round_trip(tmp_path: Path) -> None:
    priv, pub, hint = keygen(tmp_path / "k")
    raw = sign_with_key(STATEMENT, PAYLOAD_TYPE, load_private_key(priv))
    doc = json.loads(raw)
    assert doc["mediaType"] == "application/vnd.dev.sigstore.bundle.v0.3+json"
    assert doc["verificationMaterial"] == {"publicKey": {"hint": hint}, "tlogEntries": []}
    assert base64.b64decode(doc["dsseEnvelope"]["payload"]) == STATEMENT
    kb = parse_key_bundle(raw)
    assert kb is not None
    assert verify_envelope_with_key(kb.dsseEnvelope, load_public_key(pub))
    _, other_pub, _ = keygen(tmp_path / "other")
    assert not verify_envelope_with_key(kb.dsseEnvelope, load_public_key(other_pub))
    # the same sigstore_models schema other clients read accepts it
    from sigstore_models.bundle.v1 import Bundle as BundleModel

    parsed = BundleModel.from_json(raw)
    assert parsed.verification_material.public_key is not None


def test_keyless_sign_through_fake_sigstore(fake: FakeSigstore, trust_config: Path) -> None:
    from sigstore.models import Bundle

    from engine.signing.keyless import sign_keyless

    raw = sign_keyless(STATEMENT, token=fake.token(), trust_config=trust_config, deadline=20)
    bundle = Bundle.from_json(raw)
    assert bundle.log_entry._inner.kind_version.kind == "dsse"
    assert base64.b64decode(json.loads(raw)["dsseEnvelope"]["payload"]) == STATEMENT


def test_keyless_rejects_a_token_fulcio_refuses(fake: FakeSigstore, trust_config: Path) -> None:
    import jwt

    from engine.signing.keyless import sign_keyless

    now = int(time.time())
    forged = jwt.encode(
        {"iss": "https://x", "sub": "s", "aud": "sigstore", "iat": now, "exp": now + 60},
        "not-the-fake-secret-at-all-0123456789",
        algorithm="HS256",
    )
    with pytest.raises(SigningError, match="keyless signing failed"):
        sign_keyless(STATEMENT, token=forged, trust_config=trust_config, deadline=20)


@pytest.fixture
def github_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    for var in list(os.environ):
        if var.startswith(("ACTIONS_", "GITHUB_", "GITLAB", "BUILDKITE", "CIRCLECI", "GOOGLE_")):
            monkeypatch.delenv(var)
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    yield monkeypatch


def test_ambient_github_oidc_through_loopback_endpoint(
    fake: FakeSigstore, trust_config: Path, github_env: pytest.MonkeyPatch
) -> None:
    from cryptography import x509
    from sigstore.models import Bundle

    from engine.signing.keyless import sign_keyless
    from engine.signing.oidc import identity_token

    github_env.setenv("ACTIONS_ID_TOKEN_REQUEST_URL", fake.url + "/oidc/token")
    github_env.setenv("ACTIONS_ID_TOKEN_REQUEST_TOKEN", REQUEST_TOKEN)
    token = identity_token(None, deadline=10)
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
    assert claims["iss"] == GITHUB_ISSUER and claims["aud"] == "sigstore"
    raw = sign_keyless(STATEMENT, token=token, trust_config=trust_config, deadline=20)
    cert = Bundle.from_json(raw).signing_certificate
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.UniformResourceIdentifier) == [
        "https://github.com/trace/fork/.github/workflows/verify.yml@refs/heads/main"
    ]


def test_github_job_without_id_token_permission_gets_clear_message(
    github_env: pytest.MonkeyPatch,
) -> None:
    from engine.signing.oidc import identity_token

    with pytest.raises(SigningError) as info:
        identity_token(None, deadline=10)
    assert "id-token: write" in info.value.render()


def test_no_token_anywhere_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.signing.oidc import identity_token

    for var in list(os.environ):
        if var.startswith(("ACTIONS_", "GITHUB_", "GITLAB", "BUILDKITE", "CIRCLECI", "GOOGLE_")):
            monkeypatch.delenv(var)
    with pytest.raises(SigningError) as info:
        identity_token(None, deadline=10)
    assert "--identity-token" in info.value.render()


def test_silent_fulcio_hits_the_deadline(fake: FakeSigstore, tmp_path: Path) -> None:
    """A server that accepts connections and never answers: signing gives up on time."""
    from engine.signing.keyless import sign_keyless

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        cfg = fake.trust_config()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        cfg["signingConfig"]["caUrls"][0]["url"] = url
        path = tmp_path / "silent.json"
        path.write_text(json.dumps(cfg))
        start = time.monotonic()
        with pytest.raises(SigningError, match="Fulcio certificate request did not answer"):
            sign_keyless(STATEMENT, token=fake.token(), trust_config=path, deadline=1.0)
        assert time.monotonic() - start < 5
    finally:
        silent.close()


def test_signing_error_is_part_of_the_one_hierarchy() -> None:
    from engine import errors

    assert SigningError is errors.SigningError
    assert issubclass(SigningError, errors.TraceError) and SigningError.exit_code == 1
    rendered = SigningError("no key", file="k.pem", hint="run trace keygen").render()
    assert rendered == "k.pem: no key\n  hint: run trace keygen"
