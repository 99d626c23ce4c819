"""`trace fork`: the command line (library: engine.fork.run_fork; `--merge`: engine.fork.merge)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from engine.cli.args import add_rebuild_args, positive_int


def register(sub: Any) -> None:
    p = sub.add_parser(
        "fork",
        help="verify every fix candidate of a nixpkgs fork: bundles, signatures, one table",
        description="What `nix run .#verify` runs at a fork's root. Exit 0 when every candidate "
        "is allowed, 1 when one is denied, 2 on bad input (a dirty tree included).",
    )
    p.add_argument("candidates_", nargs="*", metavar="CANDIDATE", help="names (default: all)")
    _where(p)
    _signing(p)
    p.add_argument(
        "-j", "--jobs", type=positive_int, default=None, help="parallel builds (nix -j), >= 1"
    )
    p.add_argument("--wait", type=float, default=0, metavar="SECONDS", help="wait for the state")
    add_rebuild_args(p)  # a rebuild run is never answered from, nor recorded in, the memo
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--report",
        type=Path,
        default=None,
        metavar="DIR",
        help="also write DIR/index.html, a findings page of every candidate (engine.report)",
    )
    p.add_argument("--quiet", "-q", action="store_true", help="no progress display")
    _shards(p)
    p.set_defaults(handler=cmd_fork)


def _where(p: argparse.ArgumentParser) -> None:
    """Where the fork, its package set, its trace folder, its source and its state are."""
    p.add_argument("--fork", type=Path, default=None, help="the fork (default: current dir)")
    p.add_argument("--package-set", default=".", help="relative to the fork root (default: .)")
    p.add_argument("--config", default="trace", help="the fork's trace folder (default: trace)")
    p.add_argument("--candidates", default=None, help="default: CONFIG/candidates")
    p.add_argument(
        "--steps", default=None, help="the fork's own steps (default: CONFIG/steps.toml)"
    )
    p.add_argument("--policy", default=None, help="policy overrides (default: CONFIG/policy)")
    p.add_argument(
        "--source",
        default=None,
        metavar="STORE_PATH",
        help="the fork flake's own source as Nix copied it (what `nix run .#verify` passes): the "
        "package set is imported from there, purely, instead of from the work tree",
    )
    p.add_argument("--source-nar-hash", default=None, help="its narHash (recorded)")
    p.add_argument("--system", default=None, help="the system to import the package set for")
    p.add_argument("--nix-version", default=None, help="`nix --version` of the app's Nix")
    p.add_argument("--state-dir", type=Path, default=None, help="default: ROOT/.trace")
    p.add_argument("--out", type=Path, default=None, help="bundles (default: STATE/bundles)")
    p.add_argument(
        "--allow-dirty",
        action="store_true",
        help="verify uncommitted changes too (the replay record then says dirty)",
    )


def _signing(p: argparse.ArgumentParser) -> None:
    """How allowed bundles are signed (key, keyless under the signer lock, or not at all)."""
    p.add_argument("--key", type=Path, default=None, help="sign offline with this private key")
    p.add_argument("--identity-token", default=None, help="OIDC token for keyless signing")
    p.add_argument("--trust-config", type=Path, default=None, help="Sigstore ClientTrustConfig")
    p.add_argument(
        "--signer-lock",
        type=Path,
        default=None,
        metavar="FILE",
        help="keyless: the identity lock the token must match before anything is signed "
        "(default: signing-identity.json of the merged policy)",
    )
    p.add_argument(
        "--force-identity",
        action="store_true",
        help="keyless: sign even when the token's identity is not in the lock",
    )
    p.add_argument("--no-sign", action="store_true", help="never sign")


def _shards(p: argparse.ArgumentParser) -> None:
    """One shard of a sharded run, and joining the shards."""
    p.add_argument(
        "--shard",
        default=None,
        metavar="I/N",
        help="verify only shard I of N (a CI job of a matrix): the candidates whose name hashes "
        "to I (docs/scale.md); also write the shard directory for --merge",
    )
    p.add_argument(
        "--shard-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="with --shard: where the shard's rows, bundles and policy go "
        "(default: STATE/shards/I-of-N)",
    )
    p.add_argument(
        "--merge",
        type=Path,
        nargs="+",
        default=None,
        metavar="DIR",
        help="join the shard directories of one sharded run into one table (and --report "
        "page, --json report); refuses shards of different runs or a missing shard",
    )


def cmd_fork(args: argparse.Namespace) -> int:
    if args.merge is not None:
        from engine.fork.merge import cmd_merge

        return cmd_merge(args)
    from engine.fork.outcome_table import print_table
    from engine.fork.run_fork import run_fork

    out = sys.stderr if args.json else sys.stdout
    run = run_fork(args, lambda line: print(line, file=out))
    if args.json:
        print(run.report.to_json(), end="")
    else:
        print_table(run.report, run.cfg)
    return run.report.exit_code
