"""Fake Rekor's log: an RFC 6962 Merkle tree, inclusion proofs, signed checkpoints and SETs.

Test code only. The tree starts with a few filler leaves so that inclusion proofs are never
trivial. Entries are `dsse/0.0.1` bodies in the canonical (RFC 8785) form Rekor stores.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from typing import Any

import rfc8785
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from .ca import key_id

TREE_ID = 1234567890123456789
FILLER_LEAVES = 5


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def tree_hash(leaves: list[bytes]) -> bytes:
    if len(leaves) == 1:
        return leaves[0]
    k = _split(len(leaves))
    return node_hash(tree_hash(leaves[:k]), tree_hash(leaves[k:]))


def inclusion_path(m: int, leaves: list[bytes]) -> list[bytes]:
    """RFC 6962 PATH(m, D[n]), bottom-up."""
    if len(leaves) <= 1:
        return []
    k = _split(len(leaves))
    if m < k:
        return [*inclusion_path(m, leaves[:k]), tree_hash(leaves[k:])]
    return [*inclusion_path(m - k, leaves[k:]), tree_hash(leaves[:k])]


class LogError(ValueError):
    pass


class FakeLog:
    def __init__(self, base_url: str, signer_name: str) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.log_id = key_id(self.key.public_key())
        self.base_url = base_url
        self.signer_name = signer_name  # must be a substring of base_url
        assert signer_name in base_url
        self._leaves = [leaf_hash(f"filler {i}".encode()) for i in range(FILLER_LEAVES)]
        self._lock = threading.Lock()

    def _sign(self, data: bytes) -> bytes:
        return self.key.sign(data, ec.ECDSA(hashes.SHA256()))

    def checkpoint(self, size: int, root: bytes) -> str:
        note = f"{self.signer_name} - {TREE_ID}\n{size}\n{base64.b64encode(root).decode()}\n"
        sig = base64.b64encode(self.log_id[:4] + self._sign(note.encode())).decode()
        return f"{note}\n\u2014 {self.signer_name} {sig}\n"

    @staticmethod
    def dsse_body(proposed: dict[str, Any]) -> bytes:
        """The stored dsse/0.0.1 body for a proposed entry; checks the envelope's signature."""
        if proposed.get("kind") != "dsse" or proposed.get("apiVersion") != "0.0.1":
            raise LogError("only dsse/0.0.1 entries are accepted")
        content = proposed["spec"]["proposedContent"]
        envelope_text: str = content["envelope"]
        envelope = json.loads(envelope_text)
        payload = base64.b64decode(envelope["payload"])
        ptype: str = envelope["payloadType"]
        pae = b"DSSEv1 %d %s %d %s" % (len(ptype), ptype.encode(), len(payload), payload)
        signatures = []
        for sig, verifier in zip(envelope["signatures"], content["verifiers"], strict=True):
            cert = x509.load_pem_x509_certificate(base64.b64decode(verifier))
            pub = cert.public_key()
            assert isinstance(pub, ec.EllipticCurvePublicKey)
            pub.verify(base64.b64decode(sig["sig"]), pae, ec.ECDSA(hashes.SHA256()))
            signatures.append({"signature": sig["sig"], "verifier": verifier})
        body = {
            "apiVersion": "0.0.1",
            "kind": "dsse",
            "spec": {
                "envelopeHash": {
                    "algorithm": "sha256",
                    "value": hashlib.sha256(envelope_text.encode()).hexdigest(),
                },
                "payloadHash": {
                    "algorithm": "sha256",
                    "value": hashlib.sha256(payload).hexdigest(),
                },
                "signatures": signatures,
            },
        }
        return bytes(rfc8785.dumps(body))

    def append(self, proposed: dict[str, Any]) -> dict[str, Any]:
        body = self.dsse_body(proposed)
        with self._lock:
            self._leaves.append(leaf_hash(body))
            leaves = list(self._leaves)
        index = len(leaves) - 1
        root = tree_hash(leaves)
        integrated = int(time.time())
        body_b64 = base64.b64encode(body).decode()
        set_payload = {
            "body": body_b64,
            "integratedTime": integrated,
            "logID": self.log_id.hex(),
            "logIndex": index,
        }
        set_sig = base64.b64encode(self._sign(bytes(rfc8785.dumps(set_payload)))).decode()
        entry = {
            "body": body_b64,
            "integratedTime": integrated,
            "logID": self.log_id.hex(),
            "logIndex": index,
            "verification": {
                "inclusionProof": {
                    "checkpoint": self.checkpoint(len(leaves), root),
                    "hashes": [h.hex() for h in inclusion_path(index, leaves)],
                    "logIndex": index,
                    "rootHash": root.hex(),
                    "treeSize": len(leaves),
                },
                "signedEntryTimestamp": set_sig,
            },
        }
        return {leaf_hash(body).hex(): entry}
