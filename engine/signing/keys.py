"""Local ECDSA P-256 key pairs for offline signing (`trace keygen`), and their hints.

Bad input (a path that exists, a file that is not a usable key) is an InputError (exit 2).
The private key is PKCS#8 PEM (optionally encrypted with TRACE_KEY_PASSWORD), created with mode
0600 through O_EXCL, so an existing key is never overwritten; the public key is SPKI PEM. A key's
hint is the hex sha256 of its DER SubjectPublicKeyInfo (the RFC 6962 key id, as Sigstore uses).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from engine.errors import InputError
from engine.paths import cli

PASSWORD_ENV = "TRACE_KEY_PASSWORD"


def key_hint(public_key: ec.EllipticCurvePublicKey) -> str:
    der = public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return hashlib.sha256(der).hexdigest()


def _create_exclusive(path: Path, data: bytes, mode: int) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        raise InputError(
            f"{path} already exists",
            file=path,
            hint="keys are never overwritten; pick another path",
        ) from None
    try:
        os.fchmod(fd, mode)
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def keygen(private_path: Path, public_path: Path | None = None) -> tuple[Path, Path, str]:
    """Write a new pair; returns (private path, public path, hint)."""
    public_path = public_path or private_path.with_name(private_path.name + ".pub")
    for p in (private_path, public_path):
        if p.exists() or p.is_symlink():
            raise InputError(
                f"{p} already exists", file=p, hint="keys are never overwritten; pick another path"
            )
    private_path.parent.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    password = os.environ.get(PASSWORD_ENV)
    enc: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode())
        if password
        else serialization.NoEncryption()
    )
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc)
    pub = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    _create_exclusive(private_path, pem, 0o600)
    try:
        _create_exclusive(public_path, pub, 0o644)
    except InputError:
        private_path.unlink()
        raise
    return private_path, public_path, key_hint(key.public_key())


def load_private_key(path: Path) -> ec.EllipticCurvePrivateKey:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read key: {exc.strerror}", file=path) from None
    password = os.environ.get(PASSWORD_ENV)
    try:
        key = serialization.load_pem_private_key(data, password.encode() if password else None)
    except (ValueError, TypeError) as exc:
        raise InputError(
            f"not a usable private key: {exc}",
            file=path,
            hint=f"use a key from `{cli('keygen')}`; set {PASSWORD_ENV} if it is encrypted",
        ) from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
        raise InputError(
            "the key is not an ECDSA P-256 key", file=path, hint=f"use `{cli('keygen')}`"
        )
    return key


def load_public_key(path: Path) -> ec.EllipticCurvePublicKey:
    try:
        key = serialization.load_pem_public_key(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise InputError(
            f"not a usable public key: {exc}",
            file=path,
            hint=f"pass the PRIVATE.pub file `{cli('keygen')}` wrote (SPKI PEM)",
        ) from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name != "secp256r1":
        raise InputError(
            "the key is not an ECDSA P-256 public key", file=path, hint=f"use `{cli('keygen')}`"
        )
    return key
