"""Making a candidate's bundle from what `trace verify` recorded: `trace bundle` and
`trace verify --bundle` both end here.

1. The candidate, its fork and the VerifyResult `trace verify` wrote (default
   STATE/verify/ID.json) are read. The verify graph is loaded exactly as `trace verify` loads it
   (`verify_context`) and planned: every step key must equal the key the result recorded, or the
   result is stale (inputs changed since) and nothing is bundled. The run is then answered from
   the cache index (no Nix evaluation), giving each step's outcome for `outcomes/` and the
   replay record.
2. Gate records: the result's own, further gate steps' outcomes, and `--gate` files.
3. Decisions: the routing and signing decisions are computed in-process with engine.policy (as
   `trace route` / `trace decide`), naming the bundle's own payload files as their evidence; or
   `--decision` reads `trace decide`'s record, which must have been made from the very files
   being bundled.
4. The bundle is assembled (statement over every payload file) and, when signing was asked,
   signed ONLY if the signing decision allows. On a deny nothing is signed, the reasons are
   reported, and the UNSIGNED bundle is still written so a reviewer can read why (verify-bundle
   rejects it as `bundle.unsigned`); the command exits 1. A signing failure (no identity, a
   service down) writes nothing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.bundle_verify.options import DEFAULT_BUILDER
from engine.candidate import Candidate, load_candidate
from engine.errors import InputError, UsageError
from engine.evidence.collect import (
    candidate_entries,
    decision_entry,
    gate_entries,
    gate_records,
    model_pin,
    outcome_entries,
    policy_versions,
    verify_entry,
)
from engine.evidence.decisions import (
    load_decision,
    payload_ref,
    signing_decision,
)
from engine.evidence.payload import PayloadEntry
from engine.model import Graph
from engine.policy.routing import RouteDecision, route_candidate
from engine.policy.signing import Decision
from engine.records import GateRecord
from engine.run import RunResult
from engine.verify.result import VerifyResult

Signed = Literal["no", "key", "keyless"]


class BundleRequest(BaseModel):
    """Everything one bundle is made from (paths as given; resolved here)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    candidate: Path
    fork: Path | None = None
    state_dir: Path | None = None
    result: Path | None = Field(default=None, description="default: STATE/verify/ID.json")
    out: Path | None = Field(default=None, description="default: STATE/bundles/ID")
    decision: Path | None = Field(default=None, description="`trace decide`'s record")
    routing_policy: Path | None = None
    signing_policy: Path | None = None
    waivers: Path | None = None
    gates: tuple[Path, ...] = ()
    today: dt.date | None = None
    sign: Signed = "no"
    key: Path | None = None
    identity_token: str | None = None
    trust_config: Path | None = None
    builder_id: str = DEFAULT_BUILDER
    wait: float = 0


class BundleOutcome(BaseModel):
    """What was written, and why it is (not) signed."""

    path: Path
    files: int
    signed: Signed
    asked: Signed = Field(description="the signing that was asked for")
    routing: RouteDecision
    decision: Decision

    @property
    def denied(self) -> bool:
        """Signing was asked and the signing policy denied it."""
        return self.asked != "no" and self.signed == "no"


def request_from_args(args: argparse.Namespace, **fields: object) -> BundleRequest:
    """A request from the shared options (engine.bundle_verify.options) plus the command's own."""
    sign: Signed = "key" if args.key else "keyless" if args.sign else "no"
    today = None
    if args.today is not None:
        try:
            today = dt.date.fromisoformat(args.today)
        except ValueError:
            raise UsageError(
                f"--today {args.today!r} is not a date", hint="use YYYY-MM-DD"
            ) from None
    return BundleRequest.model_validate(
        {
            "routing_policy": args.routing_policy,
            "signing_policy": args.signing_policy,
            "waivers": args.waivers,
            "today": today,
            "sign": sign,
            "key": args.key,
            "identity_token": args.identity_token,
            "trust_config": args.trust_config,
            "builder_id": args.builder_id,
            **fields,
        }
    )


