"""Verifying a bundle directory: layout (nothing beside statement.json, statement.sigstore.json
and payload/), signature, signer, payload type, statement, every payload digest, policy versions
and digests, the records' agreement and the decisions re-run offline (engine.audit.
consistency), and (optionally) a replay. Every failing check carries one reason code.

`verify_bundle` runs PHASES, a list of small named functions over one `Inspection`, in order: each
adds its checks and none stops at a failure (every reason is collected), except that a bundle
without a readable statement or payload/ ends the list (nothing later could be checked).
"""

from __future__ import annotations

import base64
import hashlib
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from cryptography.hazmat.primitives.asymmetric import ec
from pydantic import BaseModel, Field, ValidationError

from engine.audit.identity import IdentityPolicy
from engine.audit.pins import fork_policy_dirs, policy_pin_check, policy_version_check
from engine.audit.safefs import (
    MAX_STATEMENT,
    Listing,
    Unsafe,
    read_regular,
    unsafe_name,
    walk,
)
from engine.audit.signature import Check, verify_signature
from engine.evidence import PAYLOAD_DIR, SIGNATURE_FILE, STATEMENT_FILE
from engine.evidence.bundle import INFO_FILES, ROOT_FILES
from engine.evidence.statement import PAYLOAD_TYPE, Statement
from engine.signing.deadline import DEFAULT_SECONDS
from engine.signing.dsse import Envelope

ReplayFn = Callable[[Statement, Path], list[Check]]


class BundleVerdict(BaseModel):
    schema_: Literal["trace.bundle-verify/v1"] = Field(
        default="trace.bundle-verify/v1", alias="schema"
    )
    bundle: str
    passed: bool
    mode: str
    signer: dict[str, str] = Field(default_factory=dict)
    reasons: list[str]
    checks: list[Check]


def _sha256(path: Path) -> str:
    """sha256 of a regular file, opened without following links or blocking on a FIFO."""
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        while chunk := os.read(fd, 1 << 20):
            h.update(chunk)
    finally:
        os.close(fd)
    return h.hexdigest()


def _payload_files(payload: Path) -> tuple[dict[str, Path], list[str]]:
    """Regular files under payload/ by relative path, plus every other entry (bounded `walk`)."""
    listing = walk(payload)
    files = {rel: path for rel, (path, _) in listing.files.items()}
    return files, sorted(listing.odd + listing.extra_dirs)


def _fails(name: str, reason: str, details: list[str]) -> Check:
    return Check(name=name, ok=False, reason=reason, detail=", ".join(details))


def subject_checks(statement: Statement, payload: Path) -> list[Check]:
    listing = walk(payload)
    checks: list[Check] = []
    by_reason: dict[str, list[str]] = {}
    for reason, detail in listing.problems:
        by_reason.setdefault(reason, []).append(detail)
    for reason, details in sorted(by_reason.items()):
        checks.append(_fails("payload files readable", reason, details))
    names = [s.name for s in statement.subject]
    unsafe = [f"{n!r}: {why}" for n in names if (why := unsafe_name(n))]
    if unsafe:
        checks.append(_fails("subject names", "subject.unsafe-name", unsafe))
    seen: set[str] = set()
    dupes = sorted({n for n in names if n in seen or seen.add(n)})  # type: ignore[func-returns-value]
    if dupes:
        checks.append(_fails("subject names", "subject.duplicate", dupes))
    subjects = {
        s.name: s.digest.get("sha256", "") for s in statement.subject if not unsafe_name(s.name)
    }
    files = {rel: path for rel, (path, _) in listing.files.items()}
    missing = sorted(set(subjects) - set(files) - {d.split(" ")[0] for d in _odd(listing)})
    # an empty directory no subject lies under (one a removed file left is reported as missing)
    empty = [d for d in listing.extra_dirs if not any(n.startswith(d) for n in subjects)]
    extra = sorted(set(files) - set(subjects)) + [f"{d} (empty directory)" for d in empty]
    changed = sorted(n for n in set(subjects) & set(files) if _sha256(files[n]) != subjects[n])
    if missing:
        checks.append(_fails("payload files present", "subject.missing-file", missing))
    if extra:
        checks.append(_fails("no unlisted payload files", "subject.extra-file", extra))
    if changed:
        checks.append(_fails("payload digests", "subject.digest-mismatch", changed))
    if not checks:
        checks.append(
            Check(
                name="payload digests",
                ok=True,
                detail=f"{len(subjects)} files recomputed, none missing, none extra",
            )
        )
    return checks


