"""A candidate's verdict from the builds themselves: the one evidence source of `trace decide`,
`trace bundle` (and `trace verify --bundle` through it). This module holds the refusals and the
result-file cross-check; the stage is engine.pipeline.build.build_cached.

`build_cached` loads the fork's verify graph for the candidate exactly as `trace verify` does,
plans it against the cache index and refuses (InputError, exit 2) when any step is dirty: never
verified, a failed build (failures are not cached), or an input changed since (a patch swapped
after verify). Otherwise every step is answered from the index as a pointer only: the index never
holds evidence, so `engine.verify.trusted.from_store` checks each row against the derivation the
graph instantiates now and the store's valid, unmodified output, re-reads every outcome from the
store and re-measures determinism with `--check`; then the run is judged again (`judge_built`). A
verify result JSON file is never the source of a verdict: given explicitly (`--result FILE`) it
is only cross-checked against the judged result (`check_result_file`), and a difference is
refused.

The graph is loaded with the signing policy that decides (`signing_policy`): its thresholds are
the gate steps' `policy` parameters, so evidence verified under another policy leaves the gate
steps dirty, and when nothing else changed the refusal says "verified under another signing
policy" and names both (`policy_refusal`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from engine.errors import InputError
from engine.paths import cli
from engine.verify_result import MACHINE_KEYS

if TYPE_CHECKING:
    from engine.cache import IndexView
    from engine.candidate import Candidate
    from engine.plan import Plan
    from engine.verify_result import VerifyResult

SHOWN_STEPS = 6
SHOWN_PER_REASON = 12
# Fields that describe how a result was obtained (paths as given, step statuses, log tails, the
# machines), not what the builds showed: left out when a result file is compared with the judged
# result.
RUN_ONLY_KEYS = frozenset({"status", "log_tail"}) | MACHINE_KEYS
TOP_ONLY_KEYS = frozenset({"candidate_file", "graph"})
POLICY_CHANGED = "param 'policy' changed"  # engine.run's reason for a gate step's policy param
POLICY_PARAMS = {POLICY_CHANGED, "param 'reruns' changed"}  # reruns: [gates.regression]


def _dirty_lines(planned: Plan) -> list[str]:
    """Why steps are dirty, each reason with the steps it applies to (steps dirty only because
    a step they need is are counted, not listed)."""
    by_reason: dict[str, list[str]] = {}
    downstream = 0
    for sid in planned.dirty:
        own = [r for r in planned.steps[sid].reasons if not r.startswith("upstream ")]
        for reason in own:
            by_reason.setdefault(reason, []).append(sid)
        downstream += not own
    lines = [
        f"{reason}: {', '.join(sids[:SHOWN_PER_REASON])}"
        + (" …" if len(sids) > SHOWN_PER_REASON else "")
        for reason, sids in by_reason.items()
    ]
    if downstream:
        lines.append(f"and {downstream} step(s) downstream of them")
    return lines


def _own_reasons(planned: Plan) -> dict[str, list[str]]:
    """Dirty step -> its own reasons (not the ones inherited from a dirty step it needs)."""
    return {
        sid: [r for r in planned.steps[sid].reasons if not r.startswith("upstream ")]
        for sid in planned.dirty
    }


def _applied(components: dict[str, Any] | None) -> str:
    """`name version` of the policy a gate step's `policy` param names (its JSON), or '?'."""
    raw = (components or {}).get("params", {}).get("policy")
    try:
        doc = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        return "?"
    return f"{doc.get('name', '?')} {doc.get('version', '?')}"


def policy_refusal(
    planned: Plan, candidate: Candidate, index: IndexView, signing_policy: Path | None
) -> InputError | None:
    """The refusal when the only change is the gate steps' policy: the candidate was verified,
    with these inputs, under another signing policy than the one given here."""
    own = _own_reasons(planned)
    # the regression gate's test steps carry [gates.regression] reruns, a policy value too
    policy_only = [sid for sid, reasons in own.items() if reasons and set(reasons) <= POLICY_PARAMS]
    gates = sorted(sid for sid in policy_only if own[sid] == [POLICY_CHANGED])
    if not gates or any(reasons and sid not in policy_only for sid, reasons in own.items()):
        return None
    before = _applied(index.last_components(planned.graph, gates[0]))
    now = _applied(planned.steps[gates[0]].components)
    same = " (same name and version, other thresholds)" if before == now else ""
    given = f" ({signing_policy})" if signing_policy is not None else ""
    return InputError(
        f"verified under another signing policy: the gate steps ({', '.join(gates)}) last "
        f"applied {before}, this command's signing policy is {now}{given}{same}",
        file=candidate.path,
        hint=f"decide and bundle with the signing policy `{cli('verify')}` used (--signing for "
        f"{cli('decide')}, --signing-policy for {cli('bundle')}), or run `{cli('verify')} "
        f"{candidate.path} --signing-policy POLICY` with this one first",
    )


def refusal(planned: Plan, candidate: Candidate, state: Path) -> InputError:
    hint = (
        f"run `{cli('verify')} {candidate.path}` (with the same fork and state dir); a failed "
        "build is never cached, so a candidate whose build fails cannot be decided or bundled"
    )
    if all(step.prev_key is None for step in planned.steps.values()):
        return InputError(
            f"not verified, or its inputs changed since: never verified with the state dir {state}",
            file=candidate.path,
            hint=hint,
        )
    return InputError(
        "not verified, or its inputs changed since (" + "; ".join(_dirty_lines(planned)) + ")",
        file=candidate.path,
        hint=hint,
    )


def evidence_view(result: VerifyResult) -> Any:
    """What a result file must share with the judged result: everything but step statuses, log
    tails and the file paths as they were given."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            is_step = {"id", "status", "key"} <= value.keys()
            return {k: strip(v) for k, v in value.items() if not (is_step and k in RUN_ONLY_KEYS)}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    doc = result.model_dump(mode="json", by_alias=True)
    return strip({k: v for k, v in doc.items() if k not in TOP_ONLY_KEYS})


def _differences(a: Any, b: Any, where: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for k in sorted(set(a) | set(b)):
            out += _differences(a.get(k), b.get(k), f"{where}.{k}" if where else str(k))
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in _differences(x, y, f"{where}.{i}")
        ]
    return [] if a == b else [where or "(the whole result)"]


def check_result_file(path: Path, judged: VerifyResult) -> None:
    """Refuse a result file (`--result`) that differs from the result judged from the builds."""
    from engine.verify_result import VerifyResult

    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read the verify result: {exc.strerror}", file=path) from None
    try:
        given = VerifyResult.model_validate_json(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise InputError(
            f"not a verify result (trace.verify/v1): {err['msg']}",
            file=path,
            key=".".join(str(p) for p in err["loc"]) or None,
            hint=f"pass the JSON `{cli('verify')}` wrote, or leave out --result",
        ) from None
    differ = _differences(evidence_view(given), evidence_view(judged))
    if differ:
        shown = ", ".join(differ[:SHOWN_STEPS]) + (" …" if len(differ) > SHOWN_STEPS else "")
        raise InputError(
            f"the result file does not match the builds (differs at: {shown})",
            file=path,
            hint="verdicts come from the cached builds, never from a file: rerun "
            f"`{cli('verify')}` to rewrite it, or leave out --result",
        )
