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
    from engine.build_records import GateRecord
    from engine.candidate import Candidate
    from engine.graphtypes import Graph
    from engine.pipeline.values import Judged
    from engine.policy.evidence_view import SourceRef
    from engine.policy.signing_decision import Decision
    from engine.run import RunResult


@dataclass(frozen=True)
class Recorded:
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
) -> tuple[Judged, dict[str, GateRecord], list[SourceRef]]:
    """The evidence source of `trace decide`: the verdict judged from the cached builds (refused
    when the candidate was not verified with its current inputs), never a result file; a
    `--result` file is only cross-checked against it. Gate records come from the run's outcomes
    and `--gate` files. The sources named are the bundle payload files these become. The graph
    is loaded with the deciding `signing_policy` (evidence verified under another is refused)."""
    from engine.evidence.collect import evidence_sources, gate_records, read_gate_files
    from engine.pipeline.build import verified_cached
    from engine.policy.evidence_view import SourceRef
    from engine.verify.cached import check_result_file

    judged = verified_cached(cand, fork.resolve(), state, signing_policy=signing_policy)
    if seen is not None:  # the caller memoises what the verdict was made from (engine/fork/warm.py)
        seen.append((judged.graph, judged.run))
    if result_file is not None:
        check_result_file(result_file, judged.verify)
    extra = read_gate_files(gate_files)
    gates = gate_records(judged.verify, judged.run, [(src, rec) for src, rec, _ in extra])
    from_files = {rec.gate for _, rec, _ in extra}
    own = {k: v for k, v in gates.items() if k not in from_files}
    sources = evidence_sources(judged.verify, own, fork.resolve())
    sources += [
        SourceRef(path=src, sha256=hashlib.sha256(raw).hexdigest()) for src, _, raw in extra
    ]
    return judged, gates, sources


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
) -> Recorded:
    """Route and decide one candidate and write the decision record (durably, atomically)."""
    from engine.candidate import load_candidate
    from engine.evidence.decisions import waiver_set
    from engine.gates.context import signing_policy_path
    from engine.pipeline.decide import decide
    from engine.pipeline.route import route
    from engine.policy.signed_waiver import waiver_trust
    from engine.policy.signing_decision import load_signing
    from engine.policy.waivers import NO_WAIVERS
    from engine.verify.fork_graph import find_fork

    cand = load_candidate(candidate_file)
    fork = fork or find_fork(cand.path) or cand.dir
    state = (state_dir or fork / ".trace").resolve()
    routed = route(cand, routing)
    # the same default as `trace verify`: the fork's own policy if it has one, else the shipped
    signing_path = signing_policy_path(signing, fork.resolve())
    load_signing(signing_path)  # a broken signing policy is refused before the builds are read
    waived = NO_WAIVERS
    if waivers is not None:
        trust = waiver_trust(
            signing_policy=signing_path,
            fork=fork.resolve(),
            candidate=cand,
            maintainers=maintainers,
        )
        waived = waiver_set(waivers, signing_path, trust)
    judged, records, sources = built_evidence(cand, fork, state, result, gates, signing_path, seen)
    decision = decide(
        judged,
        records,
        sources,
        routed,
        policy=signing_path,
        waivers=waived,
        today=today,
        transcripts=state / "transcripts",
    ).decision
    where = (out or state / "decisions" / f"{cand.spec.id}.json").resolve()
    doc = decision.model_dump(mode="json", by_alias=True)
    write_atomic(where, json.dumps(doc, indent=2, sort_keys=True) + "\n", durable=True)
    return Recorded(decision=decision, record=doc, out=where)
