"""`trace scout SOURCE`: OSV advisories -> eligibility -> candidate skeletons for the fork.

The fork's packages are looked up for every advisory at once: one `nix-instantiate --eval` of the
package set, under a deadline, for all the names the advisories mention (not one Nix call per
package). Eligible advisories get a skeleton (trace/candidates/<id>/candidate.toml + advisory)
that `trace route` and `trace draft` take; every refusal is listed with its reason codes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

DEADLINE_S = 120.0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "scout",
        help="read OSV advisories, match them to the fork's packages, write candidate skeletons",
        description="Exit 0 after writing the skeletons of the eligible advisories (none may "
        "be); 2 on bad input or when the fork's package set does not evaluate.",
    )
    p.add_argument("source", type=Path, nargs="?", default=None,
                   help="a directory of OSV JSON files or an OSV export zip")  # fmt: skip
    p.add_argument("--osv-api", default=None, metavar="URL",
                   help="query the OSV API instead (online; e.g. https://api.osv.dev) for the "
                   "--package names at the fork's versions, 30 s deadline a request")  # fmt: skip
    p.add_argument("--package", action="append", default=[], help="with --osv-api (repeat)")
    p.add_argument("--fork", type=Path, default=Path("."), help="the fork (default: .)")
    p.add_argument("--eligibility", type=Path, default=None,
                   help="eligibility policy (default: FORK/trace/policy/eligibility.toml, "
                   "else trace's policy/eligibility.toml)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(handler=cmd_scout)


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


def _advisories(args: argparse.Namespace, fork: Path, ecosystem: str) -> list[Any]:
    from engine.errors import UsageError
    from engine.roles.scout import query_api, read_advisories

    if (args.source is None) == (args.osv_api is None):
        raise UsageError("give either SOURCE (a directory or zip) or --osv-api URL")
    if args.source is not None:
        return read_advisories(args.source.resolve())
    if not args.package:
        raise UsageError("--osv-api needs --package NAME (one or more)")
    facts = fork_packages(fork, sorted(set(args.package)))
    queries = [
        (name, ecosystem, str(f["version"]))
        for name, f in sorted(facts.items())
        if f.get("exists") and f.get("version")
    ]
    return query_api(args.osv_api, queries) if queries else []


def cmd_scout(args: argparse.Namespace) -> int:
    from engine.agent.skeleton import write_skeleton
    from engine.paths import data_dir
    from engine.roles.eligibility import PackageFacts, judge, load_eligibility

    fork = args.fork.resolve()
    own = fork / "trace" / "policy" / "eligibility.toml"
    policy = load_eligibility(
        args.eligibility or (own if own.is_file() else data_dir() / "policy" / "eligibility.toml")
    )
    found = _advisories(args, fork, policy.spec.ecosystems[0])
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
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        for r in rows:
            what = f"{r.get('advisory', r['file'])} {r.get('package', '')}".strip()
            if r["eligible"]:
                print(f"eligible      {what} (version {r['version']}): {r['skeleton']}")
            else:
                print(f"not eligible  {what}: {', '.join(r['reasons'])}")
    sys.stdout.flush()
    return 0
