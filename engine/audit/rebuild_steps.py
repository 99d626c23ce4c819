"""Really rebuilding recorded steps: instantiate them again, then build or `nix --check` each.

A fresh state directory is not enough for a replay: the Nix store still holds every output, so
`run_graph` would only find them ("reused") and rebuild nothing. Here, with engine.run's own
planning and rendering and engine.nix:

1. `instantiate` renders the steps into one Nix file (engine.evaluation.render_expression) and
   evaluates it with one `nix-instantiate`: the step keys and derivation paths, to be compared
   with the replay record's pins.
2. `rebuild` builds the steps whose outputs the store does not hold (one `nix-store --realise`),
   then rebuilds every other step, and every freshly built step of a `check` kind, with one
   `nix-store --realise --check`: Nix runs the builder again and compares the result with the
   stored output bit for bit. With `keep-failed`, an output that differs is kept as
   `<out>.check`, and its outcome is read from there (then removed), so the outcome *records*
   are compared even when the bytes differ. Build directories go to a temporary TMPDIR.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from engine.graphtypes import Graph

How = Literal["built", "checked", "differs", "failed"]


class Rebuilt(BaseModel):
    """One step rebuilt: how, and the outcome the rebuild produced."""

    id: str
    key: str
    drv: str
    out: str
    how: How = "failed"  # built: not in the store, built now; checked: --check, bit-identical;
    # differs: --check, other bytes (outcome read from the rebuild); failed: the build failed
    fresh: bool = False  # the store did not hold the output: built from scratch first
    outcome: Any = None
    log_tail: str = ""


def instantiate(
    graph: Graph, step_ids: list[str], work: Path
) -> tuple[dict[str, str], dict[str, str]]:
    """(step id -> key, step id -> .drv path) for `step_ids`, with one nix-instantiate."""
    from engine.cache import Index
    from engine.plan import plan
    from engine.verify.trusted import instantiate_steps

    with Index(work / "state") as index:  # empty: nothing answers from a cache
        p, _ = plan(graph, index)
    drvs = instantiate_steps(graph, p, step_ids, work / "replay.nix")
    return {s: p.steps[s].key for s in step_ids}, dict(zip(step_ids, drvs, strict=True))


def rebuild(graph: Graph, keys: dict[str, str], drvs: dict[str, str], work: Path) -> list[Rebuilt]:
    """Build what the store lacks, `--check` the rest (and fresh `check` steps); see above."""
    from plumbum import local

    from engine.nix import Nix, output_of
    from engine.run import read_outcome

    settings = replace(graph.nix, options={**graph.nix.options, "keep-failed": "true"})
    nix = Nix(settings, substitute=False)  # a replay rebuilds: nothing from a binary cache
    steps = {
        sid: Rebuilt(id=sid, key=keys[sid], drv=drv, out=output_of(drv))
        for sid, drv in drvs.items()
    }
    absent = nix.invalid([r.out for r in steps.values()])
    fresh = [sid for sid, r in steps.items() if r.out in absent]
    tmp = work / "tmp"
    tmp.mkdir(exist_ok=True)
    tails: list[str] = []
    with local.env(TMPDIR=str(tmp)):
        if fresh:
            tails += nix.realise([steps[s].drv for s in fresh]).stderr_tail
        failed = nix.invalid([steps[s].out for s in fresh])
        for sid in fresh:
            steps[sid].fresh = True
            if steps[sid].out not in failed:
                steps[sid].how = "built"
        check = [
            sid
            for sid, r in steps.items()
            if r.out not in absent or (r.how == "built" and graph.steps[sid].check)
        ]
        report = nix.realise([steps[s].drv for s in check], check=True) if check else None
    if report is not None:
        tails += report.stderr_tail
    for sid in check:
        r = steps[sid]
        kept = Path(r.out + ".check")
        if kept.exists():
            r.how, r.outcome = "differs", read_outcome(str(kept))
            shutil.rmtree(kept, ignore_errors=True)
        elif report is not None and r.drv in report.failed:
            r.how = "failed"
        else:
            r.how = "checked"
    for r in steps.values():
        if r.how == "failed":
            r.log_tail = "\n".join(line for line in tails if r.drv in line)[-2000:]
        elif r.how != "differs":
            r.outcome = read_outcome(r.out)
    return [steps[s] for s in drvs]
