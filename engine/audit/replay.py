"""`verify-bundle --replay`: rebuild the steps from the replay record and compare outcomes.

First every pin is compared with this checkout (candidate, graph and template files and the
signing policy by sha256, `trace:` pins against trace's data dir, the fork's git commit and tree,
the engine version): a difference is `replay.pin-mismatch`, and nothing is built. Then the graph
is loaded exactly as `trace verify` loaded it (`verify_context(candidate, root, signing_policy)`
with the pinned signing policy, whose thresholds the gate steps apply), the package set's digest is
compared with its pin, and every recorded step is instantiated again: its key and derivation
path must equal the record's (else `replay.pin-mismatch`). Then each step is really rebuilt
(engine.audit.rebuild_steps): built when the store lacks its output, and rebuilt with
`nix --check` otherwise, so nothing is merely found in the store. Every rebuilt outcome is
compared with the replay record's digest and with `outcomes/<step>.json`; when the bundle holds
`trace verify`'s result (verify-result.json), the rebuilt steps are judged again and the
verdict, every claim, every reproducer run record and the expectation gate's record must equal
the bundled ones. A difference is `replay.mismatch`.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from engine.audit.rebuild_steps import Rebuilt, instantiate, rebuild
from engine.audit.signature import Check
from engine.errors import TraceError
from engine.evidence.bundle import OUTCOMES_DIR, REPLAY_PATH
from engine.evidence.collect import VERIFY_RESULT_PATH
from engine.evidence.redact import redact_value
from engine.evidence.replay import FilePin, ReplayRecord, fork_pin, outcome_digest, pinned_path
from engine.evidence.statement import Statement
from engine.hashing import digest_json
from engine.plan import graph_id
from engine.run import RunResult


def _pin_problems(rec: ReplayRecord, root: Path) -> list[str]:
    from engine import __version__

    problems: list[str] = []
    pins: list[FilePin] = [rec.candidate, rec.graph, *rec.graph_files, *rec.templates]
    if rec.signing_policy is not None:
        pins.append(rec.signing_policy)
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
        if now.commit is None:
            problems.append(
                f"package set {rec.package_set.path}: {root} is not a git checkout (or git is "
                f"not installed), the bundle pins commit {rec.package_set.commit}: replay in a "
                "clone of the fork at that commit"
            )
        elif (now.commit, now.tree) != (rec.package_set.commit, rec.package_set.tree):
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
    from engine.verify.verdict import judge
    from engine.verify_result import VerifyResult

    path = payload / VERIFY_RESULT_PATH
    if not path.is_file():
        return []
    try:
        bundled = VerifyResult.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        return [f"{VERIFY_RESULT_PATH}: not a verify result ({str(exc).splitlines()[0]})"]
    # the bundled result was redacted before it was hashed: compare like with like
    # (and redaction is idempotent, so the bundled side goes through it too: same shapes)
    replayed, _ = redact_value(verdict_view(judge(candidate, graph, run)))
    recorded, _ = redact_value(verdict_view(bundled))
    return _verdict_differences(recorded, replayed)


def _expected_failures(payload: Path) -> set[str]:
    """Steps the bundled verify result records as failed or skipped (a replay may fail them)."""
    from engine.verify_result import VerifyResult

    path = payload / VERIFY_RESULT_PATH
    try:
        bundled = VerifyResult.model_validate_json(path.read_bytes())
    except (OSError, ValidationError):
        return set()
    return {sid for sid, ref in bundled.steps.items() if ref.status in ("failed", "skipped")}


def _as_run(graph: Any, rebuilt: list[Rebuilt]) -> RunResult:
    """The rebuild as a RunResult for judging: --check results as `deterministic`."""
    from engine.run import StepResult

    steps = {}
    for r in rebuilt:
        ok = r.how != "failed"
        checked = r.how in ("checked", "differs") and graph.steps[r.id].check
        steps[r.id] = StepResult(
            id=r.id,
            key=r.key,
            status="built" if ok else "failed",
            drv=r.drv,
            out=r.out if ok else None,
            outcome=r.outcome,
            deterministic=(r.how == "checked") if checked else None,
            log_tail=r.log_tail or None,
        )
    return RunResult(graph=graph_id(graph), steps=steps, evaluated=True)


def _counts(rebuilt: list[Rebuilt]) -> str:
    fresh = sum(r.fresh for r in rebuilt)
    checked = sum(r.how == "checked" for r in rebuilt)
    differs = sum(r.how == "differs" for r in rebuilt)
    parts = [f"{fresh} built (not in the store)"] if fresh else []
    parts.append(f"{checked} rebuilt with nix --check, bit-identical")
    if differs:
        parts.append(f"{differs} rebuilt with other bytes")
    return ", ".join(parts)


def replay_checks(statement: Statement, payload: Path, *, root: Path) -> list[Check]:
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
        return [_pins_differ(problems)]
    from engine.candidate import load_candidate
    from engine.graph import load_graph
    from engine.verify.fork_graph import verify_context

    try:
        candidate = load_candidate(pinned_path(rec.candidate.path, root))
        policy = pinned_path(rec.signing_policy.path, root) if rec.signing_policy else None
        graph = load_graph(
            pinned_path(rec.graph.path, root),
            root=root,
            context=verify_context(candidate, root, policy),
            variant=candidate.spec.id,
        )
        pinned_set = rec.package_set.digest if rec.package_set else None
        now_set = graph.package_set.digest if graph.package_set else None
        if pinned_set is not None and pinned_set != now_set:
            return [
                _pins_differ(
                    [f"package set digest {str(now_set)[:12]}…, pinned {pinned_set[:12]}…"]
                )
            ]
        absent = sorted(set(rec.steps) - set(graph.steps))
        if absent:
            return [_pins_differ([f"{sid}: not in the graph" for sid in absent])]
        ids = [sid for sid in graph.order if sid in rec.steps]
        with tempfile.TemporaryDirectory(prefix="trace-replay-") as tmp:
            keys, drvs = instantiate(graph, ids, Path(tmp))
            pins = _step_pin_problems(rec, keys, drvs)
            if pins:
                return [_pins_differ(pins)]
            rebuilt = rebuild(graph, keys, drvs, Path(tmp))
        differ: list[str] = []
        may_fail = _expected_failures(payload)
        for r in rebuilt:
            pin = rec.steps[r.id]
            if r.how == "failed" and r.id not in may_fail:
                differ.append(f"{r.id}: the rebuild failed ({r.log_tail[-200:] or 'no log'})")
            elif outcome_digest(r.outcome) != pin.outcome_sha256:
                differ.append(f"{r.id}: outcome differs from the replay record's")
            elif (recorded := _recorded_outcome(payload, r.id)) is not None and recorded != (
                outcome_digest(r.outcome)
            ):
                differ.append(f"{r.id}: outcome differs from {OUTCOMES_DIR}/{r.id}.json")
        if not differ:
            differ = _judge_again(candidate, graph, _as_run(graph, rebuilt), payload)
    except TraceError as exc:
        return [Check(name="replay", ok=False, reason="replay.failed", detail=exc.render())]
    if differ:
        return [Check(name="replay", ok=False, reason="replay.mismatch", detail="; ".join(differ))]
    judged = " and judged again" if (payload / VERIFY_RESULT_PATH).is_file() else ""
    return [
        Check(
            name="replay",
            ok=True,
            detail=f"{len(rebuilt)} steps replayed ({_counts(rebuilt)}){judged}, "
            "every outcome as recorded",
        )
    ]


def _pins_differ(problems: list[str]) -> Check:
    return Check(
        name="replay pins", ok=False, reason="replay.pin-mismatch", detail="; ".join(problems)
    )


def _step_pin_problems(rec: ReplayRecord, keys: dict[str, str], drvs: dict[str, str]) -> list[str]:
    """Each step's key and derivation, instantiated here, against the replay record's."""
    problems: list[str] = []
    for sid, pin in sorted(rec.steps.items()):
        if keys[sid] != pin.key:
            problems.append(f"{sid}: key {keys[sid][:12]}…, pinned {pin.key[:12]}…")
        elif pin.drv is not None and drvs[sid] != pin.drv:
            problems.append(f"{sid}: derivation {drvs[sid]}, pinned {pin.drv}")
    return problems
