"""Making a candidate's bundle from what `trace verify` recorded: `trace bundle` and
`trace verify --bundle` both end here.

1. The candidate, its fork and the verdict from the builds: `verified_cached` loads the verify
   graph exactly as `trace verify` loads it, plans it against the cache index and refuses when a
   step is dirty (never verified, a failed build, or inputs changed since: a patch swapped after
   verify). The run is answered from the index (no Nix evaluation) and judged again; that judged
   VerifyResult is what is bundled and decided on. A `--result FILE` is only a cross-check: if
   it differs from the judged result, nothing is bundled. `trace verify --bundle` hands over the
   run it just built instead. One signing policy throughout (`--signing-policy`, default the
   shipped one; `trace verify --bundle` passes the one its gates applied): the graph is loaded
   with it (the gates' thresholds are in their keys, so evidence verified under another policy
   is refused as dirty), it decides, and the replay record pins it.
2. Gate records: the run's gate steps' outcomes, the determinism record derived from the run,
   and `--gate` files (`gate_records`: a carried record that disagrees with the run's is refused).
3. Decisions: the routing and signing decisions are always computed in-process with
   engine.policy (as `trace route` / `trace decide`), naming the bundle's own payload files as
   their evidence. `--decision FILE` (`trace decide`'s record) is only a cross-check: a record
   made from other files, under another policy, or that the policy does not reproduce now is
   refused and nothing is written; nothing signs a decision the policy did not just make.
4. The bundle is assembled (statement over every payload file) and, when signing was asked,
   signed ONLY if the signing decision allows. On a deny nothing is signed, the reasons are
   reported, and the UNSIGNED bundle is still written so a reviewer can read why (verify-bundle
   rejects it as `bundle.unsigned`); the command exits 1. A signing failure (no identity, a
   service down) writes nothing.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from engine.candidate import Candidate, load_candidate
from engine.errors import InputError, UsageError
from engine.evidence.collect import evidence_sources, gate_records, read_gate_files
from engine.evidence.decisions import load_decision, waiver_set
from engine.evidence.waivers import waiver_entries
from engine.paths import cli
from engine.pipeline.bundle import assemble, payload_entries
from engine.pipeline.decide import decide
from engine.pipeline.load import fork_of
from engine.pipeline.route import route
from engine.pipeline.sign import key_hint_of, sign_keyless, sign_with_key
from engine.pipeline.values import Decided, Judged
from engine.policy.routing import RouteDecision
from engine.policy.signed_waiver import WaiverTrust, waiver_trust
from engine.policy.signing_decision import Decision
from engine.signoff import DEFAULT_BUILDER

Signed = Literal["no", "key", "keyless"]


class BundleRequest(BaseModel):
    """Everything one bundle is made from (paths as given; resolved here)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    candidate: Path
    fork: Path | None = None
    state_dir: Path | None = None
    result: Path | None = Field(
        default=None, description="a verify result to cross-check against the builds (optional)"
    )
    out: Path | None = Field(default=None, description="default: STATE/bundles/ID")
    decision: Path | None = Field(default=None, description="`trace decide`'s record")
    routing_policy: Path | None = None
    signing_policy: Path | None = None
    waivers: Path | None = None
    maintainers: Path | None = None
    gates: tuple[Path, ...] = ()
    today: dt.date | None = None
    sign: Signed = "no"
    key: Path | None = None
    identity_token: str | None = None
    trust_config: Path | None = None
    signer_lock: Path | None = None
    force_identity: bool = False
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


def _sign(req: BundleRequest, statement: bytes, policy: Path) -> str:
    if req.sign == "key":
        assert req.key is not None
        return sign_with_key(statement, req.key)
    from engine.signing.oidc import identity_token

    return sign_keyless(
        statement,
        identity_token(req.identity_token),
        trust_config=req.trust_config,
        lock=req.signer_lock,
        signing_policy=policy,
        force_identity=req.force_identity,
    )


def _trust(req: BundleRequest, policy: Path, fork: Path, candidate: Candidate) -> WaiverTrust:
    """Waivers are checked as `trace decide` checks them; the key about to sign the bundle
    (key mode) may not have signed one."""
    bundle_key = None
    if req.sign == "key" and req.key is not None:
        bundle_key = key_hint_of(req.key)
    return waiver_trust(
        signing_policy=policy,
        fork=fork,
        candidate=candidate,
        maintainers=req.maintainers,
        bundle_key=bundle_key,
    )


