"""The bundle stage: the payload files of a judged build and the statement over them with the
routing and signing decisions, policy files and replay record (engine.evidence.collect)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.pipeline.values import Decided, Judged

if TYPE_CHECKING:
    from engine.build_records import GateRecord
    from engine.evidence.bundle import Assembled
    from engine.evidence.payload import PayloadEntry
    from engine.evidence.replay import RunHost, SourcePin


def payload_entries(
    judged: Judged,
    gates: dict[str, GateRecord],
    root: Path,
    extra: Sequence[PayloadEntry] = (),
) -> list[PayloadEntry]:
    """The candidate's files, the run's outcomes, the verify result, the gate records, `extra`."""
    from engine.evidence.collect import (
        candidate_entries,
        gate_entries,
        outcome_entries,
        verify_entry,
    )

    return [
        *candidate_entries(judged.candidate),
        *outcome_entries(judged.run),
        verify_entry(judged.verify, root),
        *gate_entries(gates),
        *extra,
    ]


def assemble(
    judged: Judged,
    entries: list[PayloadEntry],
    decided: Decided,
    *,
    root: Path,
    signing_policy: Path,
    builder_id: str,
    dirty: bool | None = None,
    source: SourcePin | None = None,
    host: RunHost | None = None,
) -> Assembled:
    """The assembled statement over `entries` and the decisions (`dirty`, `source`, `host`:
    see engine.evidence.collect.assemble_evidence), with the run's step timings beside them."""
    from engine.evidence.collect import assemble_evidence

    return assemble_evidence(
        judged.candidate,
        judged.graph,
        judged.run,
        entries,
        decided.routing,
        decided.decision,
        root=root,
        signing_policy=signing_policy,
        builder_id=builder_id,
        dirty=dirty,
        ran=judged.ran,
        source=source,
        host=host,
        timings=timings_of(judged),
    )


def timings_of(judged: Judged) -> dict[str, Any] | None:
    """The trace.step-timings/v1 document of the judged run (None when no clock watched it)."""
    if judged.clock is None:
        return None
    from engine.evidence.timings import registration_times, step_timings

    needs = {sid: step.needs for sid, step in judged.graph.steps.items()}
    ended = int(judged.ran[1].timestamp() * 1e9)
    built = {s.out for s in judged.run.steps.values() if s.status == "built" and s.out}
    return step_timings(
        judged.run, judged.clock, needs, max(ended, judged.clock.began), registration_times(built)
    )
