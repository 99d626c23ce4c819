"""`verify-bundle --replay`: rebuild the steps from the replay record and compare outcomes.

First every pin is compared with this checkout (candidate, graph and template files by sha256,
`trace:` pins against trace's data dir, the fork's git commit and tree, the engine version): a
difference is `replay.pin-mismatch`, and nothing is built. Then the graph is loaded exactly as
`trace verify` loads it (`verify_context(candidate, fork=root)`), the package set's digest is
compared with its pin, and the graph is run through `engine.run.run_graph` in a fresh state
directory (so no answer comes from a cache index; Nix rebuilds what its store does not hold).
Every recorded step's key and outcome digest are compared with the replay record and with
`outcomes/<step>.json`; when the bundle holds `trace verify`'s result (verify-result.json), the
rebuilt steps are judged again and the verdict, every claim, every reproducer run record and the
expectation gate's record must equal the bundled ones. A difference is `replay.mismatch`.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from engine.bundle_verify.signature import Check
from engine.errors import TraceError
from engine.evidence.bundle import OUTCOMES_DIR, REPLAY_PATH
from engine.evidence.collect import VERIFY_RESULT_PATH
from engine.evidence.replay import FilePin, ReplayRecord, fork_pin, outcome_digest, pinned_path
from engine.evidence.statement import Statement
from engine.hashing import digest_json
from engine.run import RunResult


def _pin_problems(rec: ReplayRecord, root: Path) -> list[str]:
    from engine import __version__

    problems: list[str] = []
    pins: list[FilePin] = [rec.candidate, rec.graph, *rec.graph_files, *rec.templates]
    for pin in pins:
        path = pinned_path(pin.path, root)
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


def verdict_view(result: Any) -> dict[str, Any]:
    """What a replay must reproduce of a VerifyResult: verdict, claims, run and gate records.

    Step statuses (built/cached), store paths and prose are left out: they describe the run, not
    what it showed.
    """
    doc = result.model_dump(mode="json", by_alias=True)
    return {
        "passed": doc["passed"],
        "reasons": doc["reasons"],
        "claims": [(c["claim"], c["holds"], c["reason"]) for c in doc["claims"]],
        "pre": {k: doc["pre"][k] for k in ("build_ok", "runs", "target_ran", "flaky")},
        "post": {k: doc["post"][k] for k in ("build_ok", "runs", "target_ran", "flaky")},
        "expectation": doc["expectation"],
        "deterministic": doc["deterministic"],
        "flaky": doc["flaky"],
    }


def _verdict_differences(recorded: dict[str, Any], replayed: dict[str, Any]) -> list[str]:
    return [
        f"verify result: {key} differs from the bundled {VERIFY_RESULT_PATH}"
        for key in recorded
        if recorded[key] != replayed.get(key)
    ]


def _judge_again(candidate: Any, graph: Any, run: RunResult, payload: Path) -> list[str]:
    from engine.verify.result import VerifyResult
    from engine.verify.verdict import judge

    path = payload / VERIFY_RESULT_PATH
    if not path.is_file():
        return []
    try:
        bundled = VerifyResult.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        return [f"{VERIFY_RESULT_PATH}: not a verify result ({str(exc).splitlines()[0]})"]
    return _verdict_differences(verdict_view(bundled), verdict_view(judge(candidate, graph, run)))


def replay_checks(
    statement: Statement, payload: Path, *, root: Path, state: Path | None = None
) -> list[Check]:
    """Rebuild from the replay record in the checkout at `root` (the fork) and compare."""
    del statement  # the replay record's digest was checked against it already
    try:
        rec = ReplayRecord.model_validate_json((payload / REPLAY_PATH).read_bytes())
    except (OSError, ValidationError) as exc:
        detail = str(exc).splitlines()[0]
        return [Check(name="replay", ok=False, reason="replay.failed", detail=detail)]
    root = root.resolve()
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
    from engine.verify.command import verify_context

    try:
        candidate = load_candidate(pinned_path(rec.candidate.path, root))
        graph = load_graph(
            pinned_path(rec.graph.path, root),
            root=root,
            context=verify_context(candidate, root),
            variant=candidate.spec.id,
        )
        pinned_set = rec.package_set.digest if rec.package_set else None
        now_set = graph.package_set.digest if graph.package_set else None
        if pinned_set is not None and pinned_set != now_set:
            detail = f"package set digest {str(now_set)[:12]}…, pinned {pinned_set[:12]}…"
            return [
                Check(name="replay pins", ok=False, reason="replay.pin-mismatch", detail=detail)
            ]
        with tempfile.TemporaryDirectory(prefix="trace-replay-") as tmp:
            result = run_graph(graph, state or Path(tmp))
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
        if not differ:
            differ = _judge_again(candidate, graph, result, payload)
    except TraceError as exc:
        return [Check(name="replay", ok=False, reason="replay.failed", detail=exc.render())]
    if differ:
        return [Check(name="replay", ok=False, reason="replay.mismatch", detail="; ".join(differ))]
    judged = " and judged again" if (payload / VERIFY_RESULT_PATH).is_file() else ""
    return [
        Check(
            name="replay",
            ok=True,
            detail=f"{len(rec.steps)} steps rebuilt{judged}, every outcome as recorded",
        )
    ]
