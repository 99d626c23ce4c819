"""The sign stage: a statement signed with a key, or keyless with an OIDC token checked against
the signer lock first (`--signer-lock`, else signing-identity.json beside the signing policy)."""

from __future__ import annotations

from pathlib import Path


def key_hint_of(key: Path) -> str:
    """The hint of the private key at `key` (a key that signs bundles may not sign a waiver)."""
    from engine.signing.keys import key_hint, load_private_key

    return key_hint(load_private_key(key).public_key())


def sign_with_key(statement: bytes, key: Path) -> str:
    from engine.evidence.statement import PAYLOAD_TYPE
    from engine.signing.keymode import sign_with_key as sign
    from engine.signing.keys import load_private_key

    return sign(statement, PAYLOAD_TYPE, load_private_key(key))


def sign_keyless(
    statement: bytes,
    token: str,
    *,
    trust_config: Path | None,
    lock: Path | None,
    signing_policy: Path,
    force_identity: bool,
) -> str:
    """Keyless: refused (SigningError) when the token's identity is outside the signer lock."""
    from engine.audit.identity import sign_keyless_locked, signer_lock

    return sign_keyless_locked(
        statement,
        token=token,
        trust_config=trust_config,
        lock_path=signer_lock(lock, signing_policy),
        force_identity=force_identity,
    )