def _odd(listing: Listing) -> list[str]:
    """The entries reported as not regular or too large (not also reported as missing)."""
    return [detail for _, detail in listing.problems]


def root_check(directory: Path) -> Check:
    extra = sorted(p.name for p in directory.iterdir() if p.name not in ROOT_FILES | INFO_FILES)
    if extra:
        return Check(
            name="nothing beside the statement",
            ok=False,
            reason="bundle.extra-file",
            detail=", ".join(extra),
        )
    return Check(name="nothing beside the statement", ok=True, detail=", ".join(sorted(ROOT_FILES)))


@dataclass
class Inspection:
    """What the phases of `verify_bundle` share: its inputs, what each phase found for the next
    ones, and every check so far (a failing check never stops the phases after it; only a
    bundle without a readable statement or payload ends the list early)."""

    directory: Path
    policy: IdentityPolicy
    trust_config: Path | None
    extra_keys: dict[str, ec.EllipticCurvePublicKey] | None
    replay: ReplayFn | None
    deadline: float
    fork: Path | None
    checks: list[Check] = field(default_factory=list)
    mode: str = "none"
    signer: dict[str, str] = field(default_factory=dict)
    on_disk: bytes = b""
    signature: bytes | None = None
    envelope: Envelope | None = None
    signed: bytes | None = None
    statement: Statement | None = None
    subjects_ok: bool = False

    @property
    def payload(self) -> Path:
        return self.directory / PAYLOAD_DIR

    def fail(self, name: str, reason: str, detail: str = "") -> None:
        self.checks.append(Check(name=name, ok=False, reason=reason, detail=detail))

    def verdict(self) -> BundleVerdict:
        reasons = sorted({c.reason for c in self.checks if not c.ok and c.reason})
        return BundleVerdict(
            bundle=str(self.directory),
            passed=not reasons,
            mode=self.mode,
            signer=self.signer,
            reasons=reasons,
            checks=self.checks,
        )


# A phase adds its checks; it returns False only when no later phase can run.
Phase = Callable[[Inspection], bool]


def read_statement(ins: Inspection) -> bool:
    """statement.json is a regular file within the size cap."""
    try:
        ins.on_disk = read_regular(ins.directory / STATEMENT_FILE, MAX_STATEMENT)
    except Unsafe as exc:
        ins.fail("bundle layout", exc.reason, exc.detail)
        return False
    return True


def payload_dir(ins: Inspection) -> bool:
    """payload/ is a directory (not a link to one)."""
    if not ins.payload.is_dir() or ins.payload.is_symlink():
        ins.fail("bundle layout", "bundle.layout", "no payload/")
        return False
    return True


def nothing_beside(ins: Inspection) -> bool:
    ins.checks.append(root_check(ins.directory))
    return True


def read_signature(ins: Inspection) -> bool:
    """statement.sigstore.json exists and is a regular file within the size cap."""
    path = ins.directory / SIGNATURE_FILE
    if not os.path.lexists(path):
        ins.fail("signature", "bundle.unsigned", SIGNATURE_FILE)
        return True
    try:
        ins.signature = read_regular(path, MAX_STATEMENT)
    except Unsafe as exc:
        ins.fail("signature", exc.reason, exc.detail)
    return True


def check_signature(ins: Inspection) -> bool:
    """The signature, its certificate and log entry, and the signer against the identity lock."""
    if ins.signature is None:
        return True
    result = verify_signature(
        ins.signature.decode("utf-8", errors="replace"),
        ins.policy,
        trust_config=ins.trust_config,
        extra_keys=ins.extra_keys,
        deadline=ins.deadline,
    )
    ins.mode, ins.signer, ins.envelope = result.mode, result.signer, result.envelope
    ins.checks.extend(result.checks)
    return True


def payload_type(ins: Inspection) -> bool:
    """The DSSE payload is an in-toto statement."""
    env = ins.envelope
    if env is None:
        return True
    if env.payloadType == PAYLOAD_TYPE:
        ins.checks.append(Check(name="payload type", ok=True, detail=env.payloadType))
    else:
        ins.fail("payload type", "payload.type", f"{env.payloadType!r}, expected {PAYLOAD_TYPE}")
    return True


