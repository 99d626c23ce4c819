"""The policies a bundle's statement names and pins, against the policy files of this checkout
(and of the fork the bundle was made in): `verify_bundle`'s policy phase."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pydantic import ValidationError

from engine.audit.identity import IdentityPolicy
from engine.audit.safefs import MAX_STATEMENT, Unsafe, read_regular, unsafe_name
from engine.audit.signature import Check
from engine.errors import InputError
from engine.evidence.bundle import REPLAY_PATH
from engine.evidence.redact import REDACTION_VERSION, rules_digest
from engine.evidence.statement import Statement
from engine.loader import decode, parse_toml, read_bytes


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
    try:
        doc = json.loads(read_regular(payload / "decisions" / "signing.json", MAX_STATEMENT))
    except (Unsafe, ValueError):
        return []
    ref = doc.get("maintainers") if isinstance(doc, dict) else None
    path = ref.get("path") if isinstance(ref, dict) else None
    return [path] if isinstance(path, str) else []


def policy_files_with(digest: str, directories: list[Path]) -> list[Path]:
    """Every policy file in `directories` (in order) whose sha256 is `digest`."""
    from engine.policy.registry import policy_files

    return [
        f
        for d in directories
        for f in policy_files(d)
        if hashlib.sha256(f.read_bytes()).hexdigest() == digest
    ]
