"""CLI: `trace bundle`, `trace keygen`, `trace verify-bundle` (handlers import lazily)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from engine.bundle_verify.checks import BundleVerdict

DEFAULT_IDENTITY = Path("policy/signing-identity.json")


def register(sub: Any) -> None:
    from engine.bundle_verify.options import add_policy_options, add_signing_options

    p = sub.add_parser(
        "bundle",
        help="write a candidate's evidence bundle from its verify result (signed if allowed)",
        description="Assemble the evidence for CANDIDATE from the result `trace verify` wrote "
        "(advisory, upstream reference, patch, rationale, review, reproducer, every step "
        "outcome and run record, every gate record, the routing and signing decisions with "
        "their policy versions, the replay record) into a directory with an in-toto statement "
        "over every file's sha256. With --sign/--key it is signed only when the signing "
        "decision allows; on a deny the reasons are printed, the bundle is written UNSIGNED "
        "for review, and the exit code is 1.",
    )
    p.add_argument("candidate", type=Path, help="candidate TOML file")
    p.add_argument(
        "--fork",
        type=Path,
        help="the package set (default: nearest directory above the candidate with trace.toml)",
    )
    p.add_argument("--state-dir", type=Path, help="default: FORK/.trace")
    p.add_argument("--out", type=Path, help="bundle directory (default: STATE/bundles/ID)")
    p.add_argument("--result", type=Path, help="verify result JSON (default: STATE/verify/ID.json)")
    p.add_argument(
        "--decision",
        type=Path,
        help="cross-check: the record `trace decide` wrote must be what the policy decides now "
        "(the bundle is always decided in-process)",
    )
    p.add_argument(
        "--gate",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="an extra gate record JSON (trace.gate/v1); repeatable",
    )
    add_policy_options(p)
    add_signing_options(p)
    p.add_argument(
        "--wait", type=float, default=0, metavar="SECONDS", help="wait for a busy state dir"
    )
    p.set_defaults(handler=_bundle)

    k = sub.add_parser(
        "keygen",
        help="create an ECDSA P-256 key pair for offline signing",
        description="Write PRIVATE (mode 0600, PKCS#8 PEM; encrypted when TRACE_KEY_PASSWORD "
        "is set) and PRIVATE.pub. Existing files are never overwritten.",
    )
    k.add_argument("private", type=Path, help="private key path, e.g. keys/trace.key")
    k.set_defaults(handler=_keygen)

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


def _keygen(args: argparse.Namespace) -> int:
    from engine.signing.keys import keygen

    priv, pub, hint = keygen(args.private)
    print(f"private key: {priv} (mode 0600)\npublic key:  {pub}\nhint:        {hint}")
    return 0


def _bundle(args: argparse.Namespace) -> int:
    from engine.bundle_verify.produce import produce_bundle, report_lines, request_from_args

    outcome = produce_bundle(
        request_from_args(
            args,
            candidate=args.candidate,
            fork=args.fork,
            state_dir=args.state_dir,
            out=args.out,
            result=args.result,
            decision=args.decision,
            gates=tuple(args.gate),
            wait=args.wait,
        )
    )
    print("\n".join(report_lines(outcome)))
    return 1 if outcome.denied else 0


def verifier_from_args(args: argparse.Namespace) -> Callable[[Path], BundleVerdict]:
    """verify_bundle with the options of `add_verify_options`, for any bundle directory."""
    from engine.bundle_verify.checks import ReplayFn, verify_bundle
    from engine.bundle_verify.identity import load_identity_policy
    from engine.bundle_verify.replay import replay_checks
    from engine.paths import data_dir
    from engine.signing.keys import key_hint, load_public_key

    fork = args.root.resolve() if args.root is not None else None
    root = fork or Path(".").resolve()
    identity = args.identity or root / DEFAULT_IDENTITY
    if args.identity is None and not identity.is_file():
        identity = data_dir() / DEFAULT_IDENTITY
    policy = load_identity_policy(identity)
    keys = {key_hint(k): k for k in (load_public_key(p) for p in args.key)}
    replay: ReplayFn | None = None
    if args.replay:

        def replay(statement: Any, payload: Path) -> Any:
            return replay_checks(statement, payload, root=root)

    def verify(bundle: Path) -> BundleVerdict:
        return verify_bundle(
            bundle,
            policy,
            trust_config=args.trust_config,
            extra_keys=keys,
            replay=replay,
            fork=fork,
        )

    return verify


def _verify_bundle(args: argparse.Namespace) -> int:
    from engine.bundle_verify.report import print_json, print_table

    verdict = verifier_from_args(args)(args.bundle)
    (print_json if args.json else print_table)(verdict)
    return 0 if verdict.passed else 1
