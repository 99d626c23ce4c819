"""Checking statement.sigstore.json: who signed, and that the signature and its log entry hold.

Keyless: the DSSE signature against the certificate key, the signer (SAN + OIDC issuer) against
the identity lock, then sigstore-python's `Verifier.verify_dsse` for the certificate chain at the
log's time, the SCT, the inclusion proof + checkpoint + signed entry timestamp, and the entry's
agreement with the envelope. Its errors are mapped to this command's reason codes.
Before sigstore runs, the log's integrated time is checked against the certificate's validity
(`signature.time`): sigstore verifies the chain *at* that time first, so an entry logged after
the short-lived certificate expired would otherwise surface as a chain error.
Key mode: the key hint must name a trusted key, and the DSSE signature must verify with it.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from pydantic import BaseModel, ValidationError

from engine.audit.identity import IdentityPolicy, KeylessSigner
from engine.errors import SigningError
from engine.signing.deadline import DEFAULT_SECONDS
from engine.signing.dsse import Envelope
from engine.signing.keymode import parse_key_bundle, verify_envelope_with_key

# the Sigstore bundle v0.3 media types (sigstore-js rejects any other, and so does this)
MEDIA_TYPES = (
    "application/vnd.dev.sigstore.bundle.v0.3+json",
    "application/vnd.dev.sigstore.bundle+json;version=0.3",
)
OIDC_ISSUER_V1 = x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.1")
OIDC_ISSUER_V2 = x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.8")


class Check(BaseModel):
    name: str
    ok: bool
    reason: str | None = None
    detail: str = ""


class SignatureResult(BaseModel):
    mode: str  # "keyless" | "key" | "none"
    checks: list[Check]
    envelope: Envelope | None = None
    signer: dict[str, str] = {}


def _fail(name: str, reason: str, detail: str) -> Check:
    return Check(name=name, ok=False, reason=reason, detail=detail)


def _ok(name: str, detail: str = "") -> Check:
    return Check(name=name, ok=True, detail=detail)


# sigstore-python error text -> reason code (first match wins; order matters)
_SIGSTORE_ERRORS: tuple[tuple[str, str], ...] = (
    ("DSSE: invalid signature", "signature.invalid"),
    ("invalid log entry", "signature.tlog"),  # inclusion proof, checkpoint, SET
    ("failed to verify SCT", "signature.sct"),
    ("expired at time of signing", "signature.time"),
    ("sources of verified time", "signature.time"),
    ("certificate chain", "signature.certificate"),
    ("SCT", "signature.sct"),
    ("log entry", "signature.tlog"),
    ("inclusion", "signature.tlog"),
    ("checkpoint", "signature.tlog"),
)


def _map_sigstore_error(text: str) -> str:
    for needle, code in _SIGSTORE_ERRORS:
        if needle in text:
            return code
    return "signature.invalid"


def _cert_identity(cert: x509.Certificate) -> tuple[list[str], str | None]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        sans = [*san.get_values_for_type(x509.RFC822Name)]
        sans += san.get_values_for_type(x509.UniformResourceIdentifier)
    except x509.ExtensionNotFound:
        sans = []
    issuer: str | None = None
    try:
        v2 = cert.extensions.get_extension_for_oid(OIDC_ISSUER_V2).value
        assert isinstance(v2, x509.UnrecognizedExtension)
        der = v2.value
        if der[:1] == b"\x0c":  # UTF8String; short or long form length
            n = der[1]
            start = 2 if n < 0x80 else 2 + (n & 0x7F)
            issuer = der[start:].decode()
    except x509.ExtensionNotFound:
        pass
    if issuer is None:
        try:
            v1 = cert.extensions.get_extension_for_oid(OIDC_ISSUER_V1).value
            assert isinstance(v1, x509.UnrecognizedExtension)
            issuer = v1.value.decode()
        except x509.ExtensionNotFound:
            pass
    return sans, issuer


def _identity_check(
    sans: list[str], issuer: str | None, policy: IdentityPolicy
) -> tuple[Check, KeylessSigner | None]:
    named = [s for s in policy.keyless if s.identity in sans]
    if not named:
        return _fail(
            "signer identity",
            "identity.mismatch",
            f"signed by {', '.join(sans) or '(no SAN)'}; {policy.path.name} accepts "
            + (", ".join(s.identity for s in policy.keyless) or "no keyless signer"),
        ), None
    for s in named:
        if s.issuer == issuer:
            return _ok("signer identity", f"{s.identity} via {s.issuer}"), s
    return _fail(
        "signer identity",
        "identity.issuer",
        f"{named[0].identity} was issued by {issuer}; the policy locks "
        + ", ".join(s.issuer for s in named),
    ), None


def _time_check(bundle: object, cert: x509.Certificate) -> Check:
    """The log entry's integrated time must lie within the certificate's validity."""
    inner = getattr(getattr(bundle, "log_entry", None), "_inner", None)
    raw = getattr(inner, "integrated_time", None)
    try:
        when = dt.datetime.fromtimestamp(int(raw), dt.UTC) if raw is not None else None
    except (TypeError, ValueError, OverflowError):
        when = None
    if when is None:
        return _fail("log time within certificate validity", "signature.time", "no log time")
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    detail = (
        f"logged {when.isoformat()}, certificate valid {start.isoformat()} to {end.isoformat()}"
    )
    if start <= when <= end:
        return _ok("log time within certificate validity", detail)
    return _fail("log time within certificate validity", "signature.time", detail)


def verify_keyless(
    raw: str, policy: IdentityPolicy, trust_config: Path | None, deadline: float
) -> SignatureResult:
    from sigstore.errors import Error as SigstoreError
    from sigstore.models import Bundle, ClientTrustConfig
    from sigstore.verify import Verifier
    from sigstore.verify.policy import Identity, UnsafeNoOp

    from engine.signing.keyless import load_trust_config

    checks: list[Check] = []
    try:
        bundle = Bundle.from_json(raw)
        envelope = Envelope.model_validate(json.loads(raw)["dsseEnvelope"])
    except (SigstoreError, ValidationError, KeyError, ValueError) as exc:
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return SignatureResult(
            mode="keyless", checks=[_fail("signature", "signature.malformed", detail)]
        )
    cert = bundle.signing_certificate
    sans, issuer = _cert_identity(cert)
    signer = {"mode": "keyless", "identity": ", ".join(sans), "issuer": issuer or ""}

    pub = cert.public_key()
    if isinstance(pub, ec.EllipticCurvePublicKey) and verify_envelope_with_key(envelope, pub):
        checks.append(_ok("DSSE signature", "verifies with the certificate's key"))
    else:
        checks.append(
            _fail("DSSE signature", "signature.invalid", "does not verify with the cert's key")
        )

    id_check, matched = _identity_check(sans, issuer, policy)
    checks.append(id_check)
    time_check = _time_check(bundle, cert)
    checks.append(time_check)
    if not time_check.ok:  # sigstore would only report the chain as invalid at that time
        return SignatureResult(mode="keyless", checks=checks, envelope=envelope, signer=signer)

    try:
        config = load_trust_config(trust_config, deadline=deadline)
    except SigningError as exc:  # a verdict (and --json's JSON) even without a trust root
        checks.append(
            _fail("certificate, SCT, transparency log", "signature.trust-root", exc.render())
        )
        return SignatureResult(mode="keyless", checks=checks, envelope=envelope, signer=signer)
    assert isinstance(config, ClientTrustConfig)
    # An identity outside the lock already failed above (identity.mismatch); the chain, SCT and
    # log are still checked, under sigstore's no-op identity policy, whose "no verification
    # performed" warning is about the identity only: it is silenced, this check explains it.
    sig_policy = (
        Identity(identity=matched.identity, issuer=matched.issuer) if matched else UnsafeNoOp()
    )
    noop = logging.getLogger("sigstore.verify.policy")
    quiet = _DropNoOpWarning()
    noop.addFilter(quiet)
    try:
        Verifier(trusted_root=config.trusted_root).verify_dsse(bundle, sig_policy)
    except SigstoreError as exc:
        text = str(exc)
        code = _map_sigstore_error(text)
        # the DSSE check above already reports a bad signature under its own name
        if not (code == "signature.invalid" and not checks[0].ok):
            checks.append(_fail("certificate, SCT, transparency log", code, text))
    else:
        unchecked = "" if matched else " (the signer's identity is not the locked one: see above)"
        checks.append(
            _ok(
                "certificate, SCT, transparency log",
                f"chain, SCT, inclusion proof, checkpoint and entry time verified "
                f"(log index {bundle.log_entry._inner.log_index}){unchecked}",
            )
        )
    finally:
        noop.removeFilter(quiet)
    return SignatureResult(mode="keyless", checks=checks, envelope=envelope, signer=signer)


class _DropNoOpWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "no-op" not in record.getMessage()


def verify_key_mode(
    raw: str, policy: IdentityPolicy, extra_keys: dict[str, ec.EllipticCurvePublicKey]
) -> SignatureResult | None:
    kb = parse_key_bundle(raw)
    if kb is None:
        return None
    hint = kb.verificationMaterial.publicKey.hint
    keys = {**policy.keys, **extra_keys}
    signer = {"mode": "key", "hint": hint}
    # the DSSE keyid is outside the signature: it must say what the (signed-over) hint says
    stray = [sig.keyid for sig in kb.dsseEnvelope.signatures if sig.keyid not in ("", hint)]
    if stray or len(kb.dsseEnvelope.signatures) != 1:
        detail = (
            f"DSSE keyid {stray[0][:16]}… is not the key hint {hint[:16]}…"
            if stray
            else f"{len(kb.dsseEnvelope.signatures)} DSSE signatures, trace writes one"
        )
        check = _fail("signing key", "signature.malformed", detail)
        return SignatureResult(mode="key", checks=[check], envelope=kb.dsseEnvelope, signer=signer)
    key = keys.get(hint)
    if key is None:
        check = _fail(
            "signing key", "signature.unknown-key", f"key {hint[:16]}… is not trusted here"
        )
        return SignatureResult(mode="key", checks=[check], envelope=kb.dsseEnvelope, signer=signer)
    if verify_envelope_with_key(kb.dsseEnvelope, key):
        check = _ok("DSSE signature", f"verifies with trusted key {hint[:16]}…")
    else:
        check = _fail("DSSE signature", "signature.invalid", f"does not verify with {hint[:16]}…")
    return SignatureResult(mode="key", checks=[check], envelope=kb.dsseEnvelope, signer=signer)


def verify_signature(
    raw: str,
    policy: IdentityPolicy,
    *,
    trust_config: Path | None = None,
    extra_keys: dict[str, ec.EllipticCurvePublicKey] | None = None,
    deadline: float = DEFAULT_SECONDS,
) -> SignatureResult:
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        return SignatureResult(
            mode="none", checks=[_fail("signature", "signature.malformed", f"not JSON: {exc}")]
        )
    media = doc.get("mediaType") if isinstance(doc, dict) else None
    if media not in MEDIA_TYPES:
        return SignatureResult(
            mode="none",
            checks=[
                _fail(
                    "signature",
                    "signature.malformed",
                    f"mediaType {media!r} is not a Sigstore bundle v0.3 ({MEDIA_TYPES[0]})",
                )
            ],
        )
    keyed = verify_key_mode(raw, policy, extra_keys or {})
    if keyed is not None:
        return keyed
    return verify_keyless(raw, policy, trust_config, deadline)
