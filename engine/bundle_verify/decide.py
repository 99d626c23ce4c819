"""`trace decide` as a library: the signing policy's decision on one candidate, judged from its
cached builds, written as a decision record (STATE/decisions/ID.json by default).

The evidence is the verdict judged from the cached builds (refused when the candidate was not
verified with its current inputs), never a result file; a `result` file is only cross-checked
against it. `trace decide` prints what this returns; `trace draft` decides with it too.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.files import write_atomic

if TYPE_CHECKING:
    from engine.candidate import Candidate
    from engine.model import Graph
    from engine.policy.evidence import Evidence
    from engine.policy.signing import Decision
    from engine.run import RunResult


@dataclass(frozen=True)
class Decided:
    """A decision, the record written for it (its JSON document) and where it was written."""

    decision: Decision
    record: dict[str, Any]
    out: Path


def built_evidence(
    cand: Candidate,
    fork: Path,
    state: Path,
    result_file: Path | None,
    gate_files: Sequence[Path],
    signing_policy: Path,
    seen: list[tuple[Graph, RunResult]] | None = None,
) -> Evidence:
    """The evidence source of `trace decide`: the verdict judged from the cached builds (refused
    when the candidate was not verified with its current inputs), never a result file; a
    `--result` file is only cross-checked against it. Gate records come from the run's outcomes
    and `--gate` files. The sources named are the bundle payload files these become. The graph
    is loaded with the deciding `signing_policy` (evidence verified under another is refused)."""
    from engine.evidence.collect import evidence_sources, gate_records, read_gate_files
    from engine.policy.evidence import Evidence, SourceRef
    from engine.verify.cached import cached_verify, check_result_file

    graph, run, result = cached_verify(cand, fork.resolve(), state, signing_policy=signing_policy)
    if seen is not None:  # the caller memoises what the verdict was made from (engine/fork/warm.py)
        seen.append((graph, run))
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
        review=candidate_review(cand, state / "transcripts"),
    )


def decide_candidate(
    candidate_file: Path,
    *,
    today: dt.date,
    fork: Path | None = None,
    state_dir: Path | None = None,
    out: Path | None = None,
    result: Path | None = None,
    gates: Sequence[Path] = (),
    waivers: Path | None = None,
    maintainers: Path | None = None,
    routing: Path | None = None,
    signing: Path | None = None,
    seen: list[tuple[Graph, RunResult]] | None = None,
) -> Decided:
    """Route and decide one candidate and write the decision record (durably, atomically)."""
    from engine.candidate import load_candidate
    from engine.gates.context import signing_policy_path
    from engine.policy.routing import route_candidate
    from engine.policy.signed_waiver import waiver_trust
    from engine.policy.signing import decide, load_signing
    from engine.policy.waivers import NO_WAIVERS, load_waivers
    from engine.verify.pipeline import find_fork

    cand = load_candidate(candidate_file)
    fork = fork or find_fork(cand.path) or cand.dir
    state = (state_dir or fork / ".trace").resolve()
    route = route_candidate(load_candidate(candidate_file), routing)
    # the same default as `trace verify`: the fork's own policy if it has one, else the shipped
    signing_path = signing_policy_path(signing, fork.resolve())
    policy, catalogue = load_signing(signing_path)
    waived = NO_WAIVERS
    if waivers is not None:
        trust = waiver_trust(
            signing_policy=signing_path,
            fork=fork.resolve(),
            candidate=cand,
            maintainers=maintainers,
        )
        waived = load_waivers(waivers, catalogue, trust)
    evidence = built_evidence(cand, fork, state, result, gates, signing_path, seen)
    decision = decide(evidence, route, policy, catalogue, waived, today)
    where = (out or state / "decisions" / f"{cand.spec.id}.json").resolve()
    doc = decision.model_dump(mode="json", by_alias=True)
    write_atomic(where, json.dumps(doc, indent=2, sort_keys=True) + "\n", durable=True)
    return Decided(decision=decision, record=doc, out=where)