def _check_decision_record(
    path: Path, decision: Decision, cid: str, bundled: dict[str, str], policy: Path, pin: str
) -> None:
    """Refuse a `--decision` record the policy does not reproduce now (its date aside): what is
    bundled and signed is always the decision just made, never a file's."""
    record = load_decision(path, candidate=cid, bundled=bundled)
    if record.policy.digest != pin:
        raise InputError(
            f"the decision record was made under the signing policy {record.policy.path} "
            f"({record.policy.name} {record.policy.version}), not {policy}",
            file=path,
            hint=f"pass the policy `{cli('decide --signing')}` used as --signing-policy",
        )
    given = record.model_dump(mode="json", exclude={"date"})
    now = decision.model_dump(mode="json", exclude={"date"})
    differ = sorted(k for k in given.keys() | now.keys() if given.get(k) != now.get(k))
    if differ:
        raise InputError(
            f"the decision record is not what the signing policy decides now (differs at: "
            f"{', '.join(differ)}; now {decision.decision.upper()}): nothing is bundled",
            file=path,
            hint="leave out --decision (the bundle is always decided in-process), or run "
            f"`{cli('decide')}` again with the same policies, waivers and --gate files",
        )


def _judged(
    req: BundleRequest,
    candidate: Candidate,
    located: tuple[Path, Path, Path],
    verified: Judged | None,
) -> Judged:
    """The build this process just made, else the cached one (checked against the store, in the
    fork and state of `located` under its signing policy); the result file, if given, is only
    cross-checked against it."""
    from engine.pipeline.build import verified_cached
    from engine.verify.cached import check_result_file

    if verified is None:
        fork, state, policy = located
        verified = verified_cached(candidate, fork, state, signing_policy=policy, wait=req.wait)
    cid = candidate.spec.id
    if verified.verify.candidate != cid:
        raise InputError(
            f"the verified result is for '{verified.verify.candidate}', not '{cid}'",
            file=candidate.path,
        )
    if req.result is not None:
        check_result_file(req.result, verified.verify)
    return verified


def produce_bundle(req: BundleRequest, verified: Judged | None = None) -> BundleOutcome:
    """`verified`: the judged build this process just made (`trace verify --bundle`, its `ran`
    when that run began and ended); otherwise it comes from the cache index, checked against the
    store (`verified_cached`), and `ran` is that check."""
    from engine.evidence.bundle import write_bundle
    from engine.evidence.replay import signing_policy_pin
    from engine.gates.context import signing_policy_path

    if req.sign == "key" and req.key is None:
        raise UsageError("key signing needs --key PRIVATE_KEY")
    candidate = load_candidate(req.candidate)
    fork = fork_of(candidate.path, req.fork)
    state = (req.state_dir or fork / ".trace").resolve()
    # the same default as `trace verify`: the fork's own policy if it has one, else the shipped
    policy = signing_policy_path(req.signing_policy, fork)
    policy_pin = signing_policy_pin(policy, fork)  # refused before anything is read or written
    judged = _judged(req, candidate, (fork, state, policy), verified)
    extra = read_gate_files(req.gates)
    gates = gate_records(judged.verify, judged.run, [(src, rec) for src, rec, _ in extra])
    entries = payload_entries(judged, gates, fork)
    sources = evidence_sources(judged.verify, gates, fork)
    routing = route(candidate, req.routing_policy)
    waivers = waiver_set(req.waivers, policy, _trust(req, policy, fork, candidate))
    today = req.today or dt.datetime.now(dt.UTC).date()
    decided = decide(
        judged,
        gates,
        sources,
        routing,
        policy=policy,
        waivers=waivers,
        today=today,
        transcripts=state / "transcripts",
    )
    if req.decision is not None:  # only ever a cross-check: the policy decides again, here
        bundled = {src.sha256: src.path for src in sources}
        bundled |= {hashlib.sha256(raw).hexdigest(): src for src, _, raw in extra}
        _check_decision_record(
            req.decision, decided.decision, candidate.spec.id, bundled, policy, policy_pin.sha256
        )
    entries += waiver_entries(waivers, candidate.spec.id, decided.decision.maintainers)
    assembled = assemble(
        judged, entries, decided, root=fork, signing_policy=policy, builder_id=req.builder_id
    )
    signature: str | None = None
    if req.sign != "no" and decided.decision.decision == "allow":
        signature = _sign(req, assembled.statement_bytes, policy)  # a failure writes nothing
    written = write_bundle(req.out or state / "bundles" / candidate.spec.id, assembled, signature)
    return _outcome(req, written, len(assembled.entries), signature, decided)


def _outcome(
    req: BundleRequest, path: Path, files: int, signature: str | None, decided: Decided
) -> BundleOutcome:
    return BundleOutcome(
        path=path,
        files=files,
        signed=req.sign if signature is not None else "no",
        asked=req.sign,
        routing=decided.routing,
        decision=decided.decision,
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
