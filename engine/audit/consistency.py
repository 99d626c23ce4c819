"""Offline re-checks of what a bundle claims: no builds, only the bundled (signed) files.

A signature and matching digests prove who wrote the files, not that they agree with each other.
These checks run once every payload digest holds, and each failure has its own reason code:

- `decision.missing`: there is no `decisions/signing.json` that reads as a trace.decision/v1;
- `decision.denied`: the bundled signing decision does not say `allow`;
- `decision.evidence-mismatch`: a file the decision names as its evidence is not in the bundle
  with that sha256;
- `records.disagree`: the records contradict each other: `outcomes/<step>.json` against the
  run records and gate records inside `verify-result.json`, `gates/<gate>.json` against both,
  the replay record's step keys and outcome digests against `verify-result.json` and
  `outcomes/`, `decisions/routing.json` against the routing inside the signing decision,
  model.json's prompt digest against `prompt.txt`, each still-failing variant of the variants
  gate against its bundled reproducer (`variants/<id>/data/*` by sha256, `repro.sh` present;
  the fuzzing gate's found inputs likewise under `fuzz/<id>/`);
- `verify.not-reproduced`: the verify result's verdict does not follow from its own claims
  (passed, reasons, deterministic, flaky) or its claims from the expectation gate's record;
- `decision.not-reproduced`: the signing policy, run again over the bundled records with the
  very policy file the decision names (found by its sha256 among the known policy files), the
  bundled routing decision, the decision's date and the waivers it lists, decides otherwise.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import BaseModel, ValidationError

from engine.audit.pins import policy_files_with as _policy_files
from engine.audit.safefs import unsafe_name
from engine.audit.signature import Check
from engine.evidence.bundle import (
    MODEL_PATH,
    OUTCOMES_DIR,
    POLICY_DIR,
    PROMPT_PATH,
    REDACTION_PATH,
    REPLAY_PATH,
)
from engine.evidence.statement import Statement
from engine.hashing import digest_json

SIGNING_PATH = "decisions/signing.json"
ROUTING_PATH = "decisions/routing.json"
VERIFY_PATH = "verify-result.json"
GATES_DIR = "gates"
PAYLOAD_PREFIX = "payload/"
OK_STATUSES = ("built", "cached", "substituted", "reused")


def _fail(name: str, reason: str, problems: list[str]) -> Check:
    shown = problems[:6] + ([f"… and {len(problems) - 6} more"] if len(problems) > 6 else [])
    return Check(name=name, ok=False, reason=reason, detail="; ".join(shown))


def _check(name: str, reason: str, problems: list[str], passed: str) -> Check:
    """One check: failed with `reason` when there are problems, else passed saying what held."""
    return _fail(name, reason, problems) if problems else Check(name=name, ok=True, detail=passed)


def _json(payload: Path, rel: str) -> Any:
    """The parsed file, or None when it is absent; raises ValueError when it is not JSON."""
    path = payload / rel
    if not path.is_file():
        return None
    return json.loads(path.read_bytes())


def _dump(model: BaseModel) -> Any:
    return model.model_dump(mode="json", by_alias=True)


class Bundled:
    """The typed records of one payload directory (each None when absent)."""

    def __init__(self, payload: Path) -> None:
        from engine.build_records import GateRecord
        from engine.evidence.replay import ReplayRecord
        from engine.policy.routing import RouteDecision
        from engine.policy.signing_decision import Decision
        from engine.verify_result import VerifyResult

        self.payload = payload
        self.problems: list[str] = []
        self.decision = self._load(SIGNING_PATH, Decision)
        self.routing = self._load(ROUTING_PATH, RouteDecision)
        self.verify = self._load(VERIFY_PATH, VerifyResult)
        self.replay = self._load(REPLAY_PATH, ReplayRecord)
        self.gates: dict[str, Any] = {}
        gate_dir = payload / GATES_DIR
        for f in sorted(gate_dir.glob("*.json")) if gate_dir.is_dir() else []:
            rec = self._load(f"{GATES_DIR}/{f.name}", GateRecord)
            if rec is not None:
                if rec.gate != f.stem:
                    self.problems.append(f"{GATES_DIR}/{f.name} holds the record of '{rec.gate}'")
                self.gates[rec.gate] = rec

    def _load(self, rel: str, model: type[BaseModel]) -> Any:
        path = self.payload / rel
        if not path.is_file():
            return None
        try:  # JSON mode: the policy models are strict (a date is a string only in JSON)
            return model.model_validate_json(path.read_bytes())
        except (ValueError, ValidationError) as exc:
            self.problems.append(f"{rel}: not a {model.__name__} ({str(exc).splitlines()[0]})")
            return None

    def outcome(self, sid: str) -> Any:
        try:
            return _json(self.payload, f"{OUTCOMES_DIR}/{sid}.json")
        except ValueError:
            return None


def _evidence_problems(b: Bundled) -> list[str]:
    problems = []
    for src in b.decision.evidence:
        rel = src.path.removeprefix(PAYLOAD_PREFIX)
        path = b.payload / rel
        if not src.path.startswith(PAYLOAD_PREFIX) or unsafe_name(rel):
            problems.append(f"{src.path}: not a payload file name (confined to payload/)")
        elif not stat.S_ISREG(os.lstat(path).st_mode if os.path.lexists(path) else 0):
            problems.append(f"{src.path}: not in the bundle")
        elif hashlib.sha256(path.read_bytes()).hexdigest() != src.sha256:
            problems.append(f"{src.path}: sha256 differs from the decision's {src.sha256[:12]}…")
    return problems


def _run_record_problems(b: Bundled) -> list[str]:
    from engine.build_records import GateRecord, RunRecord

    v = b.verify
    problems: list[str] = []
    for side in (v.pre, v.post):
        if not side.build_ok:
            continue
        refs = [r for r in side.run_steps if r.status in OK_STATUSES]
        if len(refs) != len(side.runs):
            problems.append(
                f"{VERIFY_PATH}: {side.side} has {len(side.runs)} run records for {len(refs)} runs"
            )
        for ref, rec in zip(refs, side.runs, strict=False):
            raw = b.outcome(ref.id)
            if isinstance(raw, dict):  # the harness does not know its side; the judge adds it
                raw = {"side": side.side, **raw}
            try:
                bundled = RunRecord.model_validate(raw) if raw is not None else None
            except ValidationError:
                bundled = None
            if bundled != rec:
                problems.append(f"{OUTCOMES_DIR}/{ref.id}.json differs from {VERIFY_PATH}")
    own: dict[str, GateRecord] = dict(v.gates)
    if v.expectation is not None:
        own[v.expectation.gate] = v.expectation
        raw = b.outcome("expectation")
        if raw is not None and raw != _dump(v.expectation):
            problems.append(f"{OUTCOMES_DIR}/expectation.json differs from {VERIFY_PATH}")
    for name, rec in sorted(own.items()):
        if name not in b.gates:
            problems.append(f"{GATES_DIR}/{name}.json missing (the verify result has it)")
        elif b.gates[name] != rec:
            problems.append(f"{GATES_DIR}/{name}.json differs from {VERIFY_PATH}")
    return problems


def _outcome_problems(b: Bundled) -> list[str]:
    """Gate records among outcomes/ against gates/, and the replay record's pins."""
    from engine.build_records import GateRecord

    problems: list[str] = []
    outcomes = b.payload / OUTCOMES_DIR
    for f in sorted(outcomes.glob("*.json")) if outcomes.is_dir() else []:
        raw = b.outcome(f.stem)
        if isinstance(raw, dict) and raw.get("schema") == "trace.gate/v1":
            try:
                rec = GateRecord.model_validate(raw)
            except ValidationError:
                problems.append(f"{OUTCOMES_DIR}/{f.name}: not a gate record")
                continue
            if rec.gate not in b.gates:
                problems.append(f"{GATES_DIR}/{rec.gate}.json missing ({OUTCOMES_DIR}/{f.name})")
            elif b.gates[rec.gate] != rec:
                problems.append(f"{GATES_DIR}/{rec.gate}.json differs from {OUTCOMES_DIR}/{f.name}")
    if b.replay is not None:
        for sid, pin in sorted(b.replay.steps.items()):
            raw = b.outcome(sid)
            if raw is not None and digest_json(raw) != pin.outcome_sha256:
                problems.append(f"{OUTCOMES_DIR}/{sid}.json differs from {REPLAY_PATH}")
            ref = b.verify.steps.get(sid) if b.verify is not None else None
            if ref is not None and ref.key is not None and ref.key != pin.key:
                problems.append(f"{sid}: key in {VERIFY_PATH} differs from {REPLAY_PATH}")
    return problems


