"""`trace scout SOURCE`: OSV advisories -> eligibility -> candidate skeletons for the fork.

The fork's packages are looked up for every advisory at once: one `nix-instantiate --eval` of the
package set, under a deadline, for all the names the advisories mention (not one Nix call per
package). Eligible advisories get a skeleton (trace/candidates/<id>/candidate.toml + advisory)
that `trace route` and `trace draft` take; every refusal is listed with its reason codes. The
command line is engine/cli/scout.py.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DEADLINE_S = 120.0


def fork_packages(fork: Path, names: list[str]) -> dict[str, dict[str, Any]]:
    """{name: {exists, evaluates, version}} for every name, from ONE evaluation."""
    from engine.errors import InputError
    from engine.render import to_nix

    if not names:
        return {}
    expr = (
        f"let pkgs = import {to_nix(str(fork.resolve()))} {{ }};\n"
        "  f = n: if builtins.hasAttr n pkgs then\n"
        "    let r = builtins.tryEval (let p = pkgs.${n}; in\n"
        "      if p ? version then p.version else (builtins.parseDrvName p.name).version);\n"
        "    in { exists = true; evaluates = r.success; version = if r.success then r.value "
        "else null; }\n"
        "  else { exists = false; };\n"
        f"in builtins.listToAttrs (map (n: {{ name = n; value = f n; }}) {to_nix(names)})\n"
    )
    try:
        proc = subprocess.run(
            ["nix-instantiate", "--eval", "--strict", "--json", "--expr", expr],
            capture_output=True,
            text=True,
            timeout=DEADLINE_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise InputError(
            f"evaluating the fork's package set took longer than {DEADLINE_S:g} s",
            file=fork,
            hint="check that `nix-instantiate --eval -E 'import ./. {}'` works in the fork",
        ) from None
    if proc.returncode != 0:
        raise InputError(
            f"the fork's package set does not evaluate: {proc.stderr.strip()[-400:]}",
            file=fork,
            hint="fix the package set; scout reads `import FORK {}`",
        )
    doc: dict[str, dict[str, Any]] = json.loads(proc.stdout)
    return doc


def _advisories(
    source: Path | None, osv_api: str | None, packages: Sequence[str], fork: Path, ecosystem: str
) -> list[Any]:
    from engine.errors import UsageError
    from engine.roles.scout import query_api, read_advisories

    if (source is None) == (osv_api is None):
        raise UsageError("give either SOURCE (a directory or zip) or --osv-api URL")
    if source is not None:
        return read_advisories(source.resolve())
    if not packages:
        raise UsageError("--osv-api needs --package NAME (one or more)")
    facts = fork_packages(fork, sorted(set(packages)))
    queries = [
        (name, ecosystem, str(f["version"]))
        for name, f in sorted(facts.items())
        if f.get("exists") and f.get("version")
    ]
    assert osv_api is not None  # exactly one of source and osv_api (checked above)
    return query_api(osv_api, queries) if queries else []


def scout(
    fork: Path,
    *,
    source: Path | None = None,
    osv_api: str | None = None,
    packages: Sequence[str] = (),
    eligibility: Path | None = None,
) -> dict[str, Any]:
    """The scout report (schema trace.scout/v1): every advisory eligible or not, with its reason
    codes; a skeleton is written for each eligible one."""
    from engine.agent.skeleton import write_skeleton
    from engine.paths import data_dir
    from engine.roles.eligibility import PackageFacts, judge, load_eligibility

    fork = fork.resolve()
    own = fork / "trace" / "policy" / "eligibility.toml"
    policy = load_eligibility(
        eligibility or (own if own.is_file() else data_dir() / "policy" / "eligibility.toml")
    )
    found = _advisories(source, osv_api, packages, fork, policy.spec.ecosystems[0])
    pairs = [(f, name) for f in found if f.advisory for name in f.advisory.packages]
    facts = fork_packages(fork, sorted({name for _, name in pairs}))
    rows: list[dict[str, Any]] = []
    for f in found:
        if f.advisory is None:
            rows.append({"file": f.name, "eligible": False, "reasons": ["scout-malformed"],
                         "detail": f.problem})  # fmt: skip
            continue
        if not f.advisory.packages:
            rows.append({"file": f.name, "advisory": f.advisory.id, "eligible": False,
                         "reasons": ["eligibility-package-unknown"]})  # fmt: skip
    for f, name in pairs:
        assert f.advisory is not None
        v = judge(f.advisory, name, PackageFacts.model_validate(facts[name]), policy)
        row: dict[str, Any] = {"file": f.name, **v.model_dump(mode="json", exclude={"policy"})}
        if v.eligible:
            skeleton = write_skeleton(fork, f.advisory, f.raw, name, f.advisory.upstream_fix)
            row["skeleton"] = str(skeleton)
        rows.append(row)
    report = {"schema": "trace.scout/v1", "policy": policy.ref.model_dump(mode="json"),
              "advisories": rows}  # fmt: skip
    return report
