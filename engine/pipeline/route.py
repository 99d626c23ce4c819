"""The route stage: which review route the routing policy sends a candidate down."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.candidate import Candidate
    from engine.policy.routing import RouteDecision


def route(candidate: Candidate, routing_policy: Path | None) -> RouteDecision:
    """`trace route` in-process (`routing_policy` None: the shipped one)."""
    from engine.policy.routing import route_candidate

    return route_candidate(candidate, routing_policy)
