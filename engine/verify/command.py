"""`trace verify CANDIDATE`: run the verify pipeline for one candidate and print the verdict."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.cache import Index
    from engine.candidate import Candidate
    from engine.model import Graph
    from engine.run import RunResult
    from engine.verify.result import VerifyResult

STANDARD_GRAPH = "graphs/verify.toml"
FORK_FILE = "trace.toml"


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
    p.add_argument("-j", "--jobs", type=int, default=None, help="parallel builds (nix -j)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress display")
    p.add_argument(
        "--wait", type=float, default=0, metavar="SECONDS", help="wait for a busy state dir"
    )
    p.add_argument(
        "--bundle",
        type=Path,
        default=None,
        metavar="DIR",
        help="then route, decide and write the evidence bundle to DIR; with --sign/--key it is "
        "signed only when the signing policy allows (see `trace bundle --help`)",
    )
    from engine.bundle_verify.options import add_policy_options, add_signing_options

    add_signing_options(p)
    add_policy_options(p)
    p.set_defaults(handler=cmd_verify)


def find_fork(candidate: Path) -> Path | None:
    """The nearest directory at or above the candidate's that holds a trace.toml."""
    for d in [candidate.resolve().parent, *candidate.resolve().parents]:
        if (d / FORK_FILE).is_file():
            return d
    return None


def verify_context(
    candidate: Candidate, fork: Path, signing_policy: Path | None = None
) -> dict[str, Any]:
    """The context the verify graph is loaded with (replays must use the same).

    `signing_policy`: the policy whose thresholds the gate steps apply (they enter the gate
    steps' keys); None is the default by location (`engine.gates.context.signing_policy_path`).
    `trace decide`/`trace bundle` must load the graph with the very policy they decide with."""
    from engine.gates.context import gate_context

    expect = candidate.spec.expect.model_dump(exclude_none=True)
    return {
        "candidate": {**candidate.context(), "expect_json": json.dumps(expect, sort_keys=True)},
        "fork": {"root": str(fork)},
        "gates": gate_context(candidate, signing_policy, fork=fork),
    }


def graph_entry(fork: Path) -> Path:
    from engine.paths import data_dir

    own = fork / FORK_FILE
    return own if own.is_file() else data_dir() / STANDARD_GRAPH


def project_root(fork: Path) -> Path:
    """The fork is the project: its inputs stay inside it; trace's own files are `trace:` refs."""
    return fork


def load_verify_graph(
    candidate: Candidate, fork: Path, index: Index, signing_policy: Path | None = None
) -> Graph:
    """The fork's verify graph instantiated for one candidate (its gates applying
    `signing_policy`'s thresholds), inputs hashed with the index's stat cache. The one way
    `trace verify`, `trace decide` and `trace bundle` load it."""
    from engine.graph import load_graph
    from engine.hashing import StatCache

    hasher = StatCache(index.db)
    graph = load_graph(
        graph_entry(fork),
        root=project_root(fork),
        context=verify_context(candidate, fork, signing_policy),
        hasher=hasher,
        variant=candidate.spec.id,
    )
    hasher.flush()
    return graph


def run_verify(
    candidate_file: Path,
    *,
    fork: Path | None = None,
    state_dir: Path | None = None,
    jobs: int | None = None,
    progress: bool = False,
    wait: float = 0,
    signing_policy: Path | None = None,
) -> VerifyResult:
    """Load the candidate and the fork's graph, build what is dirty, judge. The Python API."""
    return build_verify(
        candidate_file,
        fork=fork,
        state_dir=state_dir,
        jobs=jobs,
        progress=progress,
        wait=wait,
        signing_policy=signing_policy,
    )[2]


def build_verify(
    candidate_file: Path,
    *,
    fork: Path | None = None,
    state_dir: Path | None = None,
    jobs: int | None = None,
    progress: bool = False,
    wait: float = 0,
    signing_policy: Path | None = None,
    recheck: bool = False,
) -> tuple[Graph, RunResult, VerifyResult]:
    """`run_verify`, also returning the graph and the run the verdict was judged from.

    `signing_policy`: whose thresholds the gates apply (None: the default by location). Steps
    answered from the index are checked against and re-read from the store (`from_store`);
    `recheck`: their determinism is measured again too (for a bundle)."""
    from engine.cache import Index
    from engine.candidate import load_candidate
    from engine.errors import UsageError
    from engine.progress import Progress
    from engine.run import run_graph
    from engine.verify.trusted import from_store
    from engine.verify.verdict import judge

    candidate = load_candidate(candidate_file)
    if fork is None:
        fork = find_fork(candidate.path) or Path.cwd()
    fork = fork.resolve()
    if not fork.is_dir():
        raise UsageError(f"--fork {fork} is not a directory", hint="pass the package set's root")
    state = (state_dir or fork / ".trace").resolve()
    with Index(state, wait=wait) as index:
        graph = load_verify_graph(candidate, fork, index, signing_policy)
        with Progress(enabled=progress) as reporter:
            result = run_graph(graph, index, jobs=jobs, reporter=reporter)
        result = from_store(graph, result, index, recheck=recheck)
    return graph, result, judge(candidate, graph, result)


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


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
    console = Console(width=max(100, Console().width))
    console.print(table)
    if result.gates:
        console.print("gates are measured here and judged by the signing policy (`trace decide`)")
    if result.passed:
        console.print("[green]PASS[/]: every claim holds")
    else:
        console.print(f"[bold red]FAIL[/]: {', '.join(result.reasons)}")


def _bundle(
    args: argparse.Namespace,
    fork: Path,
    policy: Path,
    verified: tuple[Graph, RunResult, VerifyResult],
    ran: tuple[dt.datetime, dt.datetime],
) -> int:
    from engine.bundle_verify.produce import produce_bundle, report_lines, request_from_args

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
        ran,
    )
    print("\n".join(report_lines(outcome)), file=sys.stderr if args.json else sys.stdout)
    return 1 if outcome.denied else 0


def cmd_verify(args: argparse.Namespace) -> int:
    if (args.sign or args.key) and args.bundle is None:
        from engine.errors import UsageError

        raise UsageError("--sign/--key sign a bundle", hint="add --bundle DIR")
    fork = (args.fork or find_fork(args.candidate) or Path.cwd()).resolve()
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
    )
    ran = (began, dt.datetime.now(dt.UTC))
    result = verified[2]
    text = result.model_dump_json(indent=2, by_alias=True) + "\n"
    out = args.out or (args.state_dir or fork / ".trace") / "verify" / f"{result.candidate}.json"
    write_atomic(out, text)
    if args.json:
        sys.stdout.write(text)
    else:
        print_table(result)
        print(f"result: {out}")
    status = 0 if result.passed else 1
    if args.bundle is not None:
        assert policy is not None
        status = max(status, _bundle(args, fork, policy, verified, ran))
    return status
