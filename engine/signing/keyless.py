"""Keyless signing with sigstore-python 4.x: Fulcio certificate, DSSE signature, Rekor entry.

`--trust-config FILE` selects a non-production instance (a ClientTrustConfig JSON: trusted root
plus signing config); without it the production instance is used through its TUF repository.
Every network step (TUF refresh, Fulcio, Rekor) runs under one overall hard deadline (each step
gets what is left of it, so a slow server cannot stretch signing to a multiple of it). A
production trust root that cannot be fetched (no network: sigstore's TUFError) is a SigningError
(exit 1) that says to pass --trust-config; a --trust-config file that cannot be read or parsed
is an InputError (exit 2).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from engine.errors import InputError, SigningError
from engine.signing.deadline import DEFAULT_SECONDS, Deadline

TRUST_HINT = "pass --trust-config or check the network"


def load_trust_config(path: Path | None, *, deadline: float | Deadline = DEFAULT_SECONDS) -> object:
    """A sigstore ClientTrustConfig from `path`, or production's (TUF, under the deadline)."""
    from sigstore.models import ClientTrustConfig

    if path is None:
        clock = deadline if isinstance(deadline, Deadline) else Deadline(deadline)
        try:
            return clock.call(ClientTrustConfig.production, "Sigstore TUF trust root refresh")
        except SigningError as exc:  # the deadline
            raise SigningError(exc.message, hint=TRUST_HINT) from None
        except Exception as exc:  # sigstore's TUFError, or requests/OSError underneath
            raise SigningError(
                "cannot load the production Sigstore trust root (TUF): "
                + (f"{type(exc).__name__}: {exc}".splitlines()[0]),
                hint=TRUST_HINT,
            ) from None
    try:
        return ClientTrustConfig.from_json(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read trust config: {exc.strerror}", file=path) from None
    except Exception as exc:  # sigstore raises pydantic/ValueError/its own Error
        raise InputError(
            f"not a Sigstore ClientTrustConfig: {exc}".splitlines()[0],
            file=path,
            hint="expected mediaType application/vnd.dev.sigstore.clienttrustconfig.v0.1+json "
            "with trustedRoot and signingConfig",
        ) from None


def sign_keyless(
    payload: bytes,
    *,
    token: str,
    trust_config: Path | None,
    deadline: float = DEFAULT_SECONDS,
    accept: Callable[[str, str], str | None] | None = None,
) -> str:
    """Sign the in-toto statement bytes; returns the Sigstore bundle v0.3 JSON.

    `accept(identity, issuer)`: called with the token's identity before anything is sent; a
    message refuses signing (SigningError) — the identity lock is checked at signing time, not
    only by the verifier."""
    from sigstore.dsse import Statement
    from sigstore.errors import Error as SigstoreError
    from sigstore.models import ClientTrustConfig
    from sigstore.oidc import IdentityToken
    from sigstore.sign import Signer, SigningContext

    clock = Deadline(deadline)  # one deadline for the trust root, Fulcio and Rekor together
    config = load_trust_config(trust_config, deadline=clock)
    assert isinstance(config, ClientTrustConfig)
    try:
        identity = IdentityToken(token)
        statement = Statement(payload)
        ctx = SigningContext.from_trust_config(config)
    except SigstoreError as exc:
        raise SigningError(f"cannot start keyless signing: {exc}") from None
    if accept is not None:
        issuer = identity.federated_issuer or identity.issuer
        # what Fulcio puts in the certificate's SAN: the e-mail claim when the token has one
        # (e-mail issuers), else the issuer's identity claim (sigstore's `identity`)
        email = getattr(identity, "_unverified_claims", {}).get("email")
        who = str(email) if email else identity.identity
        refusal = accept(who, issuer)
        if refusal is not None:
            raise SigningError(
                f"the identity token is for {who} ({issuer}): {refusal}",
                hint="sign with an identity the lock names, or add it to the lock first "
                "(--force-identity signs anyway; trace verify-bundle will still refuse it)",
            )

    try:
        signer = clock.call(lambda: Signer(identity, ctx, cache=True), "Fulcio certificate request")
        bundle = clock.call(lambda: signer.sign_dsse(statement), "Rekor transparency log entry")
        return str(bundle.to_json())
    except SigningError:
        raise
    except Exception as exc:  # requests errors, FulcioClientError, RekorClientError, ...
        raise SigningError(
            f"keyless signing failed: {type(exc).__name__}: {exc}",
            hint="check the identity token and the Fulcio/Rekor URLs in the trust config",
        ) from None
