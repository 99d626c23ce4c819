"""DSSE v1: the pre-authentication encoding and the envelope (as Sigstore bundles carry it)."""

from __future__ import annotations

import base64

from pydantic import BaseModel, ConfigDict, Field


def pae(payload_type: str, body: bytes) -> bytes:
    """PAE(type, body) = "DSSEv1" SP len(type) SP type SP len(body) SP body."""
    t = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(body), body)


class Signature(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sig: str = Field(description="base64 signature over PAE")
    keyid: str = ""


class Envelope(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    payload: str = Field(description="base64 payload")
    payloadType: str
    signatures: list[Signature] = Field(min_length=1)

    def payload_bytes(self) -> bytes:
        return base64.b64decode(self.payload, validate=True)

    def pae(self) -> bytes:
        return pae(self.payloadType, self.payload_bytes())
