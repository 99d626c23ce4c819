"""`trace fork`: the command line and the loop over candidates."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import TraceError, UsageError
from engine.fork.candidate import Signer, verify_candidate
from engine.fork.config import candidate_name, discover, make_config
from engine.fork.entry import merged_policy, write_if_changed
from engine.fork.once import RunOnce
from engine.fork.report import ForkReport, Outcome, check_clean, print_table

if TYPE_CHECKING:
    from engine.fork.config import ForkConfig
    from engine.fork.memo import Run


def register(sub: Any) -> None:
    p = sub.add_parser(
        "fork",
        help="verify every fix candidate of a nixpkgs fork: bundles, signatures, one table",
        description="What `nix run .#verify` runs at a fork's root. Exit 0 when every candidate "
        "is allowed, 1 when one is denied, 2 on bad input (a dirty tree included).",
    )
    p.add_argument("candidates_", nargs="*", metavar="CANDIDATE", help="names (default: all)")
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
    p.add_argument("-j", "--jobs", type=int, default=None, help="parallel builds (nix -j)")
    p.add_argument("--wait", type=float, default=0, metavar="SECONDS", help="wait for the state")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--report",
        type=Path,
        default=None,
        metavar="DIR",
        help="also write DIR/index.html, a findings page of every candidate (engine.report)",
    )
    p.add_argument("--quiet", "-q", action="store_true", help="no progress display")
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
    p.set_defaults(handler=cmd_fork)


def cmd_fork(args: argparse.Namespace) -> int:
    from engine.errors import BusyError

    if args.merge is not None:
        from engine.fork.merge import cmd_merge

        return cmd_merge(args)
    shard = _shard(args)
    cfg = make_config(args)
    dirty = check_clean(cfg, args.allow_dirty)
    every = files = discover(cfg, args.candidates_)
    if shard is not None:
        from engine.fork.shard import select

        files = select(every, *shard)
    policy = merged_policy(cfg)
    signer = Signer(args)
    once = RunOnce(cfg)  # git state, Nix version and system, package-set digest: once per run
    memo = _memo(cfg, args, once, dirty, policy)
    outcomes: list[Outcome] = []
    for file in files:
        known = memo.lookup(file, signer.can_sign_keyless) if memo is not None else None
        if known is not None:  # authenticated, nothing it was made from changed (memo.py)
            outcomes.append(known)
            continue
        try:
            outcomes.append(
                verify_candidate(
                    cfg,
                    file,
                    policy,
                    signer,
                    once,
                    dirty=dirty,
                    jobs=args.jobs,
                    progress=not args.quiet and not args.json,
                    wait=args.wait,
                    memo=memo,
                )
            )
        except BusyError:
            raise
        except TraceError as exc:
            if memo is not None:
                memo.forget(file)
            print(f"trace: error: {exc.render()}", file=sys.stderr)
            name = candidate_name(file)  # its id is unknown: the candidate did not load
            outcomes.append(Outcome(candidate=name, file=str(file), note=exc.message))
    if memo is not None:
        memo.commit()
        if not args.quiet:  # why a candidate was not answered from the memo (stderr)
            for missed, why in memo.misses.items():
                name = candidate_name(Path(missed))
                print(f"trace: {name}: verified in full: {why}", file=sys.stderr)
    report = ForkReport(fork=str(cfg.root), commit=once.commit, dirty=dirty, candidates=outcomes)
    write_if_changed(cfg.state / "fork" / "report.json", report.to_json().encode())
    if shard is not None:
        from engine.fork.shard import write_shard

        i, n = shard
        dest = args.shard_dir or cfg.state / "shards" / f"{i}-of-{n}"
        done = write_shard(dest, cfg, report, policy, shard=shard, every=every, mine=files)
        print(f"shard {i}/{n}: {done}", file=sys.stderr if args.json else sys.stdout)
    if args.report is not None:
        from engine.report.findings import fork_findings

        page = fork_findings(args.report.resolve(), outcomes, policy, args.key)
        print(f"findings: {page}", file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(report.to_json(), end="")
    else:
        print_table(report, cfg)
    return report.exit_code


def _memo(
    cfg: ForkConfig, args: argparse.Namespace, once: RunOnce, dirty: bool, policy: Path
) -> Run | None:
    """The run's verdict memo (engine/fork/memo.py), or None without a usable key."""
    from engine.fork.memo import KEY_ENV, Run, load_key, note, signing_identity

    key, why = load_key(cfg)
    if key is None:
        if os.environ.get(KEY_ENV) != "":  # an empty $TRACE_MEMO_KEY turns it off quietly
            note(why)
        return None
    return Run(
        cfg,
        key,
        head=once.head,
        dirty=dirty,
        policy=policy,
        signing=signing_identity(args),
    )


def _shard(args: argparse.Namespace) -> tuple[int, int] | None:
    if args.shard is None:
        if args.shard_dir is not None:
            raise UsageError("--shard-dir goes with --shard I/N")
        return None
    from engine.fork.shard import parse_spec

    return parse_spec(args.shard)
