"""`trace init`: set a nixpkgs fork up for `nix run .#verify` (the library: engine.fork.init)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    from engine.fork import init

    doc = init.__doc__
    p = sub.add_parser(
        "init",
        help="set up a nixpkgs fork for `nix run .#verify` (trace/, flake.nix, .gitignore, lock)",
        description=doc.split("\n\n", 1)[1] if doc else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--fork", type=Path, default=None, help="the fork (default: current dir)")
    p.add_argument(
        "--trace-url",
        default=None,
        metavar="URL",
        help="where the fork gets trace from (a flake reference, e.g. github:OWNER/trace)",
    )
    p.add_argument("--config", default="trace", help="the fork's trace folder (default: trace)")
    p.add_argument(
        "--print",
        dest="print_lines",
        action="store_true",
        help="do not edit an existing flake.nix: print the lines to add",
    )
    p.add_argument("--no-lock", action="store_true", help="do not run `nix flake lock`")
    p.add_argument(
        "--override-input",
        dest="nix_args",
        nargs=2,
        action="append",
        default=[],
        metavar=("INPUT", "URL"),
        help="passed to `nix flake lock` (e.g. trace/nixpkgs path:…)",
    )
    p.set_defaults(handler=_handler)


def _handler(args: argparse.Namespace) -> int:
    from engine.fork.init import init_fork

    done = init_fork(
        args.fork,
        config=args.config,
        trace_url=args.trace_url,
        print_lines=args.print_lines,
        lock=not args.no_lock,
        override_inputs=[(a, b) for a, b in args.nix_args],
    )
    for line in done.say:
        print(f"trace init: {line}")
    if done.lines is not None:
        why = (
            "as asked (--print)" if args.print_lines else "this flake.nix's shape does not allow it"
        )
        print(
            f"\ntrace init: flake.nix NOT edited ({why}). Add these lines to it, inside the "
            f"top-level {{ … }}, then run trace init again (it locks and stages):\n\n{done.lines}"
        )
        return 1
    print(
        "\nNext: put each fix candidate in "
        f"{done.config}/candidates/<name>/candidate.toml (`nix run .#trace -- schema candidate`), "
        "commit, then `nix run .#verify`.\nThe trace CLI in this fork: `nix run .#trace -- …`."
    )
    return 0
