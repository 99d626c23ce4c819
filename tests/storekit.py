"""Store helpers shared by the cache tests and bench/cache_bench.py: a state directory's latest
results, and deleting them from the store as a second machine would lack them."""

from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
from pathlib import Path

from engine.cache import gcroot_folder

_ALIVE = re.compile(r"Cannot delete path '([^']+)' since it is still alive")


def outputs(state: Path) -> dict[str, tuple[str, str]]:
    """`<graph id>/<step id>` -> (drv, out) of a state directory's latest results."""
    db = sqlite3.connect(state / "state.db")
    try:
        rows = db.execute(
            "SELECT l.graph, r.step_id, r.drv, r.out FROM last_keys l "
            "JOIN results r ON r.key = l.key"
        ).fetchall()
    finally:
        db.close()
    return {f"{g.rsplit('#', 1)[-1]}/{sid}": (drv, out) for g, sid, drv, out in rows}


def checked_on(state: Path) -> list[str]:
    """Where each of a state directory's results was --checked ('claim:<path>': a claim taken)."""
    db = sqlite3.connect(state / "state.db")
    try:
        rows = db.execute("SELECT checked_on FROM results WHERE checked_on IS NOT NULL").fetchall()
    finally:
        db.close()
    return [str(w) for (w,) in rows]


def delete_outputs(state: Path) -> set[str]:
    """Drop the state dir's GC roots and delete its outputs from the store; return the outputs
    that are gone (others are held by another state directory's roots: left alone)."""
    shutil.rmtree(gcroot_folder(state), ignore_errors=True)
    outs = sorted({out for _, out in outputs(state).values()})
    todo = list(outs)
    while todo:  # `nix-store --delete` stops at the first path that is still alive: skip it
        proc = subprocess.run(
            ["nix-store", "--delete", *todo], capture_output=True, text=True, timeout=600
        )
        alive = set(_ALIVE.findall(proc.stderr))
        if proc.returncode == 0 or not alive:
            break
        todo = [o for o in todo if o not in alive and Path(o).exists()]
    return {o for o in outs if not Path(o).exists()}
