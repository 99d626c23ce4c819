"""`trace fork`: verify every fix candidate of a nixpkgs fork (what `nix run .#verify` runs).

At the fork's root (a git work tree) it reads `trace/` (name set by `--config`):

    trace/candidates/<name>/candidate.toml   (or trace/candidates/<name>.toml)
    trace/steps.toml                         optional: the fork's own kinds and steps, included
                                             into the standard pipeline (e.g. an extra gate)
    trace/policy/                            optional: files that replace the shipped policy
                                             files of the same name (routing.toml, signing.toml,
                                             waivers.toml, signing-identity.json, …); its
                                             reasons.toml holds only NEW codes (they extend
                                             the shipped catalogue)

For each candidate: run the verify pipeline (package set: with --source, as `nix run .#verify`
passes it, the fork flake's own source store path imported purely through
STATE/fork/package-set.nix; without it, `import <root>/<package-set> {}` from the work tree),
judge it, route it, decide whether it may be signed, write one evidence bundle, and sign it when
the policy allows and an identity is available (`--key`, `--identity-token`, or CI's ambient
OIDC token). Then one summary table. The tree must be clean (the replay record pins its commit)
unless `--allow-dirty`. Exit 0 only when every candidate is allowed; 1 when one is denied; 2 on
bad input (including a dirty tree).

Everything it writes goes under the state directory (default ROOT/.trace, which git status and
the package set's digest both ignore): the verify results, the decisions, the merged policy
directory (`STATE/policy`, what `trace verify-bundle --identity` should be given) and the bundles
(`STATE/bundles/<candidate id>`).

Across CI jobs (engine/fork/shard.py, merge.py; docs/scale.md): `--shard I/N` verifies only the
candidates whose name hashes to shard I and writes a shard directory; `--merge DIR…` joins the
shard directories of one run into one table, report and findings page.
"""

from __future__ import annotations

from engine.fork.config import ForkConfig, discover, make_config
from engine.fork.entry import merged_policy, pipeline_entry, write_if_changed
from engine.fork.outcome_table import check_clean

__all__ = [
    "ForkConfig",
    "check_clean",
    "discover",
    "make_config",
    "merged_policy",
    "pipeline_entry",
    "write_if_changed",
]
