"""`trace fork --merge DIR…`: join the shard directories of one sharded run into one report.

Every directory must be one `trace fork --shard I/N --shard-dir DIR` wrote (engine.fork.shard).
The merge refuses, naming the directory and what differs, when the shards are not one run:
a different N, fork commit, flake source or package set (the package-set revision), policy
digest, engine id or candidate list; a shard given twice or missing; a candidate in two shards
or in the wrong one; a row without its bundle; a policy copy whose bytes do not match the
digest its manifest states. The merged rows come in the run's candidate order, so the merged
report is the one an unsharded run of the same commit writes (up to paths and build counts).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from engine.errors import InputError, UsageError
from engine.fork.config import candidate_name
from engine.fork.outcome_table import ForkReport, Outcome
from engine.fork.shard import (
    AGREE,
    BUNDLES,
    MANIFEST,
    POLICY,
    REPORT,
    Manifest,
    policy_digest,
    shard_of,
)

HINT = "pass the directories that `trace fork --shard I/N --shard-dir DIR` wrote, one per shard"


class Shard:
    """One shard directory, read and checked on its own."""

    def __init__(self, path: Path) -> None:
        self.path = path.resolve()
        self.manifest = self._manifest()
        self.report = self._report()

    def _manifest(self) -> Manifest:
        file = self.path / MANIFEST
        if not file.is_file():
            raise InputError(f"{self.path} is not a shard directory (no {MANIFEST})", hint=HINT)
        try:
            m = Manifest.model_validate_json(file.read_bytes())
        except ValidationError as exc:
            err = exc.errors()[0]
            key = ".".join(str(x) for x in err["loc"])
            raise InputError(f"not a shard manifest: {err['msg']}", file=file, key=key) from None
        if m.shard > m.of:
            raise InputError(f"shard {m.shard} of {m.of} does not exist", file=file, key="shard")
        expected = [c for c in m.candidates if shard_of(c, m.of) == m.shard]
        if sorted(m.names) != sorted(expected) or len(set(m.candidates)) != len(m.candidates):
            raise InputError(
                f"shard {m.shard} of {m.of} ran {', '.join(m.names) or 'nothing'}; the rule "
                f"gives it {', '.join(expected) or 'nothing'}",
                file=file,
                key="names",
                hint="a shard holds exactly the candidates the rule gives it: re-run it",
            )
        got = policy_digest(self.path / POLICY) if (self.path / POLICY).is_dir() else "none"
        if got != m.policy_digest:
            raise InputError(
                f"the policy copy {self.path / POLICY} does not match the manifest's "
                f"policy_digest ({got[:12]} != {m.policy_digest[:12]})",
                file=file,
                key="policy_digest",
                hint="the shard directory was changed after the run: re-run that shard",
            )
        return m

    def _report(self) -> ForkReport:
        file = self.path / REPORT
        try:
            report = TypeAdapter(ForkReport).validate_json(file.read_bytes())
        except OSError as exc:
            raise InputError(f"cannot read the shard report: {exc}", file=file, hint=HINT) from None
        except ValidationError as exc:
            err = exc.errors()[0]
            key = ".".join(str(x) for x in err["loc"])
            raise InputError(f"not a shard report: {err['msg']}", file=file, key=key) from None
        rows = report.candidates
        names = [candidate_name(Path(r.file)) for r in rows]
        if sorted(names) != sorted(self.manifest.names) or len(set(names)) != len(names):
            raise InputError(
                f"its rows ({', '.join(names) or 'none'}) are not the manifest's candidates "
                f"({', '.join(self.manifest.names) or 'none'})",
                file=file,
                key="candidates",
                hint="the shard directory was changed after the run: re-run that shard",
            )
        if (report.commit, report.dirty) != (self.manifest.commit, self.manifest.dirty):
            raise InputError("its commit differs from the manifest's", file=file, key="commit")
        out: list[Outcome] = []
        for row in rows:
            if row.bundle is not None:
                rel = Path(row.bundle)
                bundle = (self.path / rel).resolve()
                if rel.parts[:1] != (BUNDLES,) or not bundle.is_relative_to(self.path / BUNDLES):
                    raise InputError(
                        f"bundle path {row.bundle!r} of '{row.candidate}' is not under {BUNDLES}/",
                        file=file,
                        key="bundle",
                    )
                if bundle.name != row.candidate:
                    raise InputError(
                        f"the row of '{row.candidate}' points at the bundle of '{bundle.name}'",
                        file=file,
                        key="bundle",
                    )
                if not bundle.is_dir():
                    raise InputError(
                        f"the bundle of '{row.candidate}' is missing: {bundle}",
                        file=file,
                        key="bundle",
                        hint="copy the whole shard directory (e.g. upload it as one artifact)",
                    )
                row = replace(row, bundle=str(bundle))
            out.append(row)
        return replace(report, candidates=out)


def _value(m: Manifest, key: str) -> Any:
    return getattr(m, key)


def check_agree(shards: Sequence[Shard]) -> None:
    first = shards[0]
    for other in shards[1:]:
        for key, words in AGREE.items():
            a, b = _value(first.manifest, key), _value(other.manifest, key)
            if a != b:
                raise InputError(
                    f"shards of different runs: {words} differs: {first.path} has {a!r}, "
                    f"{other.path} has {b!r}",
                    file=other.path / MANIFEST,
                    key=key,
                    hint="merge only the shards of one run (one commit, policy and trace "
                    "version); re-run the odd shard",
                )
    seen: dict[int, Path] = {}
    for s in shards:
        if s.manifest.shard in seen:
            raise InputError(
                f"shard {s.manifest.shard} of {s.manifest.of} given twice: "
                f"{seen[s.manifest.shard]} and {s.path}",
                file=s.path / MANIFEST,
                key="shard",
                hint="pass each shard's directory once",
            )
        seen[s.manifest.shard] = s.path
    n = first.manifest.of
    missing = [str(i) for i in range(1, n + 1) if i not in seen]
    if missing:
        raise InputError(
            f"shard(s) {', '.join(missing)} of {n} missing: the merged report would lack "
            "their candidates",
            hint=HINT,
        )
    owner: dict[str, Path] = {}
    for s in shards:
        for row in s.report.candidates:
            if row.candidate in owner:
                raise InputError(
                    f"candidate '{row.candidate}' is in two shards: {owner[row.candidate]} and "
                    f"{s.path}",
                    file=s.path / REPORT,
                    key="candidates",
                    hint="two candidates of the fork share an id, or a shard was re-run "
                    "with another N: give each candidate its own id, re-run every shard",
                )
            owner[row.candidate] = s.path


def merge(paths: Sequence[Path]) -> tuple[ForkReport, list[Shard]]:
    """The merged report of the shard directories (rows in the run's candidate order)."""
    if not paths:
        raise UsageError("--merge needs at least one shard directory", hint=HINT)
    shards = [Shard(p) for p in paths]
    check_agree(shards)
    order = {name: i for i, name in enumerate(shards[0].manifest.candidates)}
    rows = [r for s in shards for r in s.report.candidates]
    rows.sort(key=lambda r: order[candidate_name(Path(r.file))])
    first = shards[0].report
    return ForkReport(
        fork=first.fork, commit=first.commit, dirty=first.dirty, candidates=rows
    ), shards


def fork_policy(args: Any, shard: Shard) -> Path | None:
    """At the fork (--fork, or the current directory when it is one): the fork's own merged
    policy, once the shards are shown to have run its commit under that policy. The findings
    page then checks every bundle against the fork's signing identity, not against the copy a
    shard directory brought along. None when not at a fork (and no --fork given)."""
    from engine.fork.config import make_config
    from engine.fork.entry import merged_policy
    from engine.fork.git import git_commit

    try:
        cfg = make_config(args)
    except UsageError:
        if args.fork is not None:
            raise
        return None
    m, where = shard.manifest, shard.path / MANIFEST
    head = git_commit(cfg.root)
    if head != m.commit:
        raise InputError(
            f"the shards verified commit {m.commit}, the fork {cfg.root} is at {head}",
            file=where,
            key="commit",
            hint="merge in a checkout of the commit the shards ran (in CI: the same ref)",
        )
    policy = merged_policy(cfg)
    got = policy_digest(policy)
    if got != m.policy_digest:
        raise InputError(
            f"the shards ran under another policy than the fork {cfg.root} has now "
            f"(policy digest {m.policy_digest[:12]}, the fork's {got[:12]})",
            file=where,
            key="policy_digest",
            hint="merge with the fork's committed trace/policy, or re-run every shard",
        )
    return policy


# options of a verify run that mean nothing to a merge (it reads finished shards only)
RUN_ONLY = ("candidates_", "shard", "shard_dir", "source", "allow_dirty", "identity_token")


def cmd_merge(args: Any) -> int:
    """`trace fork --merge DIR…`: the merged table (or --json report) and --report page."""
    import sys

    from engine.fork.outcome_table import show_table

    given = [f"--{k.rstrip('_').replace('_', '-')}" for k in RUN_ONLY if getattr(args, k, None)]
    if given:
        raise UsageError(
            f"--merge does not go with {', '.join(given)}",
            hint="run each shard with --shard I/N first; --merge only joins their directories",
        )
    report, shards = merge(args.merge)
    policy = fork_policy(args, shards[0])
    if policy is None:
        policy = shards[0].path / POLICY
        print(
            "trace: note: not at a fork: bundles are checked against the shards' own policy "
            "copy (pass --fork DIR to check them against the fork's)",
            file=sys.stderr,
        )
    if args.report is not None:
        from engine.report.findings import fork_findings

        page = fork_findings(args.report.resolve(), report.candidates, policy, args.key)
        print(f"findings: {page}", file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(report.to_json(), end="")
    else:
        n = shards[0].manifest.of
        show_table(
            report,
            f"trace fork --merge: {n} shard(s) of {report.fork} "
            f"({(report.commit or 'no commit')[:12]})",
            f"<shard dir>/{BUNDLES}/<candidate id>",
            policy,
        )
    return report.exit_code
