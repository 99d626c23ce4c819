"""A waiver a maintainer signs: a DSSE-signed statement (key mode, the shape of
engine.signing.keymode: a Sigstore bundle v0.3 with a public-key hint) binding the candidate
id, the digest of the candidate's patch, the reason code, the justification, the signer's key
and the day it was signed.

`check_signed(raw, name, trust)` says whether such a file is a valid waiver here: it parses,
its payload type and statement are a waiver's, its signer is a maintainer the fork's
`maintainers.toml` lists and not trace's own signing key, the signature verifies, the code is
catalogued and waivable, and the patch digest is the candidate's current one. Anything else is
a reason to ignore the file (a warning), never an error: an invalid waiver lifts nothing.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from cryptography.hazmat.primitives.asymmetric import ec
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.policy.maintainers import Maintainers
from engine.policy.reasons import Catalogue
from engine.policy.waivers import Waiver

if TYPE_CHECKING:
    from engine.candidate import Candidate

PAYLOAD_TYPE = "application/vnd.trace.waiver+json"
SCHEMA = "trace.waiver/v2"
BUNDLE_DIR = "waivers"  # payload/waivers/<reason>.json: each waiver of the candidate, as signed


class WaiverStatement(BaseModel):
    """What the maintainer signs."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    schema_: Literal["trace.waiver/v2"] = Field(default="trace.waiver/v2", alias="schema")
    candidate: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    patch_sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="patch_digest() of it")
    reason: str
    justification: str = Field(min_length=20)
    signer: str = Field(description="the key hint (sha256 of the SPKI DER) of the signer")
    date: dt.date = Field(description="the day it was signed")
    expires: dt.date = Field(description="last day it applies (inclusive)")

    def to_bytes(self) -> bytes:
        doc = self.model_dump(mode="json", by_alias=True)
        return (json.dumps(doc, sort_keys=True, indent=2) + "\n").encode()


class WaiverTrust(BaseModel):
    """What a waiver is checked against: the maintainers, the keys that may never sign one
    (hint -> why), and each candidate's current patch digest."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    maintainers: Maintainers
    forbidden: dict[str, str] = Field(default_factory=dict)
    patches: dict[str, str] = Field(default_factory=dict)


def patch_digest(diffs: Sequence[bytes]) -> str:
    """The candidate's patch, as a waiver binds it: over each patch in canonical `-U0` form (the
    form the bundle carries, so verify-bundle recomputes it from payload/patches/)."""
    h = hashlib.sha256()
    for d in diffs:
        h.update(hashlib.sha256(d).hexdigest().encode() + b"\n")
    return h.hexdigest()


def sign_statement(statement: WaiverStatement, key: ec.EllipticCurvePrivateKey) -> str:
    from engine.signing.keymode import sign_with_key

    return sign_with_key(statement.to_bytes(), PAYLOAD_TYPE, key)


class Refused(BaseModel):
    """Why a waiver file is ignored, and the candidate it names when that could be read."""

    model_config = ConfigDict(frozen=True)

    why: str
    candidate: str | None = None


def check_signed(raw: bytes, trust: WaiverTrust, catalogue: Catalogue) -> Waiver | Refused | None:
    """The waiver `raw` carries, or why it is ignored (see the module docstring); None for a
    signed waiver of a candidate that is not being decided (it concerns another decision)."""
    got = _check(raw, trust, catalogue)
    other = isinstance(got, Refused) and got.candidate not in (None, *trust.patches)
    return None if other else got


def _check(raw: bytes, trust: WaiverTrust, catalogue: Catalogue) -> Waiver | Refused:
    from engine.signing.keymode import parse_key_bundle, verify_envelope_with_key

    bundle = parse_key_bundle(raw)
    if bundle is None:
        return Refused(why="unsigned: not a key-signed waiver (write one with `trace waive`)")
    env = bundle.dsseEnvelope
    if env.payloadType != PAYLOAD_TYPE:
        return Refused(why=f"payload type {env.payloadType!r} is not a waiver's ({PAYLOAD_TYPE})")
    try:
        st = WaiverStatement.model_validate_json(env.payload_bytes())
    except (ValidationError, ValueError) as exc:
        return Refused(why=f"not a waiver statement ({str(exc).splitlines()[0]})")
    hint = bundle.verificationMaterial.publicKey.hint
    cand = st.candidate
    if hint in trust.forbidden:
        why = f"signed by {trust.forbidden[hint]}: a waiver needs a maintainer's signature"
        return Refused(why=why, candidate=cand)
    if hint not in trust.maintainers.keys:
        ref = trust.maintainers.ref
        where = f"{ref.name} {ref.version}" if ref else "none given: it lists nobody"
        why = f"signed by key {hint[:16]}…, which the maintainers policy ({where}) does not list"
        return Refused(why=why, candidate=cand)
    who, key = trust.maintainers.keys[hint]
    if st.signer != hint or not verify_envelope_with_key(env, key):
        why = f"the signature does not verify with {who}'s key (the file was changed)"
        return Refused(why=why, candidate=cand)
    spec = catalogue.get(st.reason)
    if spec is None or not spec.waivable:
        why = f"reason '{st.reason}' is not a waivable code of the catalogue"
        return Refused(why=why, candidate=cand)
    if trust.patches.get(cand) != st.patch_sha256:
        why = "stale: the candidate's patch changed since the waiver was signed"
        return Refused(why=why, candidate=cand)
    return Waiver(
        candidate=st.candidate,
        reason=st.reason,
        justification=st.justification,
        expires=st.expires,
        approved_by=who,
        patch_sha256=st.patch_sha256,
        signer=hint,
        signed_on=st.date,
        file=f"{BUNDLE_DIR}/{st.reason}.json",
    )


def candidate_patch(candidate: Candidate) -> str:
    """patch_digest() of the candidate's patch files, in canonical form."""
    from engine.evidence.payload import canonical_diff

    return patch_digest(
        [canonical_diff(candidate.file(p).read_bytes()) for p in candidate.spec.patches]
    )


def trace_keys(signing_policy: Path) -> dict[str, str]:
    """The keys of trace's own signing identity (the signer lock beside the signing policy, else
    the shipped one): hint -> why it may not sign a waiver."""
    from engine.audit.identity import load_identity_policy, signer_lock

    lock = signer_lock(None, signing_policy)
    why = f"trace's own signing key (listed in {lock.name})"
    return dict.fromkeys(load_identity_policy(lock).keys, why)


def waiver_trust(
    *,
    signing_policy: Path,
    fork: Path | None,
    candidate: Candidate | None,
    maintainers: Path | None = None,
    bundle_key: str | None = None,
) -> WaiverTrust:
    """What waivers are checked against when deciding `candidate` under `signing_policy`;
    `bundle_key`: the hint of the key about to sign the bundle (it may not sign a waiver)."""
    from engine.policy.maintainers import NOBODY, load_maintainers, maintainers_path

    found = maintainers_path(maintainers, fork, signing_policy)
    forbidden = trace_keys(signing_policy)
    if bundle_key is not None:
        forbidden[bundle_key] = "the key that signs this bundle"
    patches = {candidate.spec.id: candidate_patch(candidate)} if candidate is not None else {}
    return WaiverTrust(
        maintainers=load_maintainers(found) if found is not None else NOBODY,
        forbidden=forbidden,
        patches=patches,
    )
