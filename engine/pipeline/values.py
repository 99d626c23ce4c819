"""The typed values handed from one stage of the candidate pipeline to the next."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.candidate import Candidate
    from engine.graphtypes import Graph
    from engine.otel import StepClock
    from engine.policy.routing import RouteDecision
    from engine.policy.signing_decision import Decision
    from engine.policy.waivers import WaiverSet
    from engine.run import RunResult
    from engine.verify_result import VerifyResult

Ran = tuple[dt.datetime, dt.datetime]


@dataclass(frozen=True)
class Located:
    """The load stage: the candidate, the fork it is verified in and the state directory."""

    candidate: Candidate
    fork: Path
    state: Path


@dataclass(frozen=True)
class Built:
    """The build stage: the verify graph and its run, every outcome read from the store; `ran`:
    when the run (or the check of a cached one) began and ended; `clock`: when each of its
    steps reached each state (the bundle's timings.json, engine.evidence.timings)."""

    candidate: Candidate
    graph: Graph
    run: RunResult
    ran: Ran
    clock: StepClock | None = field(default=None, kw_only=True)


@dataclass(frozen=True)
class Judged(Built):
    """The judge stage: a build and the verdict judged from its run."""

    verify: VerifyResult


@dataclass(frozen=True)
class Decided:
    """The route and decide stages: the routing decision, the signing decision and the valid
    signed waivers it applied."""

    routing: RouteDecision
    decision: Decision
    waivers: WaiverSet
