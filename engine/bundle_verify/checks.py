"""Verifying a bundle directory: layout (nothing beside statement.json, statement.sigstore.json
and payload/), signature, signer, payload type, statement, every payload digest, policy versions
and digests, the records' agreement and the decisions re-run offline (engine.bundle_verify.
consistency), and (optionally) a replay. Every failing check carries one reason code.
"""

from __future__ import annotations

import base64
import hashlib
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from cryptography.hazmat.primitives.asymmetric import ec
from pydantic import BaseModel, Field, ValidationError

from engine.bundle_verify.identity import IdentityPolicy
from engine.bundle_verify.safefs import (
    MAX_STATEMENT,
    Listing,
    Unsafe,
    read_regular,
    unsafe_name,
    walk,
)
from engine.bundle_verify.signature import Check, verify_signature
from engine.errors import InputError
from engine.evidence import PAYLOAD_DIR, SIGNATURE_FILE, STATEMENT_FILE
from engine.evidence.bundle import REPLAY_PATH, ROOT_FILES
from engine.evidence.redact import REDACTION_VERSION, rules_digest
from engine.evidence.statement import PAYLOAD_TYPE, Statement
from engine.loader import decode, parse_toml, read_bytes
from engine.signing.deadline import DEFAULT_SECONDS

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


def policy_version_check(
    statement: Statement, policy: IdentityPolicy, fork_dirs: list[Path] | None = None
) -> Check:
    named = statement.policy_versions()
    known = {n: set(v) for n, v in policy.known_versions.items()}
    for d in fork_dirs or []:
        for n, versions in known_policy_files(d).items():
            known.setdefault(n, set()).update(versions)
    unknown = [f"{n} {v}" for n, v in sorted(named.items()) if v not in known.get(n, set())]
    if unknown:
        return Check(
            name="policy versions",
            ok=False,
            reason="policy.unknown-version",
            detail="unknown: " + ", ".join(unknown),
        )
    return Check(
        name="policy versions",
        ok=True,
        detail=", ".join(f"{n} {v}" for n, v in sorted(named.items())) or "none named",
    )


def known_policy_files(directory: Path) -> dict[str, dict[str, set[str]]]:
    """name -> version -> sha256 of the policy files (`[policy]` header) in `directory`."""
    known: dict[str, dict[str, set[str]]] = {}
    from engine.policy.registry import policy_files

    for f in policy_files(directory):
        try:
            raw = read_bytes(f, "policy file")
            data = parse_toml(decode(raw, f, "policy file"), f, "policy file")
        except InputError:
            continue  # the policy's own loader reports broken files
        header = data.get("policy", {})
        if isinstance(header, dict) and "name" in header and "version" in header:
            versions = known.setdefault(str(header["name"]), {})
            versions.setdefault(str(header["version"]), set()).add(hashlib.sha256(raw).hexdigest())
    known.setdefault("redaction", {}).setdefault(REDACTION_VERSION, set()).add(rules_digest())
    return known


def policy_pin_check(
    statement: Statement, policy: IdentityPolicy, fork_dirs: list[Path] | None = None
) -> Check:
    """Each named policy's digest against the policy files here with that name and version.

    A version accepted only through the lock's `policy_versions` list (no file here has it) is
    accepted by version; every version a file here has must match one such file's sha256.
    """
    pins = statement.policy_pins()
    if pins is None:
        return Check(
            name="policy digests",
            ok=False,
            reason="policy.digest-mismatch",
            detail="the statement pins no policy digests: re-create the bundle with this trace",
        )
    files = known_policy_files(policy.path.parent)
    for d in fork_dirs or []:  # the fork's own policy files count by their sha256 too
        for n, versions in known_policy_files(d).items():
            for v, found in versions.items():
                files.setdefault(n, {}).setdefault(v, set()).update(found)
    bad: list[str] = []
    unpinned = sorted(set(statement.policy_versions()) - set(pins))
    bad += [f"{n}: named without a digest" for n in unpinned]
    by_version: list[str] = []
    for name, pin in sorted(pins.items()):
        digests = files.get(name, {}).get(pin.version)
        if digests is None:
            by_version.append(f"{name} {pin.version}")
        elif pin.digest not in digests:
            bad.append(
                f"{name} {pin.version}: sha256 {pin.digest[:12]}…, the file here has "
                + ", ".join(d[:12] + "…" for d in sorted(digests))
            )
    if bad:
        return Check(
            name="policy digests", ok=False, reason="policy.digest-mismatch", detail="; ".join(bad)
        )
    detail = f"{len(pins) - len(by_version)} policies match the files here by sha256"
    if by_version:
        detail += "; accepted by version only (no file here): " + ", ".join(by_version)
    return Check(name="policy digests", ok=True, detail=detail)


def fork_policy_dirs(payload: Path, fork: Path, bundle: Path) -> list[Path]:
    """The fork's directories of the signing policy the replay record pins and of the
    maintainers policy the decision names (paths inside the fork, never inside the bundle;
    `trace:` pins are trace's own files, known already)."""
    from engine.evidence.replay import ReplayRecord

    try:
        rec = ReplayRecord.model_validate_json(read_regular(payload / REPLAY_PATH, MAX_STATEMENT))
    except (Unsafe, ValidationError):
        return []
    pin = rec.signing_policy
    named = [pin.path] if pin is not None else []
    named += _maintainers_path(payload)
    root = fork.resolve()
    found: list[Path] = []
    for rel in named:
        if rel.startswith(("trace:", "outside-fork:")) or unsafe_name(rel):
            continue
        directory = (root / rel).parent.resolve()
        inside = directory.is_relative_to(root) and not directory.is_relative_to(bundle.resolve())
        if inside and directory not in found:
            found.append(directory)
    return found


