"""The trust boundary: a verdict is judged from the Nix store, never from the state directory.

The state directory (`.trace/state.db`) is a cache of pointers: key -> (drv, out, a copy of the
outcome, the last `--check` result). Whoever can write it can write any row, so no row is ever
evidence. `from_store` takes a run whose clean steps were answered from the index and replaces
everything the verdict reads with what the store says, after checking, for those steps:

1. *the derivation is the one the graph instantiates now*: the steps are rendered and evaluated
   again with one `nix-instantiate`; the row's drv must be that derivation and its out the
   derivation's own output path (read from the .drv; input-addressed, so no other derivation
   has it);
2. *the output is a valid store path and unmodified*: every output an outcome is read from is
   rehashed against the NAR hash Nix registered when it built it (one `nix-store --verify-path`,
   which refuses an unregistered path too; outcome outputs are small);
3. *the outcome is the store's*: `$out/outcome.json` is read and compared with the row's copy;
4. with `recheck`, *determinism is measured again*: the `check` steps answered from the index
   are rebuilt once with `nix-store --realise --check`.

Every path that decides or signs (`recheck=True`: decide, bundle, verify --bundle, fork) does all
four. A plain `trace verify` (never decided, never signed) keeps its no-op cheap: it skips the
evaluation (1: the row's out must still be its own drv's output) and shows the index's
determinism flag, so a row pointed at another valid output can mislead only its printed table.

A `trace fork` no-op does not pay this on every run: after a full run of a candidate it records
the result in an authenticated memo (HMAC under a key outside the state directory; bound to
every input the verdict depends on) and reuses it while nothing changed (engine/fork/memo.py,
docs/evidence.md); a memo entry that is not authentic or not current sends the candidate here.

Any difference is refused with a reason naming the step (`StateMismatch`, exit 2): the state
directory was modified or is stale; deleting it loses nothing but time. Steps built or reused
by this very run were instantiated now and read from the store already; they are not checked
again. Cost on a clean run: one nix process (`--verify-path`); with `recheck`, one evaluation of
the steps and the check builds on top.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from engine.errors import InputError, NixError
from engine.paths import cli

if TYPE_CHECKING:
    from engine.cache import Index
    from engine.graphtypes import Graph
    from engine.nix import Nix
    from engine.plan import Plan
    from engine.run import RunResult, StepResult

SHOWN = 4


class StateMismatch(InputError):
    """A state-directory row disagrees with the Nix store: the row is never believed."""


def instantiate_steps(graph: Graph, planned: Plan, step_ids: list[str], expr: Path) -> list[str]:
    """The .drv paths the graph instantiates now for `step_ids` (one `nix-instantiate`)."""
    from engine.evaluation import render_expression
    from engine.nix import Nix

    text, _ = render_expression(graph, planned, step_ids)
    expr.parent.mkdir(parents=True, exist_ok=True)
    expr.write_text(text, encoding="utf-8")
    rc, drvs, err = Nix(graph.nix).instantiate(expr)
    if rc != 0 or len(drvs) != len(step_ids):
        tail = "\n".join(err.strip().splitlines()[-5:])
        raise NixError(f"evaluating the steps again failed: {tail}", file=expr)
    return drvs


def _refuse(state: Path, problems: list[str]) -> StateMismatch:
    shown = "; ".join(problems[:SHOWN]) + (" …" if len(problems) > SHOWN else "")
    return StateMismatch(
        f"the state directory does not match the Nix store ({shown}): its records are never "
        "evidence, and these were modified or are stale",
        file=state / "state.db",
        hint=f"remove {state} (a cache: only build time is lost) and run `{cli('verify')}` again; "
        "if you did not change it, someone else can write it: find out who",
    )


def _derivations(
    graph: Graph, run: RunResult, index: Index, cached: list[str], recheck: bool
) -> dict[str, str]:
    """Each index-answered step's derivation: instantiated again (`recheck`), else the row's."""
    from engine.hashing import digest_bytes
    from engine.plan import plan

    if not recheck:  # a plain `trace verify`: the rows' own derivations (see the module docstring)
        return {sid: str(run.steps[sid].drv) for sid in cached}
    planned, _ = plan(graph, index)
    expr = index.state_dir / "build" / f"trusted-{digest_bytes(run.graph.encode())[:16]}.nix"
    return dict(zip(cached, instantiate_steps(graph, planned, cached, expr), strict=True))


def _outputs(
    run: RunResult, index: Index, cached: list[str], drvs: dict[str, str], recheck: bool
) -> dict[str, str]:
    """Each step's output read from its derivation; refused unless the row names both."""
    from engine.nix import output_of

    problems: list[str] = []
    outs: dict[str, str] = {}
    for sid in cached:
        row = run.steps[sid]
        try:
            outs[sid] = output_of(drvs[sid])
        except (OSError, NixError):
            problems.append(f"step {sid}: recorded {row.drv}, not a readable derivation")
            continue
        if row.drv != drvs[sid] or row.out != outs[sid]:
            what = "the graph instantiates" if recheck else "whose output is"
            shown = drvs[sid] if recheck else outs[sid]
            problems.append(f"step {sid}: recorded {row.drv} -> {row.out}, {what} {shown}")
    if problems:
        raise _refuse(index.state_dir, problems)
    return outs


