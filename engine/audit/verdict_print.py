"""Printing a bundle verdict: a table for people, JSON for machines."""

from __future__ import annotations

import json
import sys

from engine.audit.checks import BundleVerdict
from engine.audit.reasons import REASONS


def print_json(verdict: BundleVerdict) -> None:
    doc = verdict.model_dump(mode="json", by_alias=True)
    doc["reason_details"] = {
        code: {"message": REASONS[code][0], "solution": REASONS[code][1]}
        for code in verdict.reasons
        if code in REASONS
    }
    sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")


def print_table(verdict: BundleVerdict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    who = ", ".join(f"{k}={v}" for k, v in verdict.signer.items() if v) or "unsigned"
    table = Table(title=f"{verdict.bundle} ({who})")
    table.add_column("check")
    table.add_column("result")
    table.add_column("reason")
    table.add_column("detail", overflow="fold")
    for c in verdict.checks:
        table.add_row(
            c.name,
            "[green]ok[/green]" if c.ok else "[red]FAIL[/red]",
            c.reason or "",
            c.detail,
        )
    console.print(table)
    if verdict.passed:
        console.print("[green]bundle verified[/green]")
    else:
        for code in verdict.reasons:
            msg, todo = REASONS.get(code, ("", ""))
            console.print(f"[red]{code}[/red]: {msg}\n  what to do: {todo}")
