"""Routing: before any model sees a candidate, decide which of four states it gets.

Ordered rules over facts about the advisory and the package; the first rule whose every
condition holds decides. No rule matching means `reject`. `route()` is pure: facts and policy in,
decision out, so it is table-testable.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from pathlib import Path
from typing import Literal

from pydantic import Field

from engine.advisory import Level, OsvAdvisory
from engine.candidate import Candidate, RoutingCandidate
from engine.errors import PolicyError
from engine.policy.critical import CriticalList, load_critical
from engine.policy.registry import ROUTING, policy_dir
from engine.policy.source import (
    PolicyHeader,
    PolicyRef,
    Strict,
    find_line,
    load_policy,
    ref,
    require_unique,
)

SCHEMA = "trace.routing/v1"
State = Literal["auto-merge-eligible", "human-review-required", "advisory-only", "reject"]
Origin = Literal["model", "human", "upstream"]


class RouteFacts(Strict):
    """What routing may look at: the advisory, the package and where the patch came from."""

    candidate: str
    package: str
    advisory: str = Field(description="advisory id")
    severity: Level
    score: float | None = Field(default=None, description="CVSS v3 base score, if any")
    ecosystems: list[str] = Field(default_factory=list)
    upstream_fix: bool
    critical: bool
    origin: Origin
    withdrawn: bool = False


class When(Strict):
    """Conditions of a rule; all given must hold, an absent one holds for every candidate."""

    severity: list[Level] | None = Field(default=None, description="any of these levels")
    min_score: float | None = Field(default=None, ge=0, le=10, description="CVSS base >= this")
    max_score: float | None = Field(default=None, ge=0, le=10, description="CVSS base <= this")
    ecosystem: list[str] | None = Field(
        default=None, description="globs; holds when any advisory ecosystem matches one"
    )
    upstream_fix: bool | None = Field(default=None, description="an upstream fix is referenced")
    critical: bool | None = Field(default=None, description="package is on the critical list")
    origin: list[Origin] | None = Field(default=None, description="where the patch came from")
    package: list[str] | None = Field(default=None, description="globs over the attribute path")
    withdrawn: bool | None = Field(default=None, description="the advisory is withdrawn")

    def holds(self, f: RouteFacts) -> bool:
        checks = [
            self.severity is None or f.severity in self.severity,
            self.min_score is None or (f.score is not None and f.score >= self.min_score),
            self.max_score is None or (f.score is not None and f.score <= self.max_score),
            self.ecosystem is None
            or any(fnmatchcase(e, g) for e in f.ecosystems for g in self.ecosystem),
            self.upstream_fix is None or f.upstream_fix == self.upstream_fix,
            self.critical is None or f.critical == self.critical,
            self.origin is None or f.origin in self.origin,
            self.package is None or any(fnmatchcase(f.package, g) for g in self.package),
            self.withdrawn is None or f.withdrawn == self.withdrawn,
        ]
        return all(checks)


class Rule(Strict):
    name: str = Field(pattern=r"^[a-z][a-z0-9-]*$", description="stable rule name (printed)")
    description: str = ""
    state: State
    when: When = Field(default_factory=When, description="conditions; empty matches everything")


class RoutingFile(Strict):
    policy: PolicyHeader
    critical_packages: str = Field(
        default="critical-packages.toml", description="critical list, relative to this file"
    )
    rules: list[Rule] = Field(min_length=1, description="ordered: the first match decides")


class RoutingPolicy(Strict):
    ref: PolicyRef
    critical: CriticalList
    rules: list[Rule]


class RouteDecision(Strict):
    schema_: Literal["trace.route/v1"] = Field(default="trace.route/v1", alias="schema")
    state: State
    rule: str | None = Field(description="the rule that matched; None: no rule, so reject")
    policy: PolicyRef
    critical_packages: PolicyRef
    facts: RouteFacts


def load_routing(path: Path) -> RoutingPolicy:
    spec, text, digest = load_policy(path, RoutingFile, schema=SCHEMA, what="routing policy")
    require_unique(
        [r.name for r in spec.rules],
        table="rules",
        field="name",
        what="rule name",
        verb="is used twice",
        path=path,
        text=text,
        hint="give every rule its own name: decisions print it",
    )
    for i, rule in enumerate(spec.rules):
        w = rule.when
        if w.min_score is not None and w.max_score is not None and w.min_score > w.max_score:
            raise PolicyError(
                f"rule '{rule.name}': min_score {w.min_score} is above max_score {w.max_score}",
                file=path,
                key=f"rules.{i}.when",
                line=find_line(text, ("rules", i, "when", "min_score")),
                hint="no candidate could match this rule; fix the bounds",
            )
    critical = load_critical((path.parent / spec.critical_packages).resolve())
    return RoutingPolicy(ref=ref(spec.policy, path, digest), critical=critical, rules=spec.rules)


def facts_for(
    *,
    candidate: str,
    package: str,
    origin: Origin,
    advisory: OsvAdvisory,
    upstream_fix: str | None,
    critical: CriticalList,
) -> RouteFacts:
    """Facts from a candidate's declared fields, its advisory and the critical list."""
    return RouteFacts(
        candidate=candidate,
        package=package,
        advisory=advisory.id,
        severity=advisory.level,
        score=advisory.base_score,
        ecosystems=advisory.ecosystems,
        upstream_fix=bool(upstream_fix or advisory.upstream_fix),
        critical=critical.match(package) is not None,
        origin=origin,
        withdrawn=advisory.withdrawn is not None,
    )


def route(facts: RouteFacts, policy: RoutingPolicy) -> RouteDecision:
    """The first rule whose conditions all hold decides; none: reject."""
    for rule in policy.rules:
        if rule.when.holds(facts):
            state: State = rule.state
            name: str | None = rule.name
            break
    else:
        state, name = "reject", None
    return RouteDecision(
        state=state,
        rule=name,
        policy=policy.ref,
        critical_packages=policy.critical.ref,
        facts=facts,
    )


def route_candidate(
    candidate: Candidate | RoutingCandidate, policy_file: Path | None = None
) -> RouteDecision:
    """Route one candidate: its advisory and package against the routing policy file (default:
    the shipped `policy/routing.toml`). Reads only id, package, origin and [advisory], so a
    candidate loaded `for_routing` (no patch or reproducer yet) routes like a complete one."""
    from engine.advisory import load_advisory

    policy = load_routing(policy_file or policy_dir() / ROUTING)
    spec = candidate.spec
    facts = facts_for(
        candidate=spec.id,
        package=spec.package,
        origin=spec.origin,
        advisory=load_advisory(candidate.file(spec.advisory.osv)),
        upstream_fix=spec.advisory.upstream_fix,
        critical=policy.critical,
    )
    return route(facts, policy)
