"""`trace route CANDIDATE`: the routing state of a candidate (before any model sees it), with its
rule and policy version."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.policy.routing import RouteDecision


def register(sub: Any) -> None:
    p = sub.add_parser(
        "route",
        help="routing state of a candidate (before any model sees it): rule and policy version",
    )
    p.add_argument("candidate", type=Path, help="candidate TOML file")
    p.add_argument("--policy", type=Path, default=None, help="routing policy (default: shipped)")
    p.add_argument("--json", action="store_true", help="print the decision as JSON")
    p.set_defaults(handler=cmd_route)


def _route_text(d: RouteDecision) -> str:
    f = d.facts
    score = f" (CVSS {f.score:g})" if f.score is not None else ""
    rule = d.rule or "none matched: reject is the default"
    lines = [
        f"{d.state}",
        f"  rule:     {rule}",
        f"  policy:   {d.policy.name} {d.policy.version} (sha256 {d.policy.digest[:16]})",
        f"  critical: {d.critical_packages.name} {d.critical_packages.version}",
        f"  facts:    {f.advisory}, severity {f.severity}{score}, "
        f"ecosystems {', '.join(f.ecosystems) or 'none'}, "
        f"upstream fix {'yes' if f.upstream_fix else 'no'}, "
        f"critical {'yes' if f.critical else 'no'}, origin {f.origin}"
        + (", WITHDRAWN" if f.withdrawn else ""),
    ]
    if d.state == "auto-merge-eligible":
        lines.append("  (auto-merge means a branch of the fork, never an upstream push)")
    return "\n".join(lines)


def cmd_route(args: argparse.Namespace) -> int:
    from engine.candidate import load_candidate
    from engine.policy.routing import route_candidate

    # before any model sees the candidate: patches, reproducer and [expect] may not exist yet
    candidate = load_candidate(args.candidate, for_routing=True)
    decision = route_candidate(candidate, args.policy)
    if args.json:
        print(json.dumps(decision.model_dump(mode="json", by_alias=True), indent=2))
    else:
        print(_route_text(decision))
    return 0
