"""`trace push [--to URL] [--key KEY.sec]`: a state directory's results to a binary cache."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    from engine.cli.args import add_state_args

    p = sub.add_parser(
        "push",
        help="copy the latest results (outputs and their closure) to a binary cache, signed",
        description="Sign the outputs of every graph's latest run in the state directory, with "
        "their closure, with a Nix binary-cache key and copy them with `nix copy`. Machines "
        "that trust the key's public key then substitute them instead of building.",
    )
    p.add_argument("--to", default=None, metavar="URL", help="the cache (default: push-to)")
    p.add_argument(
        "--key",
        type=Path,
        default=None,
        metavar="KEY.sec",
        help="secret key file (`nix-store --generate-binary-cache-key`; default: "
        "secret-key-file of the machine config)",
    )
    p.add_argument("--json", action="store_true", help="print what was pushed as JSON")
    add_state_args(p)
    p.set_defaults(handler=cmd_push)


def cmd_push(args: argparse.Namespace) -> int:
    from engine.cli.args import state_dir
    from engine.remote.push import push

    rep = push(state_dir(args), to=args.to, key=args.key, wait=args.wait)
    if args.json:
        out = {
            "to": rep.to,
            "key": rep.key_name,
            "outputs": rep.outputs,
            "claims": rep.claims,
            "steps": rep.steps,
        }
        print(json.dumps(out, indent=2))
    else:
        n = len(rep.outputs)
        print(
            f"pushed {n} results with their closure and {len(rep.claims)} determinism claims "
            f"to {rep.to} (key {rep.key_name})"
        )
    return 0
