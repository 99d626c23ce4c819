"""Command-line options shared by `trace bundle` and `trace verify --bundle` (`--gate`: also
`trace decide`).

Plain argparse only: registering them must keep `trace --help` fast (no pydantic, no sigstore).
`request_from_args` turns them into the library's typed `BundleRequest`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.signoff import DEFAULT_BUILDER

if TYPE_CHECKING:
    from engine.signoff.produce import BundleRequest, Signed


def add_signing_options(p: Any) -> None:
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--sign", action="store_true", help="sign keyless with Sigstore (when the policy allows)"
    )
    mode.add_argument(
        "--key", type=Path, help="sign offline with this private key (when the policy allows)"
    )
    p.add_argument("--identity-token", help="OIDC token for keyless signing (default: CI's)")
    p.add_argument("--trust-config", type=Path, help="Sigstore ClientTrustConfig JSON")
    p.add_argument(
        "--signer-lock",
        type=Path,
        metavar="FILE",
        help="keyless: the identity lock the token must match before anything is signed "
        "(default: signing-identity.json beside the signing policy, else trace's shipped one)",
    )
    p.add_argument(
        "--force-identity",
        action="store_true",
        help="keyless: sign even when the token's identity is not in the lock (verify-bundle "
        "will refuse the bundle with identity.mismatch)",
    )
    p.add_argument(
        "--builder-id", default=DEFAULT_BUILDER, help="SLSA runDetails.builder.id of the bundle"
    )


def add_gate_option(p: Any) -> None:
    """`--gate FILE`, repeatable (`trace bundle`, `trace decide`)."""
    p.add_argument(
        "--gate",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="an extra gate record JSON (trace.gate/v1); repeatable",
    )


def add_policy_options(p: Any) -> None:
    p.add_argument("--routing-policy", type=Path, help="routing policy (default: shipped)")
    p.add_argument(
        "--signing-policy",
        type=Path,
        help="signing policy (default: FORK/trace/policy/signing.toml if present, else shipped)",
    )
    p.add_argument(
        "--waivers",
        type=Path,
        metavar="PATH",
        help="signed waivers: a directory of `trace waive` files, or one (default: none)",
    )
    p.add_argument(
        "--maintainers",
        type=Path,
        metavar="FILE",
        help="who may sign waivers (default: FORK/trace/policy/maintainers.toml, else "
        "maintainers.toml beside the signing policy)",
    )
    p.add_argument(
        "--today", metavar="YYYY-MM-DD", help="decide as of this date (default: today, UTC)"
    )


def request_from_args(args: argparse.Namespace, **fields: object) -> BundleRequest:
    """A request from the shared options plus the command's own."""
    import datetime as dt

    from engine.errors import UsageError
    from engine.signoff.produce import BundleRequest

    sign: Signed = "key" if args.key else "keyless" if args.sign else "no"
    today = None
    if args.today is not None:
        try:
            today = dt.date.fromisoformat(args.today)
        except ValueError:
            raise UsageError(
                f"--today {args.today!r} is not a date", hint="use YYYY-MM-DD"
            ) from None
    return BundleRequest.model_validate(
        {
            "routing_policy": args.routing_policy,
            "signing_policy": args.signing_policy,
            "waivers": args.waivers,
            "maintainers": args.maintainers,
            "today": today,
            "sign": sign,
            "key": args.key,
            "identity_token": args.identity_token,
            "trust_config": args.trust_config,
            "signer_lock": args.signer_lock,
            "force_identity": args.force_identity,
            "builder_id": args.builder_id,
            **fields,
        }
    )
