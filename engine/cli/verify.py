"""`trace verify CANDIDATE [--bundle DIR]`: run the verify pipeline for one candidate, print the
verdict, and with `--bundle` route, decide and write (and sign, when allowed) its bundle.

The command line lives here, above both engine.verify (the pipeline) and the bundle producer, so
that engine.verify never imports engine.audit.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.cli.args import (
    add_otel_arg,
    add_rebuild_args,
    otel_clock,
    otel_export,
    positive_int,
    rebuild_lines,
)
from engine.paths import cli
from engine.verify.fork_graph import find_fork

if TYPE_CHECKING:
    from engine.pipeline.values import Judged
    from engine.run import RunResult
    from engine.verify_result import VerifyResult


def register(sub: Any) -> None:
    p = sub.add_parser(
        "verify",
        help="build a package without and with a candidate fix, run its reproducer against both",
        description="Exit 0 only when every claim holds; 1 when one does not; 2 on bad input.",
    )
    p.add_argument("candidate", type=Path, help="candidate TOML file")
    p.add_argument(
        "--fork",
        type=Path,
        default=None,
        help="the package set (a nixpkgs fork); its trace.toml is used when present "
        "(default: the nearest directory above the candidate holding a trace.toml)",
    )
    p.add_argument("--state-dir", type=Path, default=None, help="default: FORK/.trace")
    p.add_argument(
        "--out", type=Path, default=None, help="result JSON (default: STATE/verify/ID.json)"
    )
    p.add_argument("--json", action="store_true", help="print the result JSON instead of a table")
    p.add_argument(
        "-j", "--jobs", type=positive_int, default=None, help="parallel builds (nix -j), >= 1"
    )
    p.add_argument("--quiet", "-q", action="store_true", help="no progress display")
    add_rebuild_args(p)
    p.add_argument(
        "--wait", type=float, default=0, metavar="SECONDS", help="wait for a busy state dir"
    )
    add_otel_arg(p)
    p.add_argument(
        "--bundle",
        type=Path,
        default=None,
        metavar="DIR",
        help="then route, decide and write the evidence bundle to DIR; with --sign/--key it is "
        "signed only when the signing policy allows (see `trace bundle --help`)",
    )
    from engine.cli.options import add_policy_options, add_signing_options

    add_signing_options(p)
    add_policy_options(p)
    p.set_defaults(handler=cmd_verify)


def machine_lines(result: VerifyResult) -> list[str]:
    """Where this run's steps were made and `--check`ed, when any step ran on another machine
    (a remote builder or a cache) or was checked; nothing when all was built here unchecked."""
    seen = result.machines()
    if set(seen["built"]) <= {"local"} and not seen["checked"]:
        return []
    lines = []
    for what, label in (("built", "built on"), ("checked", "--check rebuilt on")):
        if seen[what]:
            parts = [f"{m} ({n} steps)" for m, n in sorted(seen[what].items())]
            lines.append(f"{label}: " + ", ".join(parts))
    return lines


def print_table(result: VerifyResult) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"trace verify {result.candidate} ({result.package})")
    for col in ("claim", "evidence", "result", "reason"):
        table.add_column(col, overflow="fold")
    for c in result.claims:
        evidence = c.evidence + (f"\n{c.detail}" if c.detail else "")
        verdict = "[green]holds[/]" if c.holds else "[bold red]fails[/]"
        table.add_row(c.claim, evidence, verdict, c.reason)
    for name, g in sorted(result.gates.items()):
        score = "" if g.score is None else f"score {g.score:.3g}; "
        state = "not measurable" if not g.measurable else ("pass" if g.passed else "fails")
        style = "green" if g.passed else ("yellow" if not g.measurable else "bold red")
        reasons = ", ".join(g.reasons) or "ok"
        table.add_row(
            f"gate: {name}",
            f"{score}{g.details.get('summary', '')}".strip(" ;"),
            f"[{style}]{state}[/]",
            reasons,
        )
    from engine.tables import keep_words_whole

    console = Console(width=max(100, Console().width, keep_words_whole(table)))
    console.print(table)
    for line in machine_lines(result):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    if result.gates:
        console.print(
            f"gates are measured here and judged by the signing policy (`{cli('decide')}`)"
        )
    if result.passed:
        console.print("[green]PASS[/]: every claim holds")
    else:
        console.print(f"[bold red]FAIL[/]: {', '.join(result.reasons)}")


def _bundle(
    args: argparse.Namespace,
    fork: Path,
    policy: Path,
    verified: Judged,
) -> int:
    from engine.cli.options import request_from_args
    from engine.signoff.produce import produce_bundle, report_lines

    outcome = produce_bundle(
        request_from_args(
            args,
            candidate=args.candidate,
            fork=fork,
            state_dir=args.state_dir,
            out=args.bundle,
            wait=args.wait,
            signing_policy=policy,  # the bundle decides with the policy the gates applied
        ),
        verified,
    )
    print("\n".join(report_lines(outcome)), file=sys.stderr if args.json else sys.stdout)
    return 1 if outcome.denied else 0


def unbuilt_lines(run: RunResult) -> list[str]:
    """Steps of the run that did not build (a gate whose step failed is missing from the table,
    and `decide` refuses the candidate until a run builds it): said, never hidden."""
    out = []
    for r in run.steps.values():
        if r.status in ("failed", "skipped"):
            why = (r.log_tail or "").strip().splitlines()
            out.append(f"NOT BUILT {r.id} ({r.status}): {why[-1] if why else 'no log'}")
    return out


def cmd_verify(args: argparse.Namespace) -> int:
    if (args.sign or args.key) and args.bundle is None:
        from engine.errors import UsageError

        raise UsageError("--sign/--key sign a bundle", hint="add --bundle DIR")
    fork = (args.fork or find_fork(args.candidate) or Path.cwd()).resolve()
    if args.bundle is None:
        return _verify(args, fork)[0]
    # with a bundle: a repeat with nothing changed replays the last run (engine/fork/warm.py)
    from engine.fork.warm import graph_reads, memoised, store_outs

    state = (args.state_dir or fork / ".trace").resolve()

    def full() -> tuple[int, list[tuple[str, tuple[str, ...]]] | None, list[str], list[Path]]:
        status, judged, written = _verify(args, fork)
        return status, graph_reads(judged.graph, args.candidate), store_outs(judged.run), written

    return memoised("verify", args, fork, state, full)


def _verify(args: argparse.Namespace, fork: Path) -> tuple[int, Judged, list[Path]]:
    """The full run: its status, what it verified, the files it wrote."""
    # imported here: a warm repeat (served from the memo) never loads the candidate models
    from engine.pipeline.verify_fresh import build_verify

    clock = otel_clock(args)
    policy: Path | None = args.signing_policy
    if args.bundle is not None:
        from engine.evidence.replay import signing_policy_pin
        from engine.gates.context import signing_policy_path

        # one policy for the gates and the decision; refused before building when the bundle's
        # replay record could not name it
        policy = signing_policy_path(policy, fork)
        signing_policy_pin(policy, fork)
    began = dt.datetime.now(dt.UTC)
    verified = build_verify(
        args.candidate,
        fork=args.fork,
        state_dir=args.state_dir,
        jobs=args.jobs,
        progress=not args.quiet and not args.json,
        wait=args.wait,
        signing_policy=policy,
        recheck=args.bundle is not None,
        clock=clock,
        rebuild=(args.rebuild, args.rebuild_all),
    )
    # the bundle's run is this whole verify (load, build, checks)
    verified = replace(verified, ran=(began, dt.datetime.now(dt.UTC)))
    otel_export(args, clock, verified.run, f"trace verify {verified.verify.candidate}")
    result = verified.verify
    text = result.model_dump_json(indent=2, by_alias=True) + "\n"
    out = args.out or (args.state_dir or fork / ".trace") / "verify" / f"{result.candidate}.json"
    from engine.files import write_atomic

    write_atomic(out, text)
    if args.json:
        sys.stdout.write(text)
    else:
        print_table(result)
        print(f"result: {out}")
    for line in [*rebuild_lines(verified.run), *unbuilt_lines(verified.run)]:
        print(line, file=sys.stderr)
    status = 0 if result.passed and not verified.run.rebuilt_differently else 1
    written = [out]
    if args.bundle is not None:
        assert policy is not None
        status = max(status, _bundle(args, fork, policy, verified))
        written.append(args.bundle)
    return status, verified, written
