"""`trace draft ADVISORY-OR-CANDIDATE`: the model roles, verify and decide, in one command."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from engine.cli.args import positive_int


def register(sub: Any) -> None:
    p = sub.add_parser(
        "draft",
        help="draft a fix with the model roles: Patcher, Reproducer, verify, Reviewer, decide",
        description="Exit 0 when the drafted candidate may be signed; 1 when a step's output was "
        "refused or the decision denies (draft.json says why); 2 on bad input, missing "
        "credentials, an unreachable endpoint or a deadline (nothing written).",
    )
    p.add_argument("target", type=Path, help="an OSV advisory JSON or a candidate.toml skeleton")
    p.add_argument("--fork", type=Path, default=None, help="the fork (default: found upward)")
    p.add_argument("--agent", type=Path, default=None, help="agent file (default: "
                   "FORK/trace/agent.toml, else trace's graphs/agent.toml)")  # fmt: skip
    p.add_argument("--package", default=None, help="with an advisory naming several packages")
    p.add_argument("--source", type=Path, default=None,
                   help="the package's source tree (default: FORK/pkgs/PACKAGE/src)")  # fmt: skip
    p.add_argument("--state-dir", type=Path, default=None, help="default: FORK/.trace")
    p.add_argument("--refresh", action="store_true", help="ask the models again (no replay)")
    p.add_argument(
        "--upstream-mirror",
        type=Path,
        default=None,
        metavar="DIR",
        help="local mirror of upstream patches (COMMIT.patch) for the resolver",
    )
    p.add_argument(
        "--fetch-upstream",
        action="store_true",
        help="fetch the FIX commit's patch from its forge (URL.patch, 30 s deadline) when the "
        "mirror lacks it; kept in --upstream-mirror when given",
    )
    p.add_argument("--signing-policy", type=Path, default=None)
    p.add_argument("-j", "--jobs", type=positive_int, default=None, help=">= 1")
    p.add_argument("--json", action="store_true", help="print draft.json")
    p.set_defaults(handler=cmd_draft)


def cmd_draft(args: argparse.Namespace) -> int:
    from engine.agent.target import DraftRequest, draft_target

    req = DraftRequest(
        fork=args.fork,
        agent=args.agent,
        package=args.package,
        source=args.source,
        state_dir=args.state_dir,
        refresh=args.refresh,
        upstream_mirror=args.upstream_mirror,
        fetch_upstream=args.fetch_upstream,
        signing_policy=args.signing_policy,
        jobs=args.jobs,
    )
    rec, skeleton = draft_target(args.target, req)
    if args.json:
        print(json.dumps(rec.model_dump(mode="json", by_alias=True), indent=2, sort_keys=True))
    else:
        print(f"trace draft {rec.candidate} ({rec.package}): {rec.decision.decision}")
        for s in rec.steps:
            how = "replayed" if s.replayed else "asked"
            print(f"  {s.id:<10} {s.role:<10} {s.model} ({s.family}, {how}): {s.outcome}"
                  + (f" - {s.detail}" if s.detail else ""))  # fmt: skip
        if rec.verify_passed is not None:
            print(f"  verify: {'passed' if rec.verify_passed else 'failed'}")
        for r in rec.reviews:
            print(f"  review {r.step}: {r.verdict} by {r.model} "
                  f"({'cross-family' if r.cross_family else 'same family'})")  # fmt: skip
        acc = skeleton.parent / "accuracy.json"
        if acc.is_file() and rec.stage == "decide":
            summary = json.loads(acc.read_text(encoding="utf-8")).get("summary", "")
            print(f"  accuracy vs upstream: {summary}")
        for code in rec.decision.reasons:
            print(f"  deny: {code}")
        print(f"  record: {skeleton.parent / 'draft.json'}")
    sys.stdout.flush()
    return 0 if rec.decision.decision == "allow" else 1
