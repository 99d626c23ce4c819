"""`trace scout SOURCE`: OSV advisories -> eligibility -> candidate skeletons for the fork (the
library: engine.agent.scout)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser(
        "scout",
        help="read OSV advisories, match them to the fork's packages, write candidate skeletons",
        description="Exit 0 after writing the skeletons of the eligible advisories (none may "
        "be); 2 on bad input or when the fork's package set does not evaluate.",
    )
    p.add_argument("source", type=Path, nargs="?", default=None,
                   help="a directory of OSV JSON files or an OSV export zip")  # fmt: skip
    p.add_argument("--osv-api", default=None, metavar="URL",
                   help="query the OSV API instead (online; e.g. https://api.osv.dev) for the "
                   "--package names at the fork's versions, 30 s deadline a request")  # fmt: skip
    p.add_argument("--package", action="append", default=[], help="with --osv-api (repeat)")
    p.add_argument("--fork", type=Path, default=Path("."), help="the fork (default: .)")
    p.add_argument("--eligibility", type=Path, default=None,
                   help="eligibility policy (default: FORK/trace/policy/eligibility.toml, "
                   "else trace's policy/eligibility.toml)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(handler=cmd_scout)


def cmd_scout(args: argparse.Namespace) -> int:
    from engine.agent.scout import scout

    report = scout(
        args.fork,
        source=args.source,
        osv_api=args.osv_api,
        packages=args.package,
        eligibility=args.eligibility,
    )
    rows: list[dict[str, Any]] = report["advisories"]
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        for r in rows:
            what = f"{r.get('advisory', r['file'])} {r.get('package', '')}".strip()
            if r["eligible"]:
                print(f"eligible      {what} (version {r['version']}): {r['skeleton']}")
            else:
                print(f"not eligible  {what}: {', '.join(r['reasons'])}")
    sys.stdout.flush()
    return 0
