"""`trace draft ADVISORY-OR-CANDIDATE`: the model roles, verify and decide, in one command."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser(
        "draft",
        help="draft a fix with the model roles: Patcher, Reproducer, verify, Reviewer, decide",
        description="Exit 0 when the drafted candidate may be signed; 1 when a step's output was "
        "refused or the decision denies (draft.json says why); 2 on bad input, missing "
        "credentials, an unreachable endpoint or a deadline (nothing written).",
    )
    p.add_argument("target", type=Path, help="an OSV advisory JSON or a candidate.toml skeleton")
    p.add_argument("--fork", type=Path, default=None, help="the fork (default: found upward)")
    p.add_argument("--agent", type=Path, default=None, help="agent file (default: "
                   "FORK/trace/agent.toml, else trace's graphs/agent.toml)")  # fmt: skip
    p.add_argument("--package", default=None, help="with an advisory naming several packages")
    p.add_argument("--source", type=Path, default=None,
                   help="the package's source tree (default: FORK/pkgs/PACKAGE/src)")  # fmt: skip
    p.add_argument("--state-dir", type=Path, default=None, help="default: FORK/.trace")
    p.add_argument("--refresh", action="store_true", help="ask the models again (no replay)")
    p.add_argument(
        "--upstream-mirror",
        type=Path,
        default=None,
        metavar="DIR",
        help="local mirror of upstream patches (COMMIT.patch) for the resolver",
    )
    p.add_argument(
        "--fetch-upstream",
        action="store_true",
        help="fetch the FIX commit's patch from its forge (URL.patch, 30 s deadline) when the "
        "mirror lacks it; kept in --upstream-mirror when given",
    )
    p.add_argument("--signing-policy", type=Path, default=None)
    p.add_argument("-j", "--jobs", type=int, default=None)
    p.add_argument("--json", action="store_true", help="print draft.json")
    p.set_defaults(handler=cmd_draft)


def _skeleton(args: argparse.Namespace, fork: Path) -> tuple[Path, Path | None]:
    """The skeleton to draft from, and its folder when this run creates it (removed again
    when the draft ends with an error: nothing half-written)."""
    from engine.advisory import load_advisory
    from engine.agent.skeleton import skeleton_folder, write_skeleton
    from engine.errors import UsageError

    target: Path = args.target.resolve()
    if target.suffix == ".toml":
        return target, None
    adv = load_advisory(target)
    names = adv.packages
    package = args.package or (names[0] if len(names) == 1 else None)
    if package is None:
        raise UsageError(
            f"advisory {adv.id} names {len(names)} packages ({', '.join(names) or 'none'})",
            hint="pass --package NAME (the attribute in the fork)",
        )
    folder = skeleton_folder(fork, adv, package)
    created = None if folder.exists() else folder
    return write_skeleton(fork, adv, target.read_bytes(), package, adv.upstream_fix), created


def cmd_draft(args: argparse.Namespace) -> int:
    import shutil

    from engine.errors import TraceError, UsageError
    from engine.verify.pipeline import find_fork

    fork = (args.fork or find_fork(args.target) or Path.cwd()).resolve()
    if not (fork / "trace.toml").is_file() and not (fork / "default.nix").is_file():
        raise UsageError(f"{fork} is not a fork (no trace.toml or default.nix)",
                         hint="pass --fork")  # fmt: skip
    skeleton, created = _skeleton(args, fork)
    try:
        return _draft(args, fork, skeleton)
    except (TraceError, KeyboardInterrupt):
        if created is not None:  # the skeleton this run wrote from the advisory goes too
            shutil.rmtree(created, ignore_errors=True)
        raise


def _draft(args: argparse.Namespace, fork: Path, skeleton: Path) -> int:
    from engine.agent.draft import run_draft
    from engine.agent.options import DraftOptions
    from engine.candidate import load_candidate
    from engine.errors import UsageError
    from engine.paths import data_dir
    from engine.roles.agentfile import load_agent

    agent_file = args.agent or (
        fork / "trace" / "agent.toml"
        if (fork / "trace" / "agent.toml").is_file()
        else data_dir() / "graphs" / "agent.toml"
    )
    agent = load_agent(agent_file)
    spec = load_candidate(skeleton, for_routing=True).spec
    if spec.patches and not (skeleton.parent / "draft.json").is_file():
        raise UsageError(
            f"candidate '{spec.id}' already has patches and was not drafted by trace draft: "
            "drafting would overwrite them",
            hint="draft from its advisory JSON or a skeleton (trace scout writes them) instead",
        )
    state = (args.state_dir or fork / ".trace").resolve()
    source = (args.source or fork / "pkgs" / spec.package / "src").resolve()
    upstream = None
    if spec.advisory.upstream_fix:
        from engine.roles.resolver import resolve

        upstream = resolve(
            spec.advisory.upstream_fix, args.upstream_mirror, source, fetch=args.fetch_upstream
        ).model_dump()
    opts = DraftOptions(
        fork=fork,
        state=state,
        source=source,
        refresh=args.refresh,
        jobs=args.jobs,
        signing_policy=args.signing_policy,
        upstream=upstream,
    )
    rec = run_draft(skeleton, agent, opts)
    if args.json:
        print(json.dumps(rec.model_dump(mode="json", by_alias=True), indent=2, sort_keys=True))
    else:
        print(f"trace draft {rec.candidate} ({rec.package}): {rec.decision.decision}")
        for s in rec.steps:
            how = "replayed" if s.replayed else "asked"
            print(f"  {s.id:<10} {s.role:<10} {s.model} ({s.family}, {how}): {s.outcome}"
                  + (f" - {s.detail}" if s.detail else ""))  # fmt: skip
        if rec.verify_passed is not None:
            print(f"  verify: {'passed' if rec.verify_passed else 'failed'}")
        for r in rec.reviews:
            print(f"  review {r.step}: {r.verdict} by {r.model} "
                  f"({'cross-family' if r.cross_family else 'same family'})")  # fmt: skip
        acc = skeleton.parent / "accuracy.json"
        if acc.is_file() and rec.stage == "decide":
            summary = json.loads(acc.read_text(encoding="utf-8")).get("summary", "")
            print(f"  accuracy vs upstream: {summary}")
        for code in rec.decision.reasons:
            print(f"  deny: {code}")
        print(f"  record: {skeleton.parent / 'draft.json'}")
    sys.stdout.flush()
    return 0 if rec.decision.decision == "allow" else 1
