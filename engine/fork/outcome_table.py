"""The fork run's report: one row per candidate, the clean-tree check, the summary table."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from engine.errors import InputError
from engine.fork.config import ForkConfig
from engine.fork.git import dirty_paths
from engine.paths import cli


@dataclass
class Outcome:
    """One row of the summary table (and of the JSON report)."""

    candidate: str
    file: str
    package: str = ""
    verified: bool | None = None
    verify_reasons: list[str] = field(default_factory=list)
    verify_details: list[str] = field(default_factory=list)  # "<reason>: <detail>" per claim
    route: str = ""
    decision: Literal["allow", "deny", "error"] = "error"
    decision_reasons: list[str] = field(default_factory=list)
    bundle: str | None = None
    signed: Literal["key", "keyless", "no"] = "no"
    note: str = ""
    built: int = 0  # steps built now
    reused: int = 0  # steps evaluated, their output already in the store
    substituted: int = 0  # steps fetched from a signed binary cache (engine/machine.py)
    cached: int = 0  # steps answered from the index (no evaluation)
    steps: list[str] = field(default_factory=list)  # step ids of the candidate's graph
    accuracy: str = ""  # a drafted candidate's comparison with the upstream fix (accuracy.json)
    # `--rebuild` steps whose rebuild differed from (or failed to remake) the store's output
    rebuilt_differently: list[str] = field(default_factory=list)


@dataclass
class ForkReport:
    """`trace fork --json` (schema trace.fork/v1), also written to STATE/fork/report.json."""

    fork: str
    commit: str | None
    dirty: bool
    candidates: list[Outcome]
    schema: Literal["trace.fork/v1"] = "trace.fork/v1"

    @property
    def exit_code(self) -> int:
        if any(o.decision == "error" for o in self.candidates):
            return 2
        if any(o.rebuilt_differently for o in self.candidates):
            return 1
        return 0 if all(o.decision == "allow" for o in self.candidates) else 1

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"


def check_clean(cfg: ForkConfig, allow_dirty: bool) -> bool:
    """Refuse a dirty work tree; trace's own folders (the state directory and bundles wherever
    they are, the generated files, FORK/.trace) are not the fork's changes."""
    own = [cfg.state, cfg.bundles, cfg.generated, cfg.root / ".trace"]
    changed = dirty_paths(cfg.root, own)
    if changed and not allow_dirty:
        shown = "\n    ".join(changed[:10]) + ("\n    …" if len(changed) > 10 else "")
        raise InputError(
            f"the work tree has uncommitted changes:\n    {shown}",
            file=cfg.root,
            hint="commit or stash them first (every bundle's replay record pins the commit), "
            "or pass --allow-dirty to verify them anyway (the record then says dirty)",
        )
    return bool(changed)


def print_table(report: ForkReport, cfg: ForkConfig) -> None:
    show_table(
        report,
        f"trace fork {cfg.root} ({(report.commit or 'no commit')[:12]})",
        f"{cfg.bundles}/<candidate id>",
        cfg.state / "policy",
    )


def show_table(report: ForkReport, title: str, bundles: str, policy: Path) -> None:
    """The summary table, then where the bundles are and how to check one."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    table.add_column("candidate", no_wrap=True)
    for col in ("verify", "route", "signing", "vs upstream fix", "bundle", "steps"):
        table.add_column(col, overflow="fold")
    for o in report.candidates:
        if o.decision == "error":
            table.add_row(o.candidate, "[bold red]error[/]", "", "", "", o.note, "")
            continue
        verify = (
            "[green]holds[/]"
            if o.verified
            else "[red]fails[/]\n" + "\n".join(o.verify_details or o.verify_reasons)
        )
        signing = "[green]allow[/]" if o.decision == "allow" else "[red]deny[/]"
        signing += "".join(f"\n{r}" for r in o.decision_reasons)
        bundle = f"signed ({o.signed})" if o.signed != "no" else "unsigned"
        if o.note:
            bundle += f"\n{o.note}"
        steps = f"{o.built} built\n{o.reused} reused\n{o.cached} cached"
        table.add_row(o.candidate, verify, o.route, signing, o.accuracy or "—", bundle, steps)
    from engine.tables import keep_words_whole

    console = Console(width=max(140, Console().width, keep_words_whole(table)))
    console.print(table)
    n_ok = sum(o.decision == "allow" for o in report.candidates)
    console.print(f"{n_ok} of {len(report.candidates)} candidates allowed")
    console.print(f"bundles: {bundles}")
    console.print(
        f"check one: {cli('verify-bundle')} {bundles} "
        f"--identity {policy}/signing-identity.json (key-signed: add --key KEY.pub)"
    )