def _variant_problems(b: Bundled) -> list[str]:
    """Each variant the variants gate names as still failing is bundled, byte for byte, and so
    is each input the fuzzing gate found crashing the post-fix build (`fuzz/<id>/`)."""
    return _bundled_inputs(b, "variants", "variants") + _bundled_inputs(b, "fuzz", "fuzz")


def _bundled_inputs(b: Bundled, gate_name: str, top: str) -> list[str]:
    gate = b.gates.get(gate_name)
    if gate is None:
        return []
    problems = []
    named = f"gates/{gate_name}.json"
    for item in gate.details.get("still_failing") or []:
        base = f"{top}/{item.get('id')}"
        if not (b.payload / base / "repro.sh").is_file():
            problems.append(f"{base}/repro.sh missing ({named} names it)")
        for name, digest in sorted((item.get("files") or {}).items()):
            path = b.payload / base / "data" / name
            if unsafe_name(f"{base}/data/{name}"):
                problems.append(f"{base}/data/{name!r}: not a payload file name")
            elif not path.is_file():
                problems.append(f"{base}/data/{name} missing ({named} names it)")
            elif hashlib.sha256(path.read_bytes()).hexdigest() != digest:
                problems.append(f"{base}/data/{name} differs from {named}")
    return problems


def _statement_problems(statement: Statement, b: Bundled) -> list[str]:
    """The statement is built from the replay record: offline, every field it took from it (the
    fork commit and tree, file pins, derivations, versions) must be the record's."""
    from engine.evidence.statement import dependencies, external_parameters

    rec = b.replay
    if rec is None:
        return []
    bd = statement.predicate.buildDefinition
    problems: list[str] = []
    given = [d.model_dump(exclude_none=True) for d in bd.resolvedDependencies]
    if given != [d.model_dump(exclude_none=True) for d in dependencies(rec)]:
        problems.append(f"statement.json resolvedDependencies differ from {REPLAY_PATH}")
    cid = bd.externalParameters.get("candidate", {})
    cid = cid.get("id") if isinstance(cid, dict) else None
    if bd.externalParameters != external_parameters(rec, str(cid)):
        problems.append(f"statement.json externalParameters differ from {REPLAY_PATH}")
    internal = {
        k: bd.internalParameters.get(k) for k in ("engine_version", "nix_version", "system")
    }
    if internal != {k: getattr(rec, k) for k in internal}:
        problems.append(f"statement.json engine, Nix or system differ from {REPLAY_PATH}")
    return problems


