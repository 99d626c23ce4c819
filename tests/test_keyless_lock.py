"""Keyless signing checks the identity lock when it signs, keeps one overall deadline, and
verify-bundle explains (never prints) sigstore's no-op warning and always answers in JSON
(issue 11, item 8). Offline: the fake Fulcio/Rekor of tests/sigstore_fake on 127.0.0.1.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from engine.errors import SigningError
from engine.evidence.bundle import write_bundle
from engine.signing import deadline as deadline_mod
from engine.signing.deadline import Deadline
from engine.signoff.produce import BundleRequest, _sign
from tests.enginekit import verify_bundle_process
from tests.sigstore_fake import TEST_ISSUER, FakeSigstore, shared
from tests.test_bundle_verify import POLICY, assembled, run, write_policy

SIGNER = "signer@trace.test"


@pytest.fixture(scope="module")
def fake() -> FakeSigstore:
    return shared()


def _request(tmp: Path, fake: FakeSigstore, email: str, force: bool = False) -> BundleRequest:
    lock = tmp / "lock" / "signing-identity.json"
    lock.parent.mkdir(exist_ok=True)
    write_policy(lock)  # locks SIGNER via TEST_ISSUER
    return BundleRequest(
        candidate=tmp / "c.toml",
        sign="keyless",
        identity_token=fake.token(email=email),
        trust_config=fake.write_trust_config(tmp / "trust.json"),
        signer_lock=lock,
        force_identity=force,
    )


def test_a_token_outside_the_lock_is_refused_before_signing(
    fake: FakeSigstore, tmp_path: Path
) -> None:
    req = _request(tmp_path, fake, "mallory@trace.test")
    with pytest.raises(SigningError) as err:
        _sign(req, assembled().statement_bytes, POLICY / "signing.toml")
    assert "mallory@trace.test" in err.value.message and "nothing was signed" in err.value.message
    assert SIGNER in err.value.message and "--force-identity" in (err.value.hint or "")


def test_the_locked_identity_signs(fake: FakeSigstore, tmp_path: Path) -> None:
    req = _request(tmp_path, fake, SIGNER)
    sig = _sign(req, assembled().statement_bytes, POLICY / "signing.toml")
    assert json.loads(sig)["mediaType"].startswith("application/vnd.dev.sigstore.bundle")


def test_forced_identity_fails_verification_without_the_no_op_warning(
    fake: FakeSigstore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    req = _request(tmp_path, fake, "mallory@trace.test", force=True)
    asm = assembled()
    sig = _sign(req, asm.statement_bytes, POLICY / "signing.toml")
    bundle = write_bundle(tmp_path / "b", asm, sig)
    assert req.trust_config is not None and req.signer_lock is not None
    caplog.set_level(logging.WARNING)
    v = run(bundle, write_policy(req.signer_lock), req.trust_config)
    assert v.reasons == ["identity.mismatch"], v.checks
    assert "no-op" not in caplog.text and "no verification performed" not in caplog.text
    log = next(c for c in v.checks if c.name == "certificate, SCT, transparency log")
    assert log.ok and "not the locked one" in log.detail


def test_the_fork_signer_checks_the_same_lock(fake: FakeSigstore, tmp_path: Path) -> None:
    """`trace fork`'s keyless signer refuses a token outside the lock of its (merged) policy
    folder as `trace bundle` does (one code path), and signs the locked identity."""
    import argparse

    from engine.fork.one_candidate import Signer

    policy = tmp_path / "policy"
    policy.mkdir()
    write_policy(policy / "signing-identity.json")  # locks SIGNER via TEST_ISSUER
    trust = fake.write_trust_config(tmp_path / "trust.json")

    def signer(email: str, force: bool = False) -> Signer:
        return Signer(
            argparse.Namespace(
                key=None,
                identity_token=fake.token(email=email),
                trust_config=trust,
                no_sign=False,
                signer_lock=None,
                force_identity=force,
            )
        )

    statement = assembled().statement_bytes
    with pytest.raises(SigningError) as err:
        signer("mallory@trace.test").sign(statement, policy)
    assert "nothing was signed" in err.value.message and SIGNER in err.value.message
    sig, how, _ = signer(SIGNER).sign(statement, policy)
    assert how == "keyless" and sig is not None and json.loads(sig)["dsseEnvelope"]
    sig, how, _ = signer("mallory@trace.test", force=True).sign(statement, policy)
    assert how == "keyless" and sig is not None


def test_one_deadline_for_every_signing_step(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(deadline_mod.time, "monotonic", lambda: now[0])
    clock = Deadline(10)
    assert clock.call(lambda: "trust root", "TUF") == "trust root"
    now[0] = 107.0  # the first steps took 7 s: 3 s are left for the rest, not 10 more
    assert clock.left() == 3.0
    now[0] = 110.5
    called: list[str] = []
    with pytest.raises(SigningError, match="had already passed"):
        clock.call(lambda: called.append("rekor"), "Rekor transparency log entry")
    assert called == []


def test_sign_keyless_shares_one_deadline_between_fulcio_and_rekor(
    fake: FakeSigstore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fulcio and Rekor each take 2 s under a 3 s deadline: each alone is within it, together
    they are not. Per-step deadlines (the audit: a slow server took ~4x the deadline) would
    sign; one overall deadline refuses."""
    import time

    import sigstore.sign

    from engine.signing.keyless import sign_keyless

    real = sigstore.sign.Signer

    class Slow(real):  # type: ignore[misc, valid-type]
        def __init__(self, *a: object, **kw: object) -> None:
            time.sleep(2)
            super().__init__(*a, **kw)

        def sign_dsse(self, *a: object, **kw: object) -> object:
            time.sleep(2)
            return super().sign_dsse(*a, **kw)

    monkeypatch.setattr(sigstore.sign, "Signer", Slow)
    trust = fake.write_trust_config(tmp_path / "trust.json")
    with pytest.raises(SigningError, match=r"did not answer within|had already passed"):
        sign_keyless(
            assembled().statement_bytes, token=fake.token(email=SIGNER), trust_config=trust,
            deadline=3.0,
        )  # fmt: skip


def test_json_even_when_the_trust_root_cannot_be_loaded(fake: FakeSigstore, tmp_path: Path) -> None:
    """No --trust-config and no network: production's TUF refresh fails; --json still prints a
    verdict (signature.trust-root), never a bare error."""
    req = _request(tmp_path, fake, SIGNER)
    asm = assembled()
    bundle = write_bundle(tmp_path / "b", asm, _sign(req, asm.statement_bytes, POLICY / "x"))
    assert req.signer_lock is not None
    env = {**os.environ, "HOME": str(tmp_path / "home"), "TRACE_SIGNING_DEADLINE": "5"}
    env.pop("XDG_CACHE_HOME", None)
    env.pop("XDG_DATA_HOME", None)
    rc, out, err = verify_bundle_process(bundle, req.signer_lock, timeout=120, env=env)
    doc = json.loads(out)
    assert rc == 1 and "signature.trust-root" in doc["reasons"], (doc, err)
    assert "Traceback" not in err
    assert TEST_ISSUER  # the fake's issuer is the one the lock names