def signed_payload(ins: Inspection) -> bool:
    """The signed statement, decoded from the envelope."""
    if ins.envelope is None:
        return True
    try:
        ins.signed = base64.b64decode(ins.envelope.payload, validate=True)
    except ValueError:
        ins.fail("signed statement", "signature.malformed", "payload is not base64")
    return True


def statement_is_signed(ins: Inspection) -> bool:
    """statement.json is byte for byte the signed statement."""
    name = "statement.json is the signed statement"
    if ins.signed is None:
        return True
    if ins.signed == ins.on_disk:
        ins.checks.append(Check(name=name, ok=True))
    else:
        ins.fail(
            name,
            "statement.not-signed",
            "statement.json differs from the DSSE payload; the signed one is used",
        )
    return True


def parse_statement(ins: Inspection) -> bool:
    """The signed statement (statement.json when unsigned) is an in-toto Statement v1."""
    try:
        ins.statement = Statement.model_validate_json(
            ins.signed if ins.signed is not None else ins.on_disk
        )
    except ValidationError as exc:
        ins.fail("statement", "statement.malformed", str(exc).splitlines()[0])
        return False
    return True


def _statement(ins: Inspection) -> Statement:
    assert ins.statement is not None  # parse_statement ended the list otherwise
    return ins.statement


def subjects(ins: Inspection) -> bool:
    """Every payload file is a subject with its digest, and every subject a payload file."""
    found = subject_checks(_statement(ins), ins.payload)
    ins.checks.extend(found)
    ins.subjects_ok = all(c.ok for c in found)
    return True


def policies(ins: Inspection) -> bool:
    """The policies named and pinned are known here (with the fork's own once the payload
    digests hold), the records agree, and the waivers hold as a maintainer signed them."""
    statement = _statement(ins)
    forks = fork_policy_dirs(ins.payload, ins.fork, ins.directory) if ins.fork is not None else []
    if not ins.subjects_ok:
        ins.checks.append(policy_version_check(statement, ins.policy))
        ins.checks.append(policy_pin_check(statement, ins.policy))
        ins.checks.append(
            Check(name="records agree", ok=True, detail="not run: the payload digests failed")
        )
        return True
    from engine.audit.consistency import record_checks
    from engine.audit.waivers import waiver_check

    ins.checks.append(policy_version_check(statement, ins.policy, forks))
    ins.checks.append(policy_pin_check(statement, ins.policy, forks))
    ins.checks.extend(record_checks(statement, ins.payload, [ins.policy.path.parent, *forks]))
    ins.checks.append(waiver_check(ins.payload, ins.policy, ins.signer))
    return True


def timings(ins: Inspection) -> bool:
    """timings.json against the statement's digest for it: informational, never failing."""
    from engine.audit.timings import timings_check

    ins.checks.append(timings_check(ins.directory, ins.statement))
    return True


def replay_phase(ins: Inspection) -> bool:
    """The replay, when asked for and nothing failed before it."""
    if ins.replay is None:
        return True
    if any(not c.ok for c in ins.checks):
        ins.checks.append(
            Check(name="replay", ok=True, detail="not run: the bundle already failed verification")
        )
    else:
        ins.checks.extend(ins.replay(_statement(ins), ins.payload))
    return True


PHASES: tuple[Phase, ...] = (
    read_statement,
    payload_dir,
    nothing_beside,
    read_signature,
    check_signature,
    payload_type,
    signed_payload,
    statement_is_signed,
    parse_statement,
    subjects,
    policies,
    timings,
    replay_phase,
)


def verify_bundle(
    directory: Path,
    policy: IdentityPolicy,
    *,
    trust_config: Path | None = None,
    extra_keys: dict[str, ec.EllipticCurvePublicKey] | None = None,
    replay: ReplayFn | None = None,
    deadline: float = DEFAULT_SECONDS,
    fork: Path | None = None,
) -> BundleVerdict:
    """Run PHASES in order, collecting every check. `fork`: the reviewer's checkout of the fork
    the bundle was made in; its policy files (where the replay record says the signing policy
    was) are accepted by sha256."""
    ins = Inspection(directory, policy, trust_config, extra_keys, replay, deadline, fork)
    for phase in PHASES:
        if not phase(ins):
            break
    return ins.verdict()
