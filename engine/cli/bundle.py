"""`trace bundle CANDIDATE`: write a candidate's evidence bundle from its verify result (signed
if allowed)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    from engine.cli.options import add_gate_option, add_policy_options, add_signing_options

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
    add_gate_option(p)
    add_policy_options(p)
    add_signing_options(p)
    p.add_argument(
        "--wait", type=float, default=0, metavar="SECONDS", help="wait for a busy state dir"
    )
    p.set_defaults(handler=_bundle)


def _bundle(args: argparse.Namespace) -> int:
    from engine.cli.options import request_from_args
    from engine.signoff.produce import produce_bundle, report_lines

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
