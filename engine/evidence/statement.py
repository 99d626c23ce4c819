"""The in-toto Statement v1 over a bundle's payload, with an SLSA-provenance-v1-style predicate.

Subjects: one per payload file, `name` = its path inside `payload/`, sorted, `digest.sha256`.
Predicate (`https://slsa.dev/provenance/v1` field names):
- buildDefinition.buildType: `BUILD_TYPE`;
  externalParameters: the candidate and graph files (path + sha256) and the candidate id;
  internalParameters: engine and Nix versions, system, policy versions, `policies` (each policy's
  version and the sha256 of its file, so a loosened policy under the same version is told
  apart), redaction version;
  resolvedDependencies (`dependencies`): the fork revision (gitCommit/gitTree), templates and
  graph files (absolute `urn:trace:fork:`/`urn:trace:engine:` uris, sha256 of that file), and
  every step's derivation (`file:///nix/store/….drv`, sha256 of the .drv's bytes, the step key as
  the `trace.stepKey` annotation).
- runDetails: builder id (default `urn:trace:builder:cli`) + versions, invocation id, the
  real start/finish times of the run whose results are bundled, and `byproducts`: for each step
  whose machines are known, `{name: "machine:<step>", annotations: {trace.builtOn,
  trace.checkedOn}}` (where its output was made: `local`, a remote builder's store URI or
  `cache:<url>`; where its `--check` rebuild ran). Signed, but not a payload file: two machines'
  bundles of the same results have the same subjects.
The URIs are stable and documented in docs/evidence.md.
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
BUILD_TYPE = "urn:trace:build-type:verify:v1"
FORK_URN = "urn:trace:fork:"
ENGINE_URN = "urn:trace:engine:"
TRACE_PREFIX = "trace:"  # = engine.paths.PREFIX


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
    annotations: dict[str, str] | None = None


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
    return t.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def file_uri(path: str) -> str:
    """The absolute URI of a pinned file: `urn:trace:fork:<path>` for a file of the fork (the
    project root), `urn:trace:engine:<path>` for trace's own (`trace:<path>` pins)."""
    if path.startswith(TRACE_PREFIX):
        return ENGINE_URN + path.removeprefix(TRACE_PREFIX)
    return FORK_URN + path


def dependencies(replay: ReplayRecord) -> list[ResourceDescriptor]:
    """resolvedDependencies from a replay record: the fork revision, every graph file and
    template (sha256 of the file the uri names), and every step's derivation (`file://` uri of
    the .drv, the sha256 of its bytes; the step key under its own name in `annotations`)."""
    deps: list[ResourceDescriptor] = []
    if replay.package_set is not None:
        ps = replay.package_set
        digest = {k: v for k, v in (("gitCommit", ps.commit), ("gitTree", ps.tree)) if v}
        deps.append(ResourceDescriptor(name="package-set", uri=file_uri(ps.path), digest=digest))
    for pin in [*replay.graph_files, *replay.templates]:
        deps.append(
            ResourceDescriptor(name=pin.path, uri=file_uri(pin.path), digest={"sha256": pin.sha256})
        )
    for step_id in sorted(replay.steps):
        step = replay.steps[step_id]
        if step.drv:
            deps.append(
                ResourceDescriptor(
                    name=step_id,
                    uri="file://" + step.drv,
                    digest={"sha256": step.drv_sha256} if step.drv_sha256 else {},
                    annotations={"trace.stepKey": step.key},
                )
            )
    return deps


MACHINE_PREFIX: Final = "machine:"


def machine_byproducts(
    machines: dict[str, tuple[str | None, str | None]],
) -> list[ResourceDescriptor]:
    """runDetails.byproducts: step id -> (built on, checked on), for the steps where known."""
    out: list[ResourceDescriptor] = []
    for sid in sorted(machines):
        built, checked = machines[sid]
        notes = {k: v for k, v in (("trace.builtOn", built), ("trace.checkedOn", checked)) if v}
        if notes:
            out.append(ResourceDescriptor(name=MACHINE_PREFIX + sid, annotations=notes))
    return out


def external_parameters(replay: ReplayRecord, candidate_id: str) -> dict[str, Any]:
    return {
        "candidate": {"id": candidate_id, **replay.candidate.model_dump()},
        "graph": replay.graph.model_dump(),
    }


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
    machines: dict[str, tuple[str | None, str | None]] | None = None,
) -> Statement:
    """`subjects` maps payload path -> sha256 hex; `started`/`finished`: when the run whose
    results are bundled began and ended (the builds, or the store re-check of cached ones)."""
    return Statement(
        subject=[Subject(name=p, digest={"sha256": subjects[p]}) for p in sorted(subjects)],
        predicate=Provenance(
            buildDefinition=BuildDefinition(
                externalParameters=external_parameters(replay, candidate_id),
                internalParameters={
                    "engine_version": replay.engine_version,
                    "nix_version": replay.nix_version,
                    "system": replay.system,
                    "policy_versions": dict(sorted(policy_versions.items())),
                    "policies": {n: p.model_dump() for n, p in sorted((policies or {}).items())},
                    "redaction_version": redaction_version,
                },
                resolvedDependencies=dependencies(replay),
            ),
            runDetails=RunDetails(
                builder=Builder(
                    id=builder_id,
                    version={"trace": replay.engine_version, "nix": replay.nix_version},
                ),
                metadata=RunMetadata(
                    invocationId=invocation_id, startedOn=_iso(started), finishedOn=_iso(finished)
                ),
                byproducts=machine_byproducts(machines or {}),
            ),
        ),
    )
