"""The signer lock: policy/signing-identity.json.

```json
{
  "schema": "trace.signing-identity/v1",
  "version": "1.0.0",
  "keyless": [{"identity": "<certificate SAN>", "issuer": "<OIDC issuer URL>"}],
  "keys": [{"name": "release", "public_key": "keys/release.pub"}],
  "policy_versions": {"trace-routing": ["0.9.0"]}
}
```
`keyless`: accepted (identity, issuer) pairs for Sigstore certificates. `keys`: accepted public
keys for key-mode bundles (paths relative to this file). `policy_versions`: older policy versions
that are still accepted in bundles, beside the current `[policy]` versions of the policy/*.toml
files next to this file and the current redaction rules version.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from cryptography.hazmat.primitives.asymmetric import ec
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.errors import InputError, PolicyError, SigningError
from engine.evidence.redact import REDACTION_VERSION
from engine.loader import read_document
from engine.signing.keys import key_hint, load_public_key


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class KeylessSigner(_Strict):
    identity: str = Field(min_length=1, description="certificate SAN (e-mail or URI)")
    issuer: str = Field(min_length=1, description="OIDC issuer URL")


class KeySigner(_Strict):
    name: str
    public_key: str = Field(description="PEM public key file, relative to this policy file")


class IdentityPolicyFile(_Strict):
    schema_: Literal["trace.signing-identity/v1"] = Field(alias="schema")
    version: str
    keyless: list[KeylessSigner] = Field(default_factory=list)
    keys: list[KeySigner] = Field(default_factory=list)
    policy_versions: dict[str, list[str]] = Field(default_factory=dict)


class IdentityPolicy(BaseModel):
    """The loaded lock: accepted keyless signers, key hints -> keys, known policy versions."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    path: Path
    version: str
    keyless: list[KeylessSigner]
    keys: dict[str, ec.EllipticCurvePublicKey]
    known_versions: dict[str, set[str]]


def _policy_headers(directory: Path) -> dict[str, set[str]]:
    from engine.policy.registry import policy_files

    known: dict[str, set[str]] = {}
    for f in policy_files(directory):
        try:
            data = read_document(f, "policy file").data
        except InputError:
            continue  # the policy's own loader reports broken files
        header = data.get("policy", {})
        if isinstance(header, dict) and "name" in header and "version" in header:
            known.setdefault(str(header["name"]), set()).add(str(header["version"]))
    return known


def load_identity_policy(path: Path) -> IdentityPolicy:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PolicyError(
            "signer identity policy not found",
            file=path,
            hint="create policy/signing-identity.json (see engine/audit/identity.py)",
        ) from None
    except json.JSONDecodeError as exc:
        raise PolicyError(f"JSON syntax error: {exc.msg}", file=path, line=exc.lineno) from None
    try:
        spec = IdentityPolicyFile.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise PolicyError(
            err["msg"],
            file=path,
            key=".".join(str(p) for p in err["loc"]),
            hint="see the format in engine/audit/identity.py",
        ) from None
    keys: dict[str, ec.EllipticCurvePublicKey] = {}
    for i, k in enumerate(spec.keys):
        try:
            pub = load_public_key((path.parent / k.public_key).resolve())
        except SigningError as exc:
            raise PolicyError(exc.message, file=path, key=f"keys.{i}.public_key") from None
        keys[key_hint(pub)] = pub
    known = _policy_headers(path.parent)
    for name, versions in spec.policy_versions.items():
        known.setdefault(name, set()).update(versions)
    known.setdefault("redaction", set()).add(REDACTION_VERSION)
    return IdentityPolicy(
        path=path, version=spec.version, keyless=spec.keyless, keys=keys, known_versions=known
    )


def signer_lock(given: Path | None, signing_policy: Path) -> Path:
    """The identity lock keyless signing checks the token against: `--signer-lock`, else the
    one beside the signing policy, else trace's shipped one (what verify-bundle defaults to)."""
    from engine.paths import data_dir

    if given is not None:
        return given
    beside = signing_policy.parent / "signing-identity.json"
    return beside if beside.is_file() else data_dir() / "policy" / "signing-identity.json"


def sign_keyless_locked(
    statement: bytes,
    *,
    token: str,
    trust_config: Path | None,
    lock_path: Path,
    force_identity: bool = False,
) -> str:
    """Keyless signing that refuses, before anything is sent to Fulcio, a token whose identity
    the lock does not name (`force_identity` signs anyway; verify-bundle then refuses it). The
    one keyless path of `trace bundle`, `trace verify --bundle` and `trace fork`."""
    from engine.signing.keyless import sign_keyless

    lock = load_identity_policy(lock_path)

    def accept(identity: str, issuer: str) -> str | None:
        if force_identity or any(
            s.identity == identity and s.issuer == issuer for s in lock.keyless
        ):
            return None
        named = ", ".join(f"{s.identity} ({s.issuer})" for s in lock.keyless) or "no signer"
        return f"{lock_path} locks {named}; nothing was signed"

    return sign_keyless(statement, token=token, trust_config=trust_config, accept=accept)
