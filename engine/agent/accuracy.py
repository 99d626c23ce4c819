"""The accuracy comparison of a drafted candidate: when the resolver found the upstream fix,
verify it as a second candidate (`ID-upstream`, origin upstream) against the same reproducer and
compare it with the model's patch (engine/roles/compare.py). Written as `accuracy.json` in the
drafted candidate's folder; the bundle carries it as `agent/accuracy.json`."""

from __future__ import annotations

import json
import shutil
from typing import TYPE_CHECKING, Any

from engine.agent.write import Folder, candidate_toml
from engine.roles.compare import Comparison, Verdicts, compare

if TYPE_CHECKING:
    from engine.agent.options import DraftOptions


def upstream_candidate(model_cand: Any, patch: str, folder: Folder) -> Any:
    """The upstream fix as a candidate beside the model's: same advisory, reproducer, expect."""
    from engine.candidate import load_candidate

    s = model_cand.spec
    sub = Folder(folder.path / "upstream")
    sub.write("upstream.patch", patch)
    shutil.copy(model_cand.file(s.advisory.osv), sub.path / "advisory.json")
    shutil.copy(model_cand.file(s.reproducer.script), sub.path / "repro.sh")
    data = []
    for rel in s.reproducer.data:
        src = model_cand.file(rel)
        shutil.copy(src, sub.path / src.name)
        data.append(src.name)
    text = candidate_toml(
        {
            "id": f"{s.id}-upstream",
            "package": s.package,
            "patches": ["upstream.patch"],
            "origin": "upstream",
            "scope": list(s.scope),
        },
        {
            "advisory": {"osv": "advisory.json", "upstream_fix": s.advisory.upstream_fix},
            "reproducer": {"script": "repro.sh", "data": data, "runs": s.reproducer.runs},
            "expect": s.expect.model_dump(exclude_none=True),
        },
    )
    path = sub.write("candidate.toml", text)
    folder.written += sub.written
    return load_candidate(path)


def accuracy(
    model_cand: Any,
    model_result: Any,
    upstream_patch: str,
    folder: Folder,
    opts: DraftOptions,
) -> Comparison:
    """`model_result`: the model's VerifyResult (None: not verified), whose differential gate
    compared it with this very upstream fix, input by input, when the draft named it."""
    from engine.pipeline.verify_fresh import run_verify
    from engine.roles.patcher import post_fix_tree

    up = upstream_candidate(model_cand, upstream_patch, folder)
    result = run_verify(
        up.path,
        fork=opts.fork,
        state_dir=opts.state,
        jobs=opts.jobs,
        signing_policy=opts.signing_policy,
    )
    model_patch = "".join(model_cand.patch_texts())
    trees = [post_fix_tree(p, opts.source) for p in (model_patch, upstream_patch)]
    gate = model_result.gates.get("differential") if model_result is not None else None
    verdicts = Verdicts(
        model_ok=_holds(model_result) if model_result is not None else None,
        upstream_ok=_holds(result),
        model_reasons=_reasons(model_result) if model_result is not None else [],
        upstream_reasons=_reasons(result),
        same_tree=None if None in trees else trees[0] == trees[1],
        behaviour=_behaviour(gate),
    )
    cmp = compare(model_patch, upstream_patch, verdicts)
    doc = cmp.model_dump(mode="json", by_alias=True)
    folder.write("accuracy.json", json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return cmp


def _reasons(result: Any) -> list[str]:
    """A verify result's claim reasons, then every failing gate's codes."""
    out = [str(r) for r in result.reasons]
    out += [r for _, g in sorted(result.gates.items()) if not g.passed for r in g.reasons]
    return list(dict.fromkeys(out))


def _holds(result: Any) -> bool:
    """Every claim holds and every gate passed: a patch the gates deny does not "pass"."""
    return bool(result.passed) and all(g.passed for g in result.gates.values())


def _behaviour(gate: Any) -> str | None:
    """The differential gate's one-line finding, when it measured (an upstream fix named)."""
    if gate is None or not gate.measurable:
        return None
    return str(gate.details.get("summary") or "") or None