def _maintainers_path(payload: Path) -> list[str]:
    """The fork-relative path of the maintainers policy the bundled decision names (a fork's
    own maintainers.toml may sit apart from its signing policy)."""
    import json

    try:
        doc = json.loads(read_regular(payload / "decisions" / "signing.json", MAX_STATEMENT))
    except (Unsafe, ValueError):
        return []
    ref = doc.get("maintainers") if isinstance(doc, dict) else None
    path = ref.get("path") if isinstance(ref, dict) else None
    return [path] if isinstance(path, str) else []


def root_check(directory: Path) -> Check:
    extra = sorted(p.name for p in directory.iterdir() if p.name not in ROOT_FILES)
    if extra:
        return Check(
            name="nothing beside the statement",
            ok=False,
            reason="bundle.extra-file",
            detail=", ".join(extra),
        )
    return Check(name="nothing beside the statement", ok=True, detail=", ".join(sorted(ROOT_FILES)))


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
    """`fork`: the reviewer's checkout of the fork the bundle was made in; its policy files
    (where the replay record says the signing policy was) are accepted by sha256."""
    checks: list[Check] = []
    mode = "none"
    signer: dict[str, str] = {}

    def verdict() -> BundleVerdict:
        reasons = sorted({c.reason for c in checks if not c.ok and c.reason})
        return BundleVerdict(
            bundle=str(directory),
            passed=not reasons,
            mode=mode,
            signer=signer,
            reasons=reasons,
            checks=checks,
        )

    statement_path = directory / STATEMENT_FILE
    payload = directory / PAYLOAD_DIR
    try:
        on_disk = read_regular(statement_path, MAX_STATEMENT)
    except Unsafe as exc:
        checks.append(Check(name="bundle layout", ok=False, reason=exc.reason, detail=exc.detail))
        return verdict()
    if not payload.is_dir() or payload.is_symlink():
        checks.append(
            Check(name="bundle layout", ok=False, reason="bundle.layout", detail="no payload/")
        )
        return verdict()
    checks.append(root_check(directory))

    signed: bytes | None = None
    sig_path = directory / SIGNATURE_FILE
    sig_raw: bytes | None = None
    if not os.path.lexists(sig_path):
        checks.append(
            Check(name="signature", ok=False, reason="bundle.unsigned", detail=SIGNATURE_FILE)
        )
    else:
        try:
            sig_raw = read_regular(sig_path, MAX_STATEMENT)
        except Unsafe as exc:
            checks.append(Check(name="signature", ok=False, reason=exc.reason, detail=exc.detail))
    if sig_raw is not None:
        result = verify_signature(
            sig_raw.decode("utf-8", errors="replace"),
            policy,
            trust_config=trust_config,
            extra_keys=extra_keys,
            deadline=deadline,
        )
        mode, signer = result.mode, result.signer
        checks.extend(result.checks)
        if result.envelope is not None:
            env = result.envelope
            if env.payloadType == PAYLOAD_TYPE:
                checks.append(Check(name="payload type", ok=True, detail=env.payloadType))
            else:
                checks.append(
                    Check(
                        name="payload type",
                        ok=False,
                        reason="payload.type",
                        detail=f"{env.payloadType!r}, expected {PAYLOAD_TYPE}",
                    )
                )
            try:
                signed = base64.b64decode(env.payload, validate=True)
            except ValueError:
                checks.append(
                    Check(
                        name="signed statement",
                        ok=False,
                        reason="signature.malformed",
                        detail="payload is not base64",
                    )
                )
    if signed is not None:
        if signed == on_disk:
            checks.append(Check(name="statement.json is the signed statement", ok=True))
        else:
            checks.append(
                Check(
                    name="statement.json is the signed statement",
                    ok=False,
                    reason="statement.not-signed",
                    detail="statement.json differs from the DSSE payload; the signed one is used",
                )
            )
    try:
        statement = Statement.model_validate_json(signed if signed is not None else on_disk)
    except ValidationError as exc:
        checks.append(
            Check(
                name="statement",
                ok=False,
                reason="statement.malformed",
                detail=str(exc).splitlines()[0],
            )
        )
        return verdict()
    subjects = subject_checks(statement, payload)
    checks.extend(subjects)
    forks = fork_policy_dirs(payload, fork, directory) if fork is not None else []
    if all(c.ok for c in subjects):
        checks.append(policy_version_check(statement, policy, forks))
        checks.append(policy_pin_check(statement, policy, forks))
        from engine.bundle_verify.consistency import record_checks

        checks.extend(record_checks(statement, payload, [policy.path.parent, *forks]))
        from engine.bundle_verify.waivers import waiver_check

        checks.append(waiver_check(payload, policy, signer))
    else:
        checks.append(policy_version_check(statement, policy))
        checks.append(policy_pin_check(statement, policy))
        checks.append(
            Check(name="records agree", ok=True, detail="not run: the payload digests failed")
        )
    if replay is not None:
        if any(not c.ok for c in checks):
            checks.append(
                Check(
                    name="replay",
                    ok=True,
                    detail="not run: the bundle already failed verification",
                )
            )
        else:
            checks.extend(replay(statement, payload))
    return verdict()
