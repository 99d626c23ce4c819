"""`--rebuild STEP…` / `--rebuild-all`: which steps to rebuild, and rebuilding them with Nix's
`--check` against the outputs in the store (reported on each step, never replacing an output).
Called by engine/run.py after a run.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Literal, Protocol

TYPE_CHECKING = False
if TYPE_CHECKING:
    from engine.graphtypes import Graph
    from engine.nix import Nix
    from engine.nixreport import RealiseReport


class Rebuilt(Protocol):
    """What a rebuild reads and sets of a step's result (engine.run.StepResult)."""

    @property
    def id(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def drv(self) -> str | None: ...
    @property
    def out(self) -> str | None: ...

    deterministic: bool | None
    checked_on: str | None
    rebuilt: Literal["same", "differs", "failed"] | None


def rebuild_steps(graph: Graph, names: Sequence[str], every: bool) -> list[str]:
    """The steps `--rebuild NAME…` / `--rebuild-all` name, in graph order: a repeated step's
    base id names all its repeats. An unknown name is a usage error (exit 2, before any work)."""
    from engine.errors import UsageError

    if every:
        return list(graph.order)
    chosen: set[str] = set()
    for name in names:
        found = [s for s in graph.order if s == name or graph.steps[s].base_id == name]
        if not found:
            known = ", ".join(sorted({graph.steps[s].base_id for s in graph.order}))
            raise UsageError(
                f"--rebuild {name}: the graph has no step of that name",
                hint=f"its steps: {known}",
            )
        chosen.update(found)
    return [s for s in graph.order if s in chosen]


def recheck(
    graph: Graph,
    targets: Collection[str],
    results: Mapping[str, Rebuilt],
    nix: Nix,
    report: Callable[[str, str], None],
) -> RealiseReport | None:
    """Rebuild the `targets` that have an output with `nix-store --realise --check`: Nix builds
    each again and compares the result with the output in the store, which it never replaces. A
    rebuild that differs (or fails) is reported on the step (`rebuilt`) and makes it count as
    not deterministic; one that matches confirms it. Returns Nix's report (None: none ran)."""
    todo = [
        sid
        for sid in graph.order
        if sid in targets and results[sid].drv and results[sid].status not in ("failed", "skipped")
    ]
    if not todo:
        return None
    rep = nix.realise([str(results[s].drv) for s in todo], check=True)
    if rep.nix_failed:
        return rep
    unexplained = rep.returncode != 0 and not rep.failed
    for sid in todo:
        r, drv = results[sid], str(results[sid].drv)
        if drv in rep.differs:
            r.rebuilt = "differs"
        elif drv in rep.failed or unexplained:
            r.rebuilt = "failed"
        else:
            r.rebuilt = "same"
        r.deterministic = r.rebuilt == "same"
        r.checked_on = rep.built_on.get(drv, r.checked_on)
        report(sid, "rebuilt" if r.rebuilt == "same" else f"rebuild {r.rebuilt}")
    return rep


def findings(results: Iterable[Rebuilt]) -> list[str]:
    """What `--rebuild` found (engine.run.RunResult.rebuild_findings), one line per rebuilt
    step that did not match the store."""
    lines = []
    for r in results:
        if r.rebuilt == "differs":
            lines.append(
                f"REBUILT DIFFERENTLY {r.id}: its rebuild differs from {r.out}, which the "
                "store keeps (Nix never replaces a valid output): the step is not "
                "deterministic, or what it saw changed without changing its derivation"
            )
        elif r.rebuilt == "failed":
            lines.append(
                f"REBUILD FAILED {r.id}: rebuilding it failed now, though {r.out} was built "
                "before: what it needs changed outside its derivation (a host tool?)"
            )
    return lines
