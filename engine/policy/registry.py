"""Where the shipped policy files live, and which policy versions this checkout knows.

`known_versions()` is what evidence bundles record and what `verify-bundle` checks a bundle's
named policy versions against (an unknown version is `policy-unknown-version`).
"""

from __future__ import annotations

from pathlib import Path

from engine.paths import data_dir

ROUTING = "routing.toml"
SIGNING = "signing.toml"
REASONS = "reasons.toml"
WAIVERS = "waivers.toml"


def policy_dir() -> Path:
    return data_dir() / "policy"


def known_versions(directory: Path | None = None) -> dict[str, str]:
    """policy name -> version for the routing, signing, catalogue and critical-list files."""
    from engine.policy.routing import load_routing
    from engine.policy.signing import load_signing

    base = directory or policy_dir()
    routing = load_routing(base / ROUTING)
    signing, catalogue = load_signing(base / SIGNING)
    refs = [routing.ref, routing.critical.ref, signing.ref, catalogue.ref]
    return {r.name: r.version for r in refs}


# name -> "module:attribute" of the pydantic model whose JSON Schema `trace schema NAME` should
# print (same shape as engine.commands.SCHEMAS, for the lead to merge in).
SCHEMAS: dict[str, str] = {
    "routing": "engine.policy.routing:RoutingFile",
    "critical-packages": "engine.policy.critical:CriticalFile",
    "signing": "engine.policy.signing:SigningFile",
    "reasons": "engine.policy.reasons:CatalogueFile",
    "waivers": "engine.policy.waivers:WaiverFile",
    "route-decision": "engine.policy.routing:RouteDecision",
    "decision": "engine.policy.signing:Decision",
    "advisory": "engine.advisory:OsvAdvisory",
}
