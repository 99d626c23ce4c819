"""The routing and signing decisions a bundle carries, computed with engine.policy or read back.

`route_candidate` (engine.policy.routing) and `signing_decision` call the policy functions
in-process (`route`,
`decide`), exactly as `trace route` / `trace decide` do, over the typed VerifyResult and gate
records being bundled. The evidence the signing decision names (`Decision.evidence`) is then the
bundle's own payload files (`payload/verify-result.json`, `payload/gates/<gate>.json`) with the
sha256 of their bundled bytes, so a reviewer can follow each link inside the bundle.

`load_decision` reads a record `trace decide` wrote instead and refuses one that was made from
other files than the ones being bundled (its evidence digests must all be among them), or for
another candidate: a stale decision is never bundled.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from pathlib import Path

from pydantic import ValidationError

from engine.build_records import GateRecord
from engine.errors import InputError
from engine.evidence.payload import PayloadEntry
from engine.evidence.redact import redact_entry, redact_path
from engine.policy.evidence_view import Evidence, SourceRef
from engine.policy.review import ReviewEvidence
from engine.policy.routing import RouteDecision
from engine.policy.signed_waiver import WaiverTrust
from engine.policy.signing_decision import Decision
from engine.policy.waivers import WaiverSet
from engine.verify_result import VerifyResult

PAYLOAD_PREFIX = "payload/"


def payload_ref(entry: PayloadEntry) -> SourceRef:
    """Where a payload file will sit in the bundle, and the sha256 of its bundled bytes."""
    bundled, _ = redact_entry(entry)  # what assemble() stores (redaction is idempotent)
    path, _ = redact_path(entry.path)
    return SourceRef(path=PAYLOAD_PREFIX + path, sha256=hashlib.sha256(bundled.data).hexdigest())


def signing_decision(
    result: VerifyResult,
    gates: dict[str, GateRecord],
    routing: RouteDecision,
    sources: list[SourceRef],
    *,
    policy: Path | None = None,
    waivers: WaiverSet | None = None,
    today: dt.date,
    review: ReviewEvidence | None = None,
) -> Decision:
    """`trace decide` in-process: the signing policy over the verify result and gate records
    (`waivers`: the valid signed ones, from `waiver_set`)."""
    from engine.policy.registry import SIGNING, policy_dir
    from engine.policy.signing_decision import decide, load_signing
    from engine.policy.waivers import NO_WAIVERS

    signing, catalogue = load_signing(policy or policy_dir() / SIGNING)
    waiver_set = waivers or NO_WAIVERS
    evidence = Evidence(
        candidate=result.candidate, verify=result, gates=gates, sources=sources, review=review
    )
    return decide(evidence, routing, signing, catalogue, waiver_set, today)


def waiver_set(path: Path | None, policy: Path, trust: WaiverTrust) -> WaiverSet:
    """The waivers at `path` (none when None), checked against `trust` and the catalogue of
    the signing `policy`; invalid ones are ignored with a warning (engine.policy.waivers)."""
    from engine.policy.signing_decision import load_signing
    from engine.policy.waivers import NO_WAIVERS, load_waivers

    if path is None:
        return NO_WAIVERS
    _, catalogue = load_signing(policy)
    return load_waivers(path, catalogue, trust)


def load_decision(path: Path, *, candidate: str, bundled: dict[str, str]) -> Decision:
    """A decision record written by `trace decide`, checked against what is being bundled.

    `bundled` maps the sha256 of every evidence file being bundled (the verify result as
    `trace verify` wrote it, each `--gate` file) to a name for messages.
    """
    try:
        decision = Decision.model_validate_json(path.read_bytes())
    except OSError as exc:
        raise InputError(f"cannot read the decision record: {exc.strerror}", file=path) from None
    except ValidationError as exc:
        raise InputError(
            f"not a decision record (trace.decision/v1): {str(exc).splitlines()[0]}",
            file=path,
            hint="pass the file `trace decide` wrote (STATE/decisions/ID.json), or leave out "
            "--decision to decide in-process",
        ) from None
    if decision.candidate != candidate:
        raise InputError(
            f"the decision record is for '{decision.candidate}', not '{candidate}'",
            file=path,
            key="candidate",
            hint="pass the decision record of this candidate",
        )
    unknown = [src.path for src in decision.evidence if src.sha256 not in bundled]
    if unknown:
        raise InputError(
            "the decision record was made from other evidence than the files being bundled: "
            + ", ".join(unknown),
            file=path,
            key="evidence",
            hint="run `trace decide` again on the current verify result (passing the same "
            "--gate files here), or leave out --decision to decide in-process",
        )
    return decision
