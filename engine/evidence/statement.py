"""The in-toto Statement v1 over a bundle's payload, with an SLSA-provenance-v1-style predicate.

Subjects: one per payload file, `name` = its path inside `payload/`, sorted, `digest.sha256`.
Predicate (`https://slsa.dev/provenance/v1` field names):
- buildDefinition.buildType: `BUILD_TYPE`;
  externalParameters: the candidate and graph files (path + sha256) and the candidate id;
  internalParameters: engine and Nix versions, system, policy versions, `policies` (each policy's
  version and the sha256 of its file, so a loosened policy under the same version is told
  apart), redaction version;
  resolvedDependencies: the fork revision (gitCommit/gitTree), templates and graph files (sha256),
  and every step's derivation (`uri` = the .drv store path, `digest.sha256` = the step key).
- runDetails: builder id + versions, invocation id and start/finish times.
The statement is serialised as RFC 8785 (JCS) bytes: those exact bytes are the DSSE payload.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from engine.evidence.replay import ReplayRecord
from engine.hashing import canonical_json

STATEMENT_TYPE: Final = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE: Final = "https://slsa.dev/provenance/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
BUILD_TYPE = "https://trace.invalid/buildtypes/verify/v1"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class PolicyPin(_Model):
    """A policy the bundle's decisions applied: its version and the sha256 of its file's bytes
    (for `redaction`: of the rules as data, see engine.evidence.redact.rules_digest)."""

    version: str
    digest: str


class Subject(_Model):
    name: str
    digest: dict[str, str]


class ResourceDescriptor(_Model):
    name: str | None = None
    uri: str | None = None
    digest: dict[str, str] = Field(default_factory=dict)


class BuildDefinition(_Model):
    buildType: str = BUILD_TYPE
    externalParameters: dict[str, Any]
    internalParameters: dict[str, Any]
    resolvedDependencies: list[ResourceDescriptor]


class Builder(_Model):
    id: str
    version: dict[str, str] = Field(default_factory=dict)


class RunMetadata(_Model):
    invocationId: str
    startedOn: str
    finishedOn: str


class RunDetails(_Model):
    builder: Builder
    metadata: RunMetadata
    byproducts: list[ResourceDescriptor] = Field(default_factory=list)


class Provenance(_Model):
    buildDefinition: BuildDefinition
    runDetails: RunDetails


class Statement(_Model):
    type_: Literal["https://in-toto.io/Statement/v1"] = Field(default=STATEMENT_TYPE, alias="_type")
    subject: list[Subject] = Field(min_length=1)
    predicateType: Literal["https://slsa.dev/provenance/v1"] = PREDICATE_TYPE
    predicate: Provenance

    def to_bytes(self) -> bytes:
        return canonical_json(self.model_dump(mode="json", by_alias=True, exclude_none=True))

    def policy_versions(self) -> dict[str, str]:
        raw = self.predicate.buildDefinition.internalParameters.get("policy_versions", {})
        return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}

    def policy_pins(self) -> dict[str, PolicyPin] | None:
        """name -> version and digest; None for a statement written before pins existed."""
        raw = self.predicate.buildDefinition.internalParameters.get("policies")
        if not isinstance(raw, dict):
            return None
        return {str(k): PolicyPin.model_validate(v) for k, v in raw.items()}


def _iso(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def build_statement(
    subjects: dict[str, str],
    *,
    replay: ReplayRecord,
    candidate_id: str,
    policy_versions: dict[str, str],
    redaction_version: str,
    policies: dict[str, PolicyPin] | None = None,
    builder_id: str,
    invocation_id: str,
    started: dt.datetime,
    finished: dt.datetime,
) -> Statement:
    """`subjects` maps payload path -> sha256 hex."""
    deps: list[ResourceDescriptor] = []
    if replay.package_set is not None:
        ps = replay.package_set
        digest = {k: v for k, v in (("gitCommit", ps.commit), ("gitTree", ps.tree)) if v}
        deps.append(ResourceDescriptor(name="package-set", uri=ps.path, digest=digest))
    for pin in [*replay.graph_files, *replay.templates]:
        deps.append(ResourceDescriptor(name=pin.path, uri=pin.path, digest={"sha256": pin.sha256}))
    for step_id in sorted(replay.steps):
        step = replay.steps[step_id]
        if step.drv:
            deps.append(ResourceDescriptor(name=step_id, uri=step.drv, digest={"sha256": step.key}))
    return Statement(
        subject=[Subject(name=p, digest={"sha256": subjects[p]}) for p in sorted(subjects)],
        predicate=Provenance(
            buildDefinition=BuildDefinition(
                externalParameters={
                    "candidate": {"id": candidate_id, **replay.candidate.model_dump()},
                    "graph": replay.graph.model_dump(),
                },
                internalParameters={
                    "engine_version": replay.engine_version,
                    "nix_version": replay.nix_version,
                    "system": replay.system,
                    "policy_versions": dict(sorted(policy_versions.items())),
                    "policies": {n: p.model_dump() for n, p in sorted((policies or {}).items())},
                    "redaction_version": redaction_version,
                },
                resolvedDependencies=deps,
            ),
            runDetails=RunDetails(
                builder=Builder(
                    id=builder_id,
                    version={"trace": replay.engine_version, "nix": replay.nix_version},
                ),
                metadata=RunMetadata(
                    invocationId=invocation_id, startedOn=_iso(started), finishedOn=_iso(finished)
                ),
            ),
        ),
    )
