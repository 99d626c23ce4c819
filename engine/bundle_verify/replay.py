"""`verify-bundle --replay`: rebuild the steps from the replay record and compare outcomes.

First every pin is compared with this checkout (candidate, graph and template files by sha256,
the fork's git commit and tree, the engine version): a difference is `replay.pin-mismatch`, and
nothing is built. Then the graph is loaded with the candidate's context and run through
`engine.run.run_graph` in a fresh state directory (so no answer comes from a cache index; Nix
rebuilds what its store does not hold), and every recorded step's key and outcome digest are
compared: a difference is `replay.mismatch`.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path

from pydantic import ValidationError

from engine.bundle_verify.signature import Check
from engine.errors import TraceError
from engine.evidence.bundle import OUTCOMES_DIR, REPLAY_PATH
from engine.evidence.replay import FilePin, ReplayRecord, fork_pin, outcome_digest
from engine.evidence.statement import Statement
from engine.hashing import digest_json


def _pin_problems(rec: ReplayRecord, root: Path) -> list[str]:
    from engine import __version__

    problems: list[str] = []
    pins: list[FilePin] = [rec.candidate, rec.graph, *rec.graph_files, *rec.templates]
    for pin in pins:
        path = root / pin.path
        try:
            actual = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            problems.append(f"{pin.path}: missing")
            continue
        if actual != pin.sha256:
            problems.append(f"{pin.path}: sha256 {actual[:12]}…, pinned {pin.sha256[:12]}…")
    if rec.package_set is not None and rec.package_set.commit is not None:
        now = fork_pin(root / rec.package_set.path, root)
        if (now.commit, now.tree) != (rec.package_set.commit, rec.package_set.tree):
            problems.append(
                f"package set {rec.package_set.path}: at {now.commit}, "
                f"pinned {rec.package_set.commit}"
            )
    if rec.engine_version != __version__:
        problems.append(f"engine {__version__}, pinned {rec.engine_version}")
    return problems


def _recorded_outcome(payload: Path, sid: str) -> str | None:
    path = payload / OUTCOMES_DIR / f"{sid}.json"
    try:
        return digest_json(json.loads(path.read_bytes()))
    except (OSError, ValueError):
        return None


def replay_checks(
    statement: Statement, payload: Path, *, root: Path, state: Path | None = None
) -> list[Check]:
    del statement  # the replay record's digest was checked against it already
    try:
        rec = ReplayRecord.model_validate_json((payload / REPLAY_PATH).read_bytes())
    except (OSError, ValidationError) as exc:
        detail = str(exc).splitlines()[0]
        return [Check(name="replay", ok=False, reason="replay.failed", detail=detail)]
    problems = _pin_problems(rec, root)
    if problems:
        return [
            Check(
                name="replay pins",
                ok=False,
                reason="replay.pin-mismatch",
                detail="; ".join(problems),
            )
        ]
    from engine.candidate import load_candidate
    from engine.graph import load_graph
    from engine.run import run_graph

    try:
        candidate = load_candidate(root / rec.candidate.path)
        graph = load_graph(
            root / rec.graph.path, root=root, context={"candidate": candidate.context()}
        )
        with tempfile.TemporaryDirectory(prefix="trace-replay-") as tmp:
            result = run_graph(graph, state or Path(tmp))
    except TraceError as exc:
        return [Check(name="replay", ok=False, reason="replay.failed", detail=exc.render())]
    differ: list[str] = []
    for sid, pin in sorted(rec.steps.items()):
        got = result.steps.get(sid)
        if got is None:
            differ.append(f"{sid}: not in the graph")
        elif got.key != pin.key:
            differ.append(f"{sid}: key {got.key[:12]}…, recorded {pin.key[:12]}…")
        elif outcome_digest(got.outcome) != pin.outcome_sha256:
            differ.append(f"{sid}: outcome differs from the replay record's")
        elif (recorded := _recorded_outcome(payload, sid)) is not None and recorded != (
            outcome_digest(got.outcome)
        ):
            differ.append(f"{sid}: outcome differs from {OUTCOMES_DIR}/{sid}.json")
    if differ:
        return [Check(name="replay", ok=False, reason="replay.mismatch", detail="; ".join(differ))]
    return [
        Check(
            name="replay",
            ok=True,
            detail=f"{len(rec.steps)} steps rebuilt, every outcome as recorded",
        )
    ]