def _model_problems(b: Bundled) -> list[str]:
    try:
        model = _json(b.payload, MODEL_PATH)
    except ValueError:
        return [f"{MODEL_PATH}: not JSON"]
    digest = model.get("prompt_sha256") if isinstance(model, dict) else None
    if digest is None:
        return []
    prompt = b.payload / PROMPT_PATH
    if not prompt.is_file():
        return [f"{MODEL_PATH} names a prompt digest, but {PROMPT_PATH} is not bundled"]
    if hashlib.sha256(prompt.read_bytes()).hexdigest() != digest:
        return [f"{MODEL_PATH} prompt_sha256 is not the digest of {PROMPT_PATH}"]
    pin = b.replay.model if b.replay is not None else None
    if pin is not None and pin.prompt_sha256 != digest:
        return [f"{REPLAY_PATH} model prompt digest differs from {MODEL_PATH}"]
    return []


def verdict_problems(verify: Any) -> list[str]:
    """The pure parts of the verify judgement, re-derived from the result's own records."""
    from engine.run import RunResult, StepResult
    from engine.verify.verdict import determinism_claim

    problems: list[str] = []
    reasons: list[str] = []
    for c in verify.claims:
        if not c.holds and c.reason not in reasons:
            reasons.append(c.reason)
    if verify.reasons != reasons:
        problems.append(f"reasons {verify.reasons} but the claims that fail say {reasons}")
    if verify.passed != (not reasons):
        problems.append(f"passed={verify.passed} with failing claims {reasons}")
    if verify.flaky != (verify.pre.flaky or verify.post.flaky):
        problems.append("flaky does not match the sides' flaky flags")
    claims = {c.claim: c for c in verify.claims}
    steps = {
        sid: StepResult(
            id=sid,
            key=ref.key or "",
            status="skipped" if ref.status == "missing" else ref.status,
            deterministic=ref.deterministic,
        )
        for sid, ref in verify.steps.items()
    }
    det = determinism_claim(RunResult(graph=verify.graph, steps=steps))
    mine = claims.get("deterministic")
    if mine is None or (mine.holds, mine.reason) != (det.holds, det.reason):
        problems.append("the deterministic claim does not follow from the --check results")
    expected_det = det.holds if det.reason in ("ok", "nondeterministic") else None
    if verify.deterministic != expected_det:
        problems.append(f"deterministic={verify.deterministic}, the claim says {expected_det}")
    gate = verify.expectation
    if gate is not None:
        rows = gate.details.get("claims", [])
        gate_claims = {r.get("claim"): r for r in rows if isinstance(r, dict)}
        for name, row in sorted(gate_claims.items()):
            own = claims.get(str(name))
            if own is None or _dump(own) != {**_dump(own), **row}:
                problems.append(f"claim '{name}' differs from the expectation gate's record")
        flaky = gate.details.get("flaky", {})
        if isinstance(flaky, dict) and (
            verify.pre.flaky != bool(flaky.get("pre"))
            or verify.post.flaky != bool(flaky.get("post"))
        ):
            problems.append("the sides' flaky flags differ from the expectation gate's record")
    return problems