def _modified(nix: Nix, index: Index, outs: dict[str, str], with_outcome: list[str]) -> list[str]:
    """The problems of the outputs an outcome is read from: rehashed by one `--verify-path`,
    which also refuses an invalid path (then refused here, naming each)."""
    try:
        modified = nix.modified([outs[sid] for sid in with_outcome])
    except NixError:
        invalid = nix.invalid([outs[sid] for sid in with_outcome])
        if not invalid:
            raise
        raise _refuse(
            index.state_dir,
            [
                f"step {sid}: {outs[sid]} is not a valid store path"
                for sid in with_outcome
                if outs[sid] in invalid
            ],
        ) from None
    return [
        f"step {sid}: {outs[sid]} was modified after Nix built it"
        for sid in with_outcome
        if outs[sid] in modified
    ]


def _recheck(
    nix: Nix,
    graph: Graph,
    steps: dict[str, StepResult],
    cached: list[str],
    paths: tuple[dict[str, str], dict[str, str]],
) -> int:
    """Measure determinism again for the `check` steps the index answered (in place); the nix
    calls it made beyond the evaluation."""
    from engine.remote.attest import check

    drvs, outs = paths
    checks = [sid for sid in cached if graph.steps[sid].check]
    if not checks:
        return 0
    # as engine.run: a signed claim for an output made elsewhere, else a --check rebuild
    verdicts, report = check(
        nix,
        {s: (drvs[s], outs[s], steps[s].built_on, steps[s].built_on == "local") for s in checks},
    )
    for sid in checks:
        fresh, where = verdicts[sid]
        steps[sid] = replace(steps[sid], deterministic=fresh, checked_on=where)
    return int(report is not None)


def from_store(graph: Graph, run: RunResult, index: Index, *, recheck: bool) -> RunResult:
    """`run` with every index-answered step checked against, and re-read from, the store."""
    from engine.nix import Nix
    from engine.run import read_outcome

    cached = [sid for sid, r in run.steps.items() if r.status == "cached"]
    if not cached:
        return run
    drvs = _derivations(graph, run, index, cached, recheck)
    outs = _outputs(run, index, cached, drvs, recheck)
    nix = Nix(graph.nix)
    # the outputs an outcome is read from (engine.run.read_outcome: $out/outcome.json, or $out
    # itself when it is a file); a package build's tree is read by nothing here (the planner
    # saw that it exists)
    with_outcome = [
        sid
        for sid in cached
        if Path(outs[sid]).is_file() or (Path(outs[sid]) / "outcome.json").is_file()
    ]
    problems = _modified(nix, index, outs, with_outcome)
    steps = dict(run.steps)
    for sid in cached:
        outcome = read_outcome(outs[sid])
        if outcome != run.steps[sid].outcome:
            problems.append(f"step {sid}: the recorded outcome is not the store's")
        steps[sid] = replace(run.steps[sid], outcome=outcome)
    if problems:
        raise _refuse(index.state_dir, problems)
    calls = 2 if recheck else 1
    if recheck:
        calls += _recheck(nix, graph, steps, cached, (drvs, outs))
    return replace(run, steps=steps, nix_calls=run.nix_calls + calls)
