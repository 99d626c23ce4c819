"""Offline signing with a local key: DSSE (ECDSA P-256, SHA-256) in a Sigstore bundle v0.3.

The bundle's verification material is `publicKey: {hint}` with no transparency log entry, the
shape other Sigstore clients verify with the public key (e.g. cosign with `--key` and
`--insecure-ignore-tlog`). sigstore-python's `Bundle.from_json` insists on a certificate, so the
key-mode verify path lives here.
"""

from __future__ import annotations

import base64
import json

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.signing.dsse import Envelope, Signature, pae
from engine.signing.keys import key_hint

BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"


class PublicKeyHint(BaseModel):
    hint: str


class KeyVerificationMaterial(BaseModel):
    model_config = ConfigDict(extra="forbid")

    publicKey: PublicKeyHint
    tlogEntries: list[dict[str, object]] = Field(default_factory=list)


class KeyBundle(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mediaType: str
    verificationMaterial: KeyVerificationMaterial
    dsseEnvelope: Envelope


def sign_with_key(payload: bytes, payload_type: str, key: ec.EllipticCurvePrivateKey) -> str:
    hint = key_hint(key.public_key())
    sig = key.sign(pae(payload_type, payload), ec.ECDSA(hashes.SHA256()))
    bundle = KeyBundle(
        mediaType=BUNDLE_MEDIA_TYPE,
        verificationMaterial=KeyVerificationMaterial(publicKey=PublicKeyHint(hint=hint)),
        dsseEnvelope=Envelope(
            payload=base64.b64encode(payload).decode(),
            payloadType=payload_type,
            signatures=[Signature(sig=base64.b64encode(sig).decode(), keyid=hint)],
        ),
    )
    return json.dumps(bundle.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"


def parse_key_bundle(raw: str | bytes) -> KeyBundle | None:
    """The bundle as a key-mode bundle, or None when it is not one (e.g. it has a certificate)."""
    try:
        return KeyBundle.model_validate_json(raw)
    except ValidationError:
        return None


def verify_envelope_with_key(envelope: Envelope, key: ec.EllipticCurvePublicKey) -> bool:
    if len(envelope.signatures) != 1:
        return False
    try:
        key.verify(
            base64.b64decode(envelope.signatures[0].sig, validate=True),
            envelope.pae(),
            ec.ECDSA(hashes.SHA256()),
        )
    except (InvalidSignature, ValueError):
        return False
    return True
