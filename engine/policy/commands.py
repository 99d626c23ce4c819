"""`trace route CANDIDATE` and `trace decide CANDIDATE`. Handlers import their work lazily."""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import UsageError
from engine.files import write_atomic

if TYPE_CHECKING:
    from engine.candidate import Candidate
    from engine.policy.evidence import Evidence
    from engine.policy.routing import RouteDecision
    from engine.policy.signing import Decision, Reason


def register(sub: Any) -> None:
    p = sub.add_parser(
        "route",
        help="routing state of a candidate (before any model sees it): rule and policy version",
    )
    p.add_argument("candidate", type=Path, help="candidate TOML file")
    p.add_argument("--policy", type=Path, default=None, help="routing policy (default: shipped)")
    p.add_argument("--json", action="store_true", help="print the decision as JSON")
    p.set_defaults(handler=cmd_route)

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
    p.add_argument(
        "--gate",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="an extra gate record JSON (trace.gate/v1); repeatable",
    )
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


def _route(candidate_path: Path, policy_path: Path | None) -> RouteDecision:
    from engine.candidate import load_candidate
    from engine.policy.routing import route_candidate

    return route_candidate(load_candidate(candidate_path), policy_path)


def _route_text(d: RouteDecision) -> str:
    f = d.facts
    score = f" (CVSS {f.score:g})" if f.score is not None else ""
    rule = d.rule or "none matched: reject is the default"
    lines = [
        f"{d.state}",
        f"  rule:     {rule}",
        f"  policy:   {d.policy.name} {d.policy.version} (sha256 {d.policy.digest[:16]})",
        f"  critical: {d.critical_packages.name} {d.critical_packages.version}",
        f"  facts:    {f.advisory}, severity {f.severity}{score}, "
        f"ecosystems {', '.join(f.ecosystems) or 'none'}, "
        f"upstream fix {'yes' if f.upstream_fix else 'no'}, "
        f"critical {'yes' if f.critical else 'no'}, origin {f.origin}"
        + (", WITHDRAWN" if f.withdrawn else ""),
    ]
    if d.state == "auto-merge-eligible":
        lines.append("  (auto-merge means a branch of the fork, never an upstream push)")
    return "\n".join(lines)


def cmd_route(args: argparse.Namespace) -> int:
    from engine.candidate import load_candidate
    from engine.policy.routing import route_candidate

    # before any model sees the candidate: patches, reproducer and [expect] may not exist yet
    candidate = load_candidate(args.candidate, for_routing=True)
    decision = route_candidate(candidate, args.policy)
    if args.json:
        print(json.dumps(decision.model_dump(mode="json", by_alias=True), indent=2))
    else:
        print(_route_text(decision))
    return 0


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


def _built_evidence(
    cand: Candidate,
    fork: Path,
    state: Path,
    result_file: Path | None,
    gate_files: list[Path],
    signing_policy: Path,
) -> Evidence:
    """The evidence source of `trace decide`: the verdict judged from the cached builds (refused
    when the candidate was not verified with its current inputs), never a result file; a
    `--result` file is only cross-checked against it. Gate records come from the run's outcomes
    and `--gate` files. The sources named are the bundle payload files these become. The graph
    is loaded with the deciding `signing_policy` (evidence verified under another is refused)."""
    from engine.evidence.collect import evidence_sources, gate_records, read_gate_files
    from engine.policy.evidence import Evidence, SourceRef
    from engine.verify.cached import cached_verify, check_result_file

    _, run, result = cached_verify(cand, fork.resolve(), state, signing_policy=signing_policy)
    if result_file is not None:
        check_result_file(result_file, result)
    extra = read_gate_files(gate_files)
    gates = gate_records(result, run, [(src, rec) for src, rec, _ in extra])
    from_files = {rec.gate for _, rec, _ in extra}
    own = {k: v for k, v in gates.items() if k not in from_files}
    sources = evidence_sources(result, own, fork.resolve())
    sources += [
        SourceRef(path=src, sha256=hashlib.sha256(raw).hexdigest()) for src, _, raw in extra
    ]
    from engine.roles.claims import candidate_review

    return Evidence(
        candidate=cand.spec.id,
        verify=result,
        gates=gates,
        sources=sources,
        review=candidate_review(cand),
    )


def cmd_decide(args: argparse.Namespace) -> int:
    from engine.candidate import load_candidate
    from engine.gates.context import signing_policy_path
    from engine.policy.signed_waiver import waiver_trust
    from engine.policy.signing import decide, load_signing
    from engine.policy.waivers import NO_WAIVERS, load_waivers
    from engine.verify.command import find_fork

    today = _today(args.today)
    cand = load_candidate(args.candidate)
    fork = args.fork or find_fork(cand.path) or cand.dir
    state = (args.state_dir or fork / ".trace").resolve()
    cid = cand.spec.id
    routing = _route(args.candidate, args.routing)
    # the same default as `trace verify`: the fork's own policy if it has one, else the shipped
    signing_path = signing_policy_path(args.signing, fork.resolve())
    signing, catalogue = load_signing(signing_path)
    waivers = NO_WAIVERS
    if args.waivers is not None:
        trust = waiver_trust(
            signing_policy=signing_path,
            fork=fork.resolve(),
            candidate=cand,
            maintainers=args.maintainers,
        )
        waivers = load_waivers(args.waivers, catalogue, trust)
    evidence = _built_evidence(cand, fork, state, args.result, args.gate, signing_path)
    decision = decide(evidence, routing, signing, catalogue, waivers, today)
    out = (args.out or state / "decisions" / f"{cid}.json").resolve()
    doc = decision.model_dump(mode="json", by_alias=True)
    write_atomic(out, json.dumps(doc, indent=2, sort_keys=True) + "\n", durable=True)
    if args.json:
        print(json.dumps(doc, indent=2, sort_keys=True))
    else:
        print(_decision_text(decision, out))
    sys.stdout.flush()
    return 0 if decision.decision == "allow" else 1