def read_verify_result(path: Path, candidate: Candidate) -> tuple[VerifyResult, bytes]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InputError(
            "no verify result for this candidate",
            file=path,
            hint=f"run `trace verify {candidate.path}` first (or `trace verify --bundle DIR`), "
            "or pass --result",
        ) from None
    try:
        result = VerifyResult.model_validate_json(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise InputError(
            f"not a verify result (trace.verify/v1): {err['msg']}",
            file=path,
            key=".".join(str(p) for p in err["loc"]) or None,
            hint="pass the JSON `trace verify` wrote; rerun `trace verify` to recreate it",
        ) from None
    if result.candidate != candidate.spec.id:
        raise InputError(
            f"the verify result is for '{result.candidate}', not '{candidate.spec.id}'",
            file=path,
            key="candidate",
            hint="pass this candidate's result (STATE/verify/ID.json)",
        )
    return result, raw


def _stale_steps(result: VerifyResult, keys: dict[str, str]) -> list[str]:
    recorded = {sid: ref.key for sid, ref in result.steps.items()}
    stale = [
        f"{sid}: recorded {(recorded.get(sid) or 'nothing')[:12]}…, now {keys[sid][:12]}…"
        for sid in sorted(keys)
        if recorded.get(sid) != keys[sid]
    ]
    stale += [f"{sid}: no longer in the graph" for sid in sorted(set(recorded) - set(keys))]
    return stale


def load_run(
    candidate: Candidate,
    fork: Path,
    state: Path,
    result: VerifyResult,
    result_path: Path,
    wait: float,
) -> tuple[Graph, RunResult]:
    """The verify graph as `trace verify` loads it, and its run answered from the cache index."""
    from engine.cache import Index
    from engine.run import plan, run_graph
    from engine.verify.command import load_verify_graph

    with Index(state, wait=wait) as index:
        graph = load_verify_graph(candidate, fork, index)
        planned, _ = plan(graph, index)
        stale = _stale_steps(result, {sid: sp.key for sid, sp in planned.steps.items()})
        if stale:
            raise InputError(
                "the verify result is stale: its steps' keys differ from the current inputs' ("
                + "; ".join(stale[:5])
                + (" …" if len(stale) > 5 else "")
                + ")",
                file=result_path,
                hint=f"run `trace verify {candidate.path}` again, then bundle",
            )
        run = run_graph(graph, index)
    return graph, run


def _extra_gates(paths: tuple[Path, ...]) -> list[tuple[str, GateRecord, bytes]]:
    out: list[tuple[str, GateRecord, bytes]] = []
    for path in paths:
        try:
            raw = path.read_bytes()
            out.append((str(path), GateRecord.model_validate_json(raw), raw))
        except OSError as exc:
            raise InputError(f"cannot read gate record: {exc.strerror}", file=path) from None
        except ValidationError as exc:
            raise InputError(
                f"not a gate record (trace.gate/v1): {exc.errors()[0]['msg']}", file=path
            ) from None
    return out


def _sign(req: BundleRequest, statement: bytes) -> str:
    from engine.evidence.statement import PAYLOAD_TYPE

    if req.sign == "key":
        from engine.signing.keymode import sign_with_key
        from engine.signing.keys import load_private_key

        assert req.key is not None
        return sign_with_key(statement, PAYLOAD_TYPE, load_private_key(req.key))
    from engine.signing.keyless import sign_keyless
    from engine.signing.oidc import identity_token

    return sign_keyless(
        statement, token=identity_token(req.identity_token), trust_config=req.trust_config
    )


def produce_bundle(req: BundleRequest) -> BundleOutcome:
    from engine.evidence.bundle import assemble, write_bundle
    from engine.evidence.replay import build_replay_record
    from engine.verify.command import find_fork

    if req.sign == "key" and req.key is None:
        raise UsageError("key signing needs --key PRIVATE_KEY")
    candidate = load_candidate(req.candidate)
    cid = candidate.spec.id
    fork = (req.fork or find_fork(candidate.path) or Path.cwd()).resolve()
    if not fork.is_dir():
        raise UsageError(f"--fork {fork} is not a directory", hint="pass the package set's root")
    state = (req.state_dir or fork / ".trace").resolve()
    result_path = req.result or state / "verify" / f"{cid}.json"
    result, raw_result = read_verify_result(result_path, candidate)
    graph, run = load_run(candidate, fork, state, result, result_path, req.wait)

    extra = _extra_gates(req.gates)
    gates = gate_records(result, run, [(src, rec) for src, rec, _ in extra])
    result_entry = verify_entry(result)
    gate_files = gate_entries(gates)
    entries: list[PayloadEntry] = [
        *candidate_entries(candidate),
        *outcome_entries(run),
        result_entry,
        *gate_files,
    ]
    if req.decision is not None:
        bundled = {hashlib.sha256(raw_result).hexdigest(): str(result_path)}
        bundled |= {hashlib.sha256(raw).hexdigest(): src for src, _, raw in extra}
        decision = load_decision(req.decision, candidate=cid, bundled=bundled)
        routing = decision.routing
    else:
        routing = route_candidate(candidate, req.routing_policy)
        sources = [payload_ref(result_entry)] + [payload_ref(e) for e in gate_files]
        decision = signing_decision(
            result,
            gates,
            routing,
            sources,
            policy=req.signing_policy,
            waivers=req.waivers,
            today=req.today or dt.datetime.now(dt.UTC).date(),
        )
    entries.append(decision_entry("routing", "routing", routing))
    entries.append(decision_entry("signing", "signing", decision))
    versions = {**policy_versions(routing), **policy_versions(decision)}
    replay = build_replay_record(
        graph, run, candidate_file=candidate.path, root=fork, model=model_pin(candidate)
    )
    assembled = assemble(
        entries,
        replay=replay,
        candidate_id=cid,
        policy_versions=versions,
        builder_id=req.builder_id,
    )
    signature: str | None = None
    if req.sign != "no" and decision.decision == "allow":
        signature = _sign(req, assembled.statement_bytes)  # a failure writes nothing
    out = req.out or state / "bundles" / cid
    written = write_bundle(out, assembled, signature)
    return BundleOutcome(
        path=written,
        files=len(assembled.entries),
        signed=req.sign if signature is not None else "no",
        asked=req.sign,
        routing=routing,
        decision=decision,
    )


def report_lines(outcome: BundleOutcome) -> list[str]:
    """What the commands print: the bundle, the decision with every reason, the signature."""
    d, rt = outcome.decision, outcome.routing
    lines = [
        f"routing: {rt.state} (rule {rt.rule or 'none: reject'}, "
        f"{rt.policy.name} {rt.policy.version})",
        f"signing policy: {d.decision.upper()} ({d.policy.name} {d.policy.version}, "
        f"as of {d.date.isoformat()})",
    ]
    for r in d.reasons:
        lines.append(f"  DENY {r.code}: {r.message} [{', '.join(r.sources)}]")
    for r in d.waived:
        lines.append(f"  WAIVED {r.code}: {r.message}")
    state = f"signed ({outcome.signed})" if outcome.signed != "no" else "unsigned"
    lines.append(f"bundle: {outcome.path} ({outcome.files} payload files, {state})")
    if outcome.denied:
        codes = ", ".join(r.code for r in d.reasons)
        lines.append(
            f"not signed: the signing policy denies ({codes}); the unsigned bundle is written "
            "for review only"
        )
    return lines
