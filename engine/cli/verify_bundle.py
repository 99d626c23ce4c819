"""`trace verify-bundle BUNDLE`: signature, signer, every payload digest, policy versions; also
the options and the verifier `trace report` shares."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.audit.verifier import DEFAULT_IDENTITY

if TYPE_CHECKING:
    from collections.abc import Callable

    from engine.audit.checks import BundleVerdict


def register(sub: Any) -> None:
    v = sub.add_parser(
        "verify-bundle",
        help="verify a bundle: signature, signer, every payload digest, policy versions",
        description="Exit 0 only when every check passes; each failure has a stable reason code.",
    )
    v.add_argument("bundle", type=Path, help="bundle directory")
    v.add_argument("--json", action="store_true", help="print the verdict as JSON")
    add_verify_options(v)
    v.set_defaults(handler=_verify_bundle)


def add_verify_options(v: Any) -> None:
    """The options that say how a bundle is checked (`trace verify-bundle`, `trace report`)."""
    v.add_argument("--replay", action="store_true", help="rebuild the steps and compare")
    v.add_argument(
        "--identity",
        type=Path,
        help=f"signer lock (default: ROOT/{DEFAULT_IDENTITY} if present, else trace's shipped one)",
    )
    v.add_argument("--trust-config", type=Path, help="Sigstore ClientTrustConfig JSON")
    v.add_argument("--key", type=Path, action="append", default=[], help="trusted public key")
    v.add_argument(
        "--root",
        "--fork",
        dest="root",
        type=Path,
        default=None,
        help="the fork the bundle was made in (your checkout): replays run there (default: .), "
        "and its own policy files are accepted when their sha256 is the one the bundle pins",
    )


def verifier_from_args(args: argparse.Namespace) -> Callable[[Path], BundleVerdict]:
    """The library's verifier with the options of `add_verify_options`."""
    from engine.audit.verifier import make_verifier

    return make_verifier(
        root=args.root,
        identity=args.identity,
        keys=args.key,
        trust_config=args.trust_config,
        replay=args.replay,
    )


def _verify_bundle(args: argparse.Namespace) -> int:
    from engine.audit.verdict_print import print_json, print_table

    verdict = verifier_from_args(args)(args.bundle)
    (print_json if args.json else print_table)(verdict)
    return 0 if verdict.passed else 1
