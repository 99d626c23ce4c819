"""`trace land CANDIDATE --bundle DIR`: a branch on the fork with the verified patch; never a
push (the library: engine.agent.land)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser(
        "land",
        help="create a branch on the fork with the verified patch (never pushes)",
        description="Exit 0 with the branch made; 1 when the candidate may not land (reasons "
        "printed); 2 on bad input.",
    )
    p.add_argument("candidate", type=Path, help="candidate TOML file")
    p.add_argument("--bundle", type=Path, required=True, help="the candidate's signed bundle")
    p.add_argument("--fork", type=Path, default=None, help="the fork (a git repository)")
    p.add_argument("--key", type=Path, default=None, help="public key of a key-mode bundle")
    p.add_argument("--identity", type=Path, default=None, help="signer lock (keyless)")
    p.add_argument("--branch", default=None, help="default: trace/ID")
    p.set_defaults(handler=cmd_land)


def cmd_land(args: argparse.Namespace) -> int:
    from engine.agent.land import LandRefused, land

    try:
        done = land(
            args.candidate,
            args.bundle,
            fork=args.fork,
            key=args.key,
            identity=args.identity,
            branch=args.branch,
        )
    except LandRefused as exc:
        for r in exc.reasons:
            print(f"  refused: {r}")
        raise
    print(
        f"landed {done.candidate} on branch {done.branch} ({done.commit[:12]}); nothing was pushed"
    )
    sys.stdout.flush()
    return 0