def _policy_problems(b: Bundled) -> list[str]:
    """The bundled signing policy (`policy/<file>`) is the file the decision applied: its
    sha256 is the decision's policy digest, unless redaction changed it (redaction.json says
    so; the decision is then re-run from the fork's or this checkout's file only)."""
    d = b.decision
    if d is None:
        return []
    rel = f"{POLICY_DIR}/{PurePosixPath(d.policy.path).name}"
    path = b.payload / rel
    if not path.is_file():
        return []  # bundles made before the policy was bundled: re-run from the files here
    if hashlib.sha256(path.read_bytes()).hexdigest() == d.policy.digest:
        return []
    try:
        applied = _json(b.payload, REDACTION_PATH).get("applied", {})
    except (ValueError, AttributeError):
        applied = {}
    if isinstance(applied, dict) and applied.get(rel):
        return []
    return [f"{rel} is not the signing policy {SIGNING_PATH} names (another sha256)"]


def _bundled_review(payload: Path, decided: Any) -> Any:
    """The review claims of the bundled draft record, checked against the bundled transcripts;
    whether the reviewer saw this very patch is the signed decision's own check (the bundle
    holds the patch in canonical form only)."""
    from engine.roles.claims import payload_review

    found = payload_review(payload)
    if found is None or decided is None:
        return found
    saw = {r.step: r.reviewed_patch for r in decided.reviews}
    reviews = [r.model_copy(update={"reviewed_patch": saw.get(r.step)}) for r in found.reviews]
    return found.model_copy(update={"source": decided.source, "reviews": reviews})


