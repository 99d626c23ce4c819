"""The maintainers who may sign waivers: `maintainers.toml` (`trace.maintainers/v1`) of the fork.

```toml
[policy]
name = "trace-maintainers"
version = "1.0.0"
schema = "trace.maintainers/v1"

[[maintainers]]
name = "alice"                    # shown as the waiver's approved_by
public_key = \"\"\"
-----BEGIN PUBLIC KEY-----
...                               # the PRIVATE.pub `trace keygen` wrote, inline
-----END PUBLIC KEY-----
\"\"\"
```

The key is inline (not a path) so that the file's sha256, which the decision and the bundle pin,
covers the keys themselves. Which file: `--maintainers FILE`, else the fork's own
`FORK/trace/policy/maintainers.toml`, else `maintainers.toml` beside the signing policy (the
shipped one lists nobody: no waiver is valid until a fork names its maintainers).
"""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from pydantic import BaseModel, ConfigDict, Field

from engine.errors import PolicyError
from engine.paths import cli
from engine.policy.source import (
    PolicyHeader,
    PolicyRef,
    Strict,
    find_line,
    load_policy,
    ref,
    require_unique,
)
from engine.signing.keys import key_hint

SCHEMA = "trace.maintainers/v1"
FILE = "maintainers.toml"


class Maintainer(Strict):
    name: str = Field(min_length=1, description="who signs (shown as the waiver's approved_by)")
    public_key: str = Field(description="ECDSA P-256 public key, SPKI PEM, inline")


class MaintainersFile(Strict):
    policy: PolicyHeader
    maintainers: list[Maintainer] = Field(default_factory=list)


class Maintainers(BaseModel):
    """The loaded file: key hint -> (name, public key)."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    ref: PolicyRef | None
    keys: dict[str, tuple[str, ec.EllipticCurvePublicKey]]


NOBODY = Maintainers(ref=None, keys={})


def _public_key(pem: str, path: Path, text: str, i: int) -> ec.EllipticCurvePublicKey:
    loc: tuple[str | int, ...] = ("maintainers", i, "public_key")
    try:
        key = serialization.load_pem_public_key(pem.encode())
    except ValueError as exc:
        raise PolicyError(
            f"not a PEM public key: {exc}",
            file=path,
            key=f"maintainers.{i}.public_key",
            line=find_line(text, loc),
            hint=f"paste the PRIVATE.pub file `{cli('keygen')}` wrote",
        ) from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name != "secp256r1":
        raise PolicyError(
            "the key is not an ECDSA P-256 public key",
            file=path,
            key=f"maintainers.{i}.public_key",
            line=find_line(text, loc),
            hint=f"use a key from `{cli('keygen')}`",
        )
    return key


def load_maintainers(path: Path) -> Maintainers:
    spec, text, digest = load_policy(path, MaintainersFile, schema=SCHEMA, what="maintainers file")
    require_unique(
        [m.name for m in spec.maintainers],
        table="maintainers",
        field="name",
        what="maintainer",
        verb="is listed twice",
        path=path,
        text=text,
        hint="list each maintainer once",
    )
    keys: dict[str, tuple[str, ec.EllipticCurvePublicKey]] = {}
    for i, m in enumerate(spec.maintainers):
        key = _public_key(m.public_key, path, text, i)
        keys[key_hint(key)] = (m.name, key)
    return Maintainers(ref=ref(spec.policy, path, digest), keys=keys)


def maintainers_path(given: Path | None, fork: Path | None, signing_policy: Path) -> Path | None:
    """`given`, else the fork's own file, else the one beside the signing policy (or None)."""
    if given is not None:
        return given
    own = fork / "trace" / "policy" / FILE if fork is not None else None
    if own is not None and own.is_file():
        return own
    beside = signing_policy.parent / FILE
    return beside if beside.is_file() else None
