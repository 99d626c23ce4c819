"""Fake Fulcio's certificate authority: a root, short-lived leaves and RFC 6962 embedded SCTs.

Test code only. The leaf carries what sigstore-python checks: digitalSignature key usage,
the code-signing EKU, the identity as SAN (e-mail or URI), the OIDC issuer as extension
1.3.6.1.4.1.57264.1.1 (raw bytes) and 1.3.6.1.4.1.57264.1.8 (DER UTF8String), and one embedded
SCT signed by the fake CT log over the precertificate TBS (the certificate without its SCT list).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import struct

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID, ObjectIdentifier

OIDC_ISSUER_V1 = ObjectIdentifier("1.3.6.1.4.1.57264.1.1")
OIDC_ISSUER_V2 = ObjectIdentifier("1.3.6.1.4.1.57264.1.8")
SCT_LIST = ObjectIdentifier("1.3.6.1.4.1.11129.2.4.2")

LEAF_LIFETIME = dt.timedelta(minutes=10)


def spki_der(key: ec.EllipticCurvePublicKey) -> bytes:
    return key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def key_id(key: ec.EllipticCurvePublicKey) -> bytes:
    return hashlib.sha256(spki_der(key)).digest()


def _der_len(n: int) -> bytes:
    if n < 0x80:
        return bytes([n])
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(body)]) + body


def der_octet_string(data: bytes) -> bytes:
    return b"\x04" + _der_len(len(data)) + data


def der_utf8_string(text: str) -> bytes:
    data = text.encode()
    return b"\x0c" + _der_len(len(data)) + data


class FakeCA:
    def __init__(self) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.ct_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "trace tests"),
                x509.NameAttribute(NameOID.COMMON_NAME, "trace-fake-fulcio"),
            ]
        )
        now = dt.datetime.now(dt.UTC)
        ski = x509.SubjectKeyIdentifier.from_public_key(self.key.public_key())
        self.root = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + dt.timedelta(days=365))
            .add_extension(x509.BasicConstraints(ca=True, path_length=1), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=False,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(ski, critical=False)
            .sign(self.key, hashes.SHA256())
        )

    def _sct_list(
        self, tbs: bytes, when: dt.datetime, ct_key: ec.EllipticCurvePrivateKey | None = None
    ) -> bytes:
        ts_ms = int(when.timestamp()) * 1000  # whole seconds: exact through float round trips
        issuer_hash = key_id(self.key.public_key())
        signed = (
            struct.pack("!BBQH", 0, 0, ts_ms, 1)  # v1, certificate_timestamp, time, precert_entry
            + issuer_hash
            + len(tbs).to_bytes(3, "big")
            + tbs
            + struct.pack("!H", 0)  # no extensions
        )
        sig = (ct_key or self.ct_key).sign(signed, ec.ECDSA(hashes.SHA256()))
        sct = (
            struct.pack("!B", 0)
            + key_id(self.ct_key.public_key())
            + struct.pack("!QH", ts_ms, 0)
            + struct.pack("!BBH", 4, 3, len(sig))  # sha256, ecdsa
            + sig
        )
        return struct.pack("!HH", len(sct) + 2, len(sct)) + sct

    def issue(
        self,
        public_key: ec.EllipticCurvePublicKey,
        *,
        san: x509.GeneralName,
        issuer: str,
        sct_key: ec.EllipticCurvePrivateKey | None = None,
        valid: tuple[dt.datetime, dt.datetime] | None = None,
    ) -> x509.Certificate:
        """A leaf for `public_key`; `sct_key` signs its SCT instead of the CT log (a bad SCT);
        `valid` overrides the validity window (default: from 30 s ago for LEAF_LIFETIME)."""
        now = dt.datetime.now(dt.UTC).replace(microsecond=0)
        start, end = valid or (now - dt.timedelta(seconds=30), now + LEAF_LIFETIME)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([]))
            .issuer_name(self.root.subject)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), False
            )
            .add_extension(x509.SubjectAlternativeName([san]), critical=True)
            .add_extension(x509.UnrecognizedExtension(OIDC_ISSUER_V1, issuer.encode()), False)
            .add_extension(
                x509.UnrecognizedExtension(OIDC_ISSUER_V2, der_utf8_string(issuer)), False
            )
        )
        precert = builder.sign(self.key, hashes.SHA256())
        scts = self._sct_list(precert.tbs_certificate_bytes, now, sct_key)
        leaf = builder.add_extension(
            x509.UnrecognizedExtension(SCT_LIST, der_octet_string(scts)), False
        ).sign(self.key, hashes.SHA256())
        assert leaf.tbs_precertificate_bytes == precert.tbs_certificate_bytes
        return leaf