def rerun_decision(b: Bundled, policy_dirs: list[Path]) -> Check:
    """`trace decide` again, over the bundled records, with the decision's own policy file."""
    from engine.errors import TraceError
    from engine.policy.evidence_view import Evidence
    from engine.policy.signing_decision import decide, load_signing
    from engine.policy.waivers import WaiverSet

    name = "signing decision re-run"
    d = b.decision
    ref = d.policy
    paths = _policy_files(ref.digest, policy_dirs)
    if not paths:
        return Check(
            name=name,
            ok=True,
            detail=f"not re-run: no policy file here has the sha256 of {ref.name} {ref.version} "
            "(the policy pin check decides whether that version is accepted)",
        )
    # the same policy bytes may sit in several places (the bundle's copy, the fork's merged
    # policy): the first whose catalogue is the decision's own is the one to re-run with
    problems: list[str] = []
    loaded = None
    for path in paths:
        try:
            signing, catalogue = load_signing(path)
        except TraceError as exc:
            problems.append(exc.render())
            continue
        if catalogue.ref.digest != d.catalogue.digest:
            problems.append(f"the catalogue beside {path} is not the one the decision used")
            continue
        loaded = signing, catalogue
        break
    if loaded is None:
        return _fail(name, "decision.not-reproduced", problems)
    signing, catalogue = loaded
    routing = b.routing or d.routing
    evidence = Evidence(
        candidate=d.candidate,
        verify=b.verify,
        gates=b.gates,
        sources=d.evidence,
        review=_bundled_review(b.payload, d.review),
    )
    waivers = WaiverSet(ref=d.waivers_file, waivers=[u.waiver for u in d.waivers])
    again = decide(evidence, routing, signing, catalogue, waivers, d.date)

    def view(x: Any) -> tuple[Any, ...]:
        return (
            x.decision,
            sorted(r.code for r in x.reasons),
            sorted(r.code for r in x.warnings),
            sorted(r.code for r in x.waived),
        )

    if view(again) != view(d):
        got, recorded = view(again), view(d)
        detail = f"re-run says {got[0]} {got[1]}, the bundle says {recorded[0]} {recorded[1]}"
        return _fail(name, "decision.not-reproduced", [detail])
    return Check(
        name=name,
        ok=True,
        detail=f"{ref.name} {ref.version} ({path.name}) over the bundled records: {d.decision}",
    )


def record_checks(statement: Statement, payload: Path, policy_dirs: list[Path]) -> list[Check]:
    """Every offline re-check of the bundled records (see the module docstring)."""
    b = Bundled(payload)
    checks: list[Check] = []
    if b.decision is None:
        problems = [p for p in b.problems if p.startswith(SIGNING_PATH)] or [f"no {SIGNING_PATH}"]
        return [_fail("signing decision", "decision.missing", problems)]
    d = b.decision
    if d.decision != "allow":
        codes = ", ".join(r.code for r in d.reasons) or "no reason given"
        checks.append(_fail("signing decision", "decision.denied", [f"deny ({codes})"]))
    else:
        checks.append(
            Check(
                name="signing decision",
                ok=True,
                detail=f"allow ({d.policy.name} {d.policy.version})",
            )
        )
    checks.append(
        _check(
            "decision evidence",
            "decision.evidence-mismatch",
            _evidence_problems(b),
            f"{len(d.evidence)} files named by the decision, each as bundled",
        )
    )

    disagree = list(b.problems)
    candidate = statement.predicate.buildDefinition.externalParameters.get("candidate", {})
    cid = candidate.get("id") if isinstance(candidate, dict) else None
    if cid is not None and cid != d.candidate:
        disagree.append(f"the decision is for '{d.candidate}', the statement for '{cid}'")
    if b.routing is not None and b.routing != d.routing:
        disagree.append(f"{ROUTING_PATH} differs from the routing inside {SIGNING_PATH}")
    if b.verify is not None:
        if b.verify.candidate != d.candidate:
            disagree.append(f"{VERIFY_PATH} is for '{b.verify.candidate}'")
        disagree += _run_record_problems(b)
    disagree += _outcome_problems(b)
    disagree += _variant_problems(b)
    disagree += _model_problems(b)
    disagree += _policy_problems(b)
    from engine.audit.transcripts import transcript_problems

    disagree += transcript_problems(b.payload, b.replay)
    disagree += _statement_problems(statement, b)
    checks.append(
        _check(
            "records agree",
            "records.disagree",
            disagree,
            "outcomes, verify result, gate records, replay record and decisions",
        )
    )
    if b.verify is not None:
        checks.append(
            _check(
                "verify verdict",
                "verify.not-reproduced",
                verdict_problems(b.verify),
                "follows from its claims, its --check results and the gate's record",
            )
        )
    if not any(c.reason in ("records.disagree",) for c in checks if not c.ok):
        # the bundled policy first: the decision is re-run offline with the very bytes it
        # was made under (its sha256 is the decision's pin; a redacted copy never matches)
        checks.append(rerun_decision(b, [payload / POLICY_DIR, *policy_dirs]))
    return checks
