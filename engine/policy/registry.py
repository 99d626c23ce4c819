"""Where the shipped policy files live, and the schemas `trace schema` prints for policy files.

It imports nothing of the policy modules themselves (they import it), so policy dependencies point
one way: registry <- routing, signing, gates, evidence, fork.
"""

from __future__ import annotations

from pathlib import Path

from engine.paths import data_dir

ROUTING = "routing.toml"
SIGNING = "signing.toml"
REASONS = "reasons.toml"
BUNDLE_REASONS = "bundle-reasons.toml"  # verify-bundle's integrity codes
WAIVERS = "waivers.toml"
# Earlier versions of a policy directory's files: history/NAME-VERSION/ holds the policy file as
# it was signed under, with the catalogue it named beside it (byte for byte), so a bundle signed
# under a replaced version still matches its pinned digests and its decision still re-runs.
HISTORY = "history"


def policy_files(directory: Path) -> list[Path]:
    """The policy TOML files of a directory: its own, then those of its history/*/ folders."""
    if not directory.is_dir():
        return []
    return sorted(directory.glob("*.toml")) + sorted(directory.glob(f"{HISTORY}/*/*.toml"))


def policy_dir() -> Path:
    return data_dir() / "policy"


# name -> "module:attribute" of the pydantic model whose JSON Schema `trace schema NAME` should
# print (same shape as engine.cli.schema.SCHEMAS, which merges it).
SCHEMAS: dict[str, str] = {
    "routing": "engine.policy.routing:RoutingFile",
    "critical-packages": "engine.policy.critical:CriticalFile",
    "signing": "engine.policy.signing_rules:SigningFile",
    "reasons": "engine.policy.reasons:CatalogueFile",
    "waivers": "engine.policy.waivers:WaiverFile",
    "waiver": "engine.policy.signed_waiver:WaiverStatement",
    "maintainers": "engine.policy.maintainers:MaintainersFile",
    "route-decision": "engine.policy.routing:RouteDecision",
    "decision": "engine.policy.signing_decision:Decision",
    "advisory": "engine.advisory:OsvAdvisory",
}
