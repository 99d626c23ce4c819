"""`trace decide CANDIDATE`: may this candidate's evidence be signed? allow/deny with every reason
code (the library: engine.signoff.decide)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import UsageError

if TYPE_CHECKING:
    from engine.graphtypes import Graph
    from engine.policy.signing_decision import Decision, Reason
    from engine.run import RunResult


def register(sub: Any) -> None:
    from engine.cli.options import add_gate_option

    p = sub.add_parser(
        "decide",
        help="may this candidate's evidence be signed? allow/deny with every reason code",
        description="Evaluate the signing policy against the records `trace verify` and the "
        "gates wrote. Exit 0 allow, 1 deny, 2 bad input. Writes a decision record.",
    )
    p.add_argument("candidate", type=Path, help="candidate TOML file")
    p.add_argument(
        "--result",
        type=Path,
        default=None,
        help="a verify result JSON to cross-check: the verdict itself is judged from the "
        "cached builds, and a file that differs from it is refused",
    )
    add_gate_option(p)
    p.add_argument(
        "--waivers",
        type=Path,
        default=None,
        metavar="PATH",
        help="signed waivers: a directory of `trace waive` files, or one; unsigned, "
        "foreign-signed or stale ones are ignored with a warning",
    )
    p.add_argument(
        "--maintainers",
        type=Path,
        default=None,
        metavar="FILE",
        help="who may sign waivers (default: FORK/trace/policy/maintainers.toml, else "
        "maintainers.toml beside the signing policy)",
    )
    p.add_argument("--routing", type=Path, default=None, help="routing policy (default: shipped)")
    p.add_argument(
        "--signing",
        type=Path,
        default=None,
        help="signing policy (default: FORK/trace/policy/signing.toml if present, else shipped)",
    )
    p.add_argument(
        "--today", default=None, metavar="YYYY-MM-DD", help="decide as of this date (default: UTC)"
    )
    p.add_argument(
        "--fork",
        type=Path,
        default=None,
        help="the package set (default: nearest directory above the candidate with a trace.toml)",
    )
    p.add_argument("--state-dir", type=Path, default=None, help="default: FORK/.trace")
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="decision record path (default: STATE/decisions/ID.json)",
    )
    p.add_argument("--json", action="store_true", help="print the decision record as JSON")
    p.set_defaults(handler=cmd_decide)


def _today(value: str | None) -> dt.date:
    if value is None:
        return dt.datetime.now(dt.UTC).date()
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise UsageError(f"--today {value!r} is not a date", hint="use YYYY-MM-DD") from None


def _reason_lines(tag: str, r: Reason) -> list[str]:
    where = ", ".join(r.sources)
    detail = f" ({'; '.join(r.details)})" if r.details else ""
    return [f"  {tag:<6} {r.code}: {r.message} [{where}]{detail}", f"         do: {r.solution}"]


def _decision_text(d: Decision, out: Path) -> str:
    rt = d.routing
    lines = [
        f"{d.decision.upper()}  {d.candidate}  as of {d.date.isoformat()}",
        f"  signing policy: {d.policy.name} {d.policy.version} (sha256 {d.policy.digest[:16]}), "
        f"catalogue {d.catalogue.name} {d.catalogue.version}",
        f"  routing: {rt.state} (rule {rt.rule or 'none: reject'}, "
        f"{rt.policy.name} {rt.policy.version})",
    ]
    for r in d.reasons:
        lines += _reason_lines("DENY", r)
    for r in d.waived:
        lines += _reason_lines("WAIVED", r)
    for r in d.warnings:
        lines += _reason_lines("WARN", r)
        lines.append(f"         (denies from {r.effective_on.isoformat()})")
    for u in d.waivers:
        w = u.waiver
        lines.append(
            f"  waiver {u.status}: {w.reason} until {w.expires.isoformat()} "
            f"(signed by {w.approved_by}, key {(w.signer or '?')[:16]}): {w.justification}"
        )
    for i in d.ignored_waivers:
        lines.append(f"  waiver IGNORED: {i.file}: {i.why}")
    lines.append(f"  decision record: {out}")
    return "\n".join(lines)


def cmd_decide(args: argparse.Namespace) -> int:
    # a repeat with nothing changed replays the last run (engine/fork/warm.py)
    from engine.fork.warm import graph_reads, memoised, store_outs
    from engine.verify.fork_graph import find_fork

    cand = args.candidate
    fork = (args.fork or find_fork(cand) or cand.absolute().parent).resolve()
    state = (args.state_dir or fork / ".trace").resolve()

    def full() -> tuple[int, list[tuple[str, tuple[str, ...]]] | None, list[str], list[Path]]:
        seen: list[tuple[Graph, RunResult]] = []
        status, out = _decide(args, seen)
        graph, run = seen[0]
        return status, graph_reads(graph, cand), store_outs(run), [out]

    return memoised("decide", args, fork, state, full)


def _decide(args: argparse.Namespace, seen: list[tuple[Graph, RunResult]]) -> tuple[int, Path]:
    from engine.signoff.decide import decide_candidate

    decided = decide_candidate(
        args.candidate,
        today=_today(args.today),
        fork=args.fork,
        state_dir=args.state_dir,
        out=args.out,
        result=args.result,
        gates=args.gate,
        waivers=args.waivers,
        maintainers=args.maintainers,
        routing=args.routing,
        signing=args.signing,
        seen=seen,
    )
    if args.json:
        print(json.dumps(decided.record, indent=2, sort_keys=True))
    else:
        print(_decision_text(decided.decision, decided.out))
    sys.stdout.flush()
    return (0 if decided.decision.decision == "allow" else 1), decided.out
