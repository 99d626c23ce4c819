"""The decide stage: the signing policy over a judged build, its gate records, the review
evidence of the candidate folder and the valid signed waivers (`trace decide` in-process)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING

from engine.pipeline.values import Decided, Judged

if TYPE_CHECKING:
    from engine.build_records import GateRecord
    from engine.policy.evidence_view import SourceRef
    from engine.policy.routing import RouteDecision
    from engine.policy.waivers import WaiverSet


def decide(
    judged: Judged,
    gates: dict[str, GateRecord],
    sources: list[SourceRef],
    routing: RouteDecision,
    *,
    policy: Path,
    waivers: WaiverSet,
    today: dt.date,
    transcripts: Path | None,
) -> Decided:
    """The signing decision; `transcripts`: the state's transcript store, searched for the
    review evidence of a model-drafted candidate (engine.roles.claims.candidate_review)."""
    from engine.evidence.decisions import signing_decision
    from engine.roles.claims import candidate_review

    decision = signing_decision(
        judged.verify,
        gates,
        routing,
        sources,
        policy=policy,
        waivers=waivers,
        today=today,
        review=candidate_review(judged.candidate, transcripts),
    )
    return Decided(routing, decision, waivers)
