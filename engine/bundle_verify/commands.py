"""CLI: `trace bundle`, `trace keygen`, `trace verify-bundle` (handlers import lazily)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

DEFAULT_IDENTITY = Path("policy/signing-identity.json")
DEFAULT_GRAPH = Path("graphs/verify.toml")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "bundle",
        help="write a candidate's evidence bundle (optionally signed)",
        description="Assemble the evidence for CANDIDATE (advisory, patch, reproducer, every "
        "step outcome, verify result, decisions, replay record) into a directory with an in-toto "
        "statement over every file's sha256; sign it when asked and the signing decision allows.",
    )
    p.add_argument("candidate", type=Path, help="candidate TOML file")
    p.add_argument("--out", type=Path, help="bundle directory (default: bundles/<candidate id>)")
    p.add_argument("--graph", type=Path, default=DEFAULT_GRAPH, help="pipeline entry file")
    p.add_argument("--root", type=Path, default=Path("."), help="project root (default: .)")
    p.add_argument("--state", type=Path, help="state directory (default: <root>/.trace)")
    p.add_argument("--result", type=Path, help="VerifyResult JSON written by `trace verify`")
    p.add_argument("--routing", type=Path, help="routing decision JSON (`trace route --json`)")
    p.add_argument("--signing", type=Path, help="signing decision JSON (`trace decide --json`)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--sign", action="store_true", help="sign keyless with Sigstore")
    mode.add_argument("--key", type=Path, help="sign offline with this private key")
    p.add_argument("--identity-token", help="OIDC token for keyless signing (default: CI's)")
    p.add_argument("--trust-config", type=Path, help="Sigstore ClientTrustConfig JSON")
    p.add_argument("--builder-id", default="trace", help="SLSA runDetails.builder.id")
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
    v.add_argument("--replay", action="store_true", help="rebuild the steps and compare")
    v.add_argument("--identity", type=Path, help=f"signer lock (default: {DEFAULT_IDENTITY})")
    v.add_argument("--trust-config", type=Path, help="Sigstore ClientTrustConfig JSON")
    v.add_argument("--key", type=Path, action="append", default=[], help="trusted public key")
    v.add_argument("--root", type=Path, default=Path("."), help="project root for --replay")
    v.set_defaults(handler=_verify_bundle)


def _keygen(args: argparse.Namespace) -> int:
    from engine.signing.keys import keygen

    priv, pub, hint = keygen(args.private)
    print(f"private key: {priv} (mode 0600)\npublic key:  {pub}\nhint:        {hint}")
    return 0


def _allowed(decision: Any) -> bool:
    if isinstance(decision, dict):
        if isinstance(decision.get("allowed"), bool):
            return bool(decision["allowed"])
        return decision.get("decision") == "allow" or decision.get("verdict") == "allow"
    return False


def _bundle(args: argparse.Namespace) -> int:
    from engine.candidate import load_candidate
    from engine.errors import InputError
    from engine.evidence.bundle import assemble, write_bundle
    from engine.evidence.collect import (
        candidate_entries,
        decision_entry,
        load_json,
        model_pin,
        outcome_entries,
        policy_versions,
    )
    from engine.evidence.payload import json_entry
    from engine.evidence.replay import build_replay_record
    from engine.evidence.statement import PAYLOAD_TYPE
    from engine.graph import load_graph
    from engine.run import run_graph

    root = args.root.resolve()
    candidate = load_candidate(args.candidate)
    graph = load_graph(
        (root / args.graph).resolve(), root=root, context={"candidate": candidate.context()}
    )
    run = run_graph(graph, args.state or root / ".trace")
    entries = candidate_entries(candidate) + outcome_entries(run)
    versions: dict[str, str] = {}
    if args.result:
        entries.append(json_entry("verify-result.json", "verify", load_json(args.result)))
    signing_decision = None
    if args.routing:
        routing = load_json(args.routing)
        entries.append(decision_entry("routing", "routing", routing))
        versions.update(policy_versions(routing))
    if args.signing:
        signing_decision = load_json(args.signing)
        entries.append(decision_entry("signing", "signing", signing_decision))
        versions.update(policy_versions(signing_decision))
    replay = build_replay_record(
        graph, run, candidate_file=candidate.path, root=root, model=model_pin(candidate)
    )
    assembled = assemble(
        entries,
        replay=replay,
        candidate_id=candidate.spec.id,
        policy_versions=versions,
        builder_id=args.builder_id,
    )
    out = args.out or root / "bundles" / candidate.spec.id
    signature = None
    status = 0
    if args.sign or args.key:
        if signing_decision is None:
            raise InputError(
                "signing needs the signing policy's decision",
                hint="pass --signing FILE (from `trace decide --json`), or omit --sign/--key",
            )
        if not _allowed(signing_decision):
            print(
                "trace: the signing policy denies signing; writing an unsigned bundle",
                file=sys.stderr,
            )
            status = 1
        elif args.key:
            from engine.signing.keymode import sign_with_key
            from engine.signing.keys import load_private_key

            signature = sign_with_key(
                assembled.statement_bytes, PAYLOAD_TYPE, load_private_key(args.key)
            )
        else:
            from engine.signing.keyless import sign_keyless
            from engine.signing.oidc import identity_token

            signature = sign_keyless(
                assembled.statement_bytes,
                token=identity_token(args.identity_token),
                trust_config=args.trust_config,
            )
    written = write_bundle(out, assembled, signature)
    print(
        f"bundle: {written} ({len(assembled.entries)} payload files, "
        f"{'signed' if signature else 'unsigned'})"
    )
    return status


def _verify_bundle(args: argparse.Namespace) -> int:
    from engine.bundle_verify.checks import ReplayFn, verify_bundle
    from engine.bundle_verify.identity import load_identity_policy
    from engine.bundle_verify.replay import replay_checks
    from engine.bundle_verify.report import print_json, print_table
    from engine.signing.keys import key_hint, load_public_key

    root = args.root.resolve()
    policy = load_identity_policy(args.identity or root / DEFAULT_IDENTITY)
    keys = {key_hint(k): k for k in (load_public_key(p) for p in args.key)}
    replay: ReplayFn | None = None
    if args.replay:

        def replay(statement: Any, payload: Path) -> Any:
            return replay_checks(statement, payload, root=root)

    verdict = verify_bundle(
        args.bundle, policy, trust_config=args.trust_config, extra_keys=keys, replay=replay
    )
    (print_json if args.json else print_table)(verdict)
    return 0 if verdict.passed else 1
