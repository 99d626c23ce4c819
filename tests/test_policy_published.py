"""A published policy file never changes under its version, and is never removed.

Every bundle pins the sha256 of the policy files (and redaction rules) its decision was made
under, and `verify-bundle` finds them among the files trace ships (policy/, policy/history/).
Editing a shipped file in place -- even adding one reason code to the catalogue -- would make
every honest bundle signed under it fail its policy-digest check. policy/history/published.json
lists what has shipped; these tests hold the shipped files to it."""

from __future__ import annotations

import hashlib
import json
import tomllib
from pathlib import Path

from engine.evidence.redact import REDACTION_VERSION, rules_digest
from engine.policy.registry import policy_dir, policy_files

HOW = (
    "bump the file's [policy] version, keep the published file byte for byte under "
    "policy/history/NAME-VERSION/ (with the catalogue it names beside it), and add the new "
    "sha256 to policy/history/published.json"
)


def _published() -> dict[str, set[str]]:
    doc = json.loads((policy_dir() / "history" / "published.json").read_text(encoding="utf-8"))
    return {k: set(v) for k, v in doc["published"].items()}


def _shipped() -> dict[str, dict[str, Path]]:
    """'name version' -> sha256 -> file, for every policy file trace ships."""
    out: dict[str, dict[str, Path]] = {}
    for f in policy_files(policy_dir()):
        raw = f.read_bytes()
        header = tomllib.loads(raw.decode("utf-8")).get("policy", {})
        if "name" in header:
            key = f"{header['name']} {header['version']}"
            out.setdefault(key, {})[hashlib.sha256(raw).hexdigest()] = f
    out.setdefault(f"redaction {REDACTION_VERSION}", {})[rules_digest()] = Path(
        "trace_sandbox/harness/redaction-rules.json"
    )
    return out


def test_every_shipped_policy_file_is_a_published_version() -> None:
    published = _published()
    changed = [
        f"{files[digest]} ({key}, sha256 {digest[:12]}…)"
        for key, files in _shipped().items()
        for digest in files
        if digest not in published.get(key, set())
    ]
    assert changed == [], f"changed or unpublished policy files: {changed}; {HOW}"


def test_no_published_version_is_dropped() -> None:
    shipped = _shipped()
    gone = [
        f"{key} sha256 {digest[:12]}…"
        for key, digests in _published().items()
        for digest in digests
        if digest not in shipped.get(key, {})
    ]
    assert gone == [], (
        f"published policy files no longer shipped: {gone}; bundles signed under them stop "
        "verifying: restore them under policy/history/"
    )
