"""One declared step resolved: its kind's parameters and inputs, its needs, its expansions
(id@1..id@N when repeated), as engine/graph.py's load does for every step and the resident graph
(engine/resident.py) for one edited step. No pydantic here: the step's table comes validated
(engine/spec.py StepSpec, or engine/steptable.py PlainStep).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from engine.errors import InputError
from engine.graphfile import File, suggest
from engine.graphparams import Resolver, resolve_params
from engine.graphtypes import InputRef, Kind, Step
from engine.steptable import DeclaredStep


def build_step(
    sid: str,
    ss: DeclaredStep,
    f: File,
    kinds: Mapping[str, Kind],
    expansions: Mapping[str, tuple[str, ...]],
    repeated: Collection[str],
    known: Collection[str],
    r: Resolver,
) -> dict[str, Step]:
    """One declared step, resolved: its expansions (id@1..id@N when repeated) by id. `known`:
    every declared step id (a need must be one); `f` gives its path, lines and text only (the
    resident graph of `trace watch`, engine/resident.py, re-resolves one edited step with it)."""
    kind = kinds[ss.kind]
    for need in ss.needs:
        if need not in known:
            raise InputError(
                f"step '{sid}' needs unknown step '{need}'",
                file=f.path,
                key=f"steps.{sid}.needs",
                line=f.line("steps", sid, "needs"),
                hint=suggest(need, list(known), "step"),
            )
    params, key_params = resolve_params(sid, ss, kind, ss.kind, f, r)
    inputs: dict[str, InputRef] = dict(kind.inputs)  # the kind's defaults, then the step's
    for iname, ival in ss.inputs.items():
        key = ("steps", sid, "inputs", iname)
        # validated: a path (str) or a `{ var = ... }` reference (spec.VarRef)
        var = None if isinstance(ival, str) else ival.var
        value = ival if var is None else r.var(ival, f, *key)
        with r.blame(var, f, *key):
            inputs[iname] = r.path(str(value), f, *key)
    needs_base = {n: expansions[n] for n in ss.needs}
    needs = tuple(x for n in ss.needs for x in expansions[n])
    line = f.header_line("steps", sid)
    steps: dict[str, Step] = {}
    for idx, xid in enumerate(expansions[sid], 1):
        steps[xid] = Step(
            id=xid,
            base_id=sid,
            kind=ss.kind,
            needs=needs,
            needs_base=needs_base,
            inputs=inputs,
            params=params,
            path_params=key_params,
            repeat_index=idx if sid in repeated else None,
            check=kind.check if ss.check is None else ss.check,
            source=f.path,
            line=line,
        )
    return steps
