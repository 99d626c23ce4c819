"""`trace fork` as a library: verify every fix candidate of a fork (or one shard of them), each
answered from the verdict memo when nothing it was made from changed, then write the report, the
shard directory (with `--shard`) and the findings page (with `--report`). The command line, which
prints the table, is engine/cli/fork.py; `--merge` is engine/fork/merge.py."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from engine.errors import TraceError, UsageError
from engine.fork.config import candidate_name, discover, make_config
from engine.fork.entry import merged_policy, write_if_changed
from engine.fork.once import RunOnce
from engine.fork.one_candidate import Signer, verify_candidate
from engine.fork.outcome_table import ForkReport, Outcome, check_clean

if TYPE_CHECKING:
    from engine.fork.config import ForkConfig
    from engine.fork.memo import Run


@dataclass(frozen=True)
class ForkRun:
    """The run's report and the fork it was made in."""

    report: ForkReport
    cfg: ForkConfig


def run_fork(args: argparse.Namespace, say: Callable[[str], None]) -> ForkRun:
    """Verify the fork's candidates as `args` (the `trace fork` options) ask; `say` gets the lines
    naming what was written besides the report (the shard directory, the findings page)."""
    from engine.errors import BusyError, NixError

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
    rebuild = (getattr(args, "rebuild", []), getattr(args, "rebuild_all", False))
    # a --rebuild must build: never answered from the memo, and what it finds is this run's
    memo = None if rebuild[0] or rebuild[1] else _memo(cfg, args, once, dirty, policy)
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
                    rebuild=rebuild,
                )
            )
        except (BusyError, NixError):  # the state is busy, or Nix itself failed (exit 3, 4):
            raise  # the same for every candidate, not one candidate's error
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
        say(f"shard {i}/{n}: {done}")
    if args.report is not None:
        from engine.report.findings import fork_findings

        page = fork_findings(args.report.resolve(), outcomes, policy, args.key)
        say(f"findings: {page}")
    return ForkRun(report=report, cfg=cfg)


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
