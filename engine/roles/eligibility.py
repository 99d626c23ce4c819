"""Eligibility (`policy/eligibility.toml`): may this advisory become a candidate for the fork?

Default not eligible: every check must pass; each refusal is a stable code of
policy/reasons.toml. Pure: the fork's package versions come in as data (one batched evaluation,
done by the caller), so this module never calls Nix.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from engine.advisory import Affected, OsvAdvisory
from engine.policy.source import PolicyHeader, PolicyRef, load_policy, ref

SCHEMA = "trace.eligibility/v1"


class EligibilityFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: PolicyHeader
    ecosystems: list[str] = Field(min_length=1)
    require_fix_reference: bool = True
    require_affected_version: bool = True


class EligibilityPolicy(BaseModel):
    model_config = ConfigDict(frozen=True)

    ref: PolicyRef
    spec: EligibilityFile


class PackageFacts(BaseModel):
    """What one batched evaluation of the fork said about a package name."""

    model_config = ConfigDict(frozen=True)

    exists: bool
    evaluates: bool = False
    version: str | None = None


class Verdict(BaseModel):
    model_config = ConfigDict(frozen=True)

    advisory: str
    package: str
    eligible: bool
    reasons: list[str]
    version: str | None = None
    policy: PolicyRef


def load_eligibility(path: Path) -> EligibilityPolicy:
    spec, _, digest = load_policy(path, EligibilityFile, schema=SCHEMA, what="eligibility policy")
    return EligibilityPolicy(ref=ref(spec.policy, path, digest), spec=spec)


_PART = re.compile(r"\d+|[A-Za-z]+")


def version_key(v: str) -> tuple[tuple[int, int | str], ...]:
    """An order for dotted versions: numbers numerically, words below numbers, and the end of a
    version above a word but below a number (1.0rc1 < 1.0 < 1.0.1)."""
    parts = tuple((1, int(p)) if p.isdigit() else (0, p.lower()) for p in _PART.findall(v))
    return (*parts, (0, "~"))


def affected(entry: Affected, version: str) -> bool | None:
    """True/False when the entry's versions or ECOSYSTEM/SEMVER ranges decide; None: unknown."""
    if version in entry.versions:
        return True
    decided: bool | None = False if entry.versions else None
    key = version_key(version)
    for r in entry.ranges:
        if r.type == "GIT":
            continue
        inside = False
        for ev in r.events:
            if ev.introduced is not None:
                inside = ev.introduced == "0" or version_key(ev.introduced) <= key
            elif (ev.fixed is not None and version_key(ev.fixed) <= key) or (
                ev.last_affected is not None and version_key(ev.last_affected) < key
            ):
                inside = False
        if inside:
            return True
        decided = False
    return decided


def judge(
    adv: OsvAdvisory, package: str, facts: PackageFacts, policy: EligibilityPolicy
) -> Verdict:
    spec = policy.spec
    reasons: list[str] = []
    entries = [a for a in adv.affected if a.package and a.package.name == package]
    if adv.withdrawn is not None:
        reasons.append("eligibility-withdrawn")
    if not any(a.package and a.package.ecosystem in spec.ecosystems for a in entries):
        reasons.append("eligibility-ecosystem")
    if not facts.exists:
        reasons.append("eligibility-package-unknown")
    elif not facts.evaluates or facts.version is None:
        reasons.append("eligibility-package-does-not-evaluate")
    elif spec.require_affected_version:
        found = [affected(a, facts.version) for a in entries]
        if True not in found:
            unknown = None in found or not found
            reasons.append(
                "eligibility-version-unknown" if unknown else "eligibility-version-not-affected"
            )
    if spec.require_fix_reference and not adv.fix_references:
        reasons.append("eligibility-no-fix-reference")
    return Verdict(
        advisory=adv.id,
        package=package,
        eligible=not reasons,
        reasons=reasons,
        version=facts.version,
        policy=policy.ref,
    )
