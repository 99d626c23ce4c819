"""The accuracy comparison of a drafted candidate: when the resolver found the upstream fix,
verify it as a second candidate (`ID-upstream`, origin upstream) against the same reproducer and
compare it with the model's patch (engine/roles/compare.py). Written as `accuracy.json` in the
drafted candidate's folder; the bundle carries it as `agent/accuracy.json`."""

from __future__ import annotations

import json
import shutil
from typing import TYPE_CHECKING, Any

from engine.agent.write import Folder, candidate_toml
from engine.roles.compare import Comparison, compare

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
    model_cand: Any, model_ok: bool | None, upstream_patch: str, folder: Folder, opts: DraftOptions
) -> Comparison:
    from engine.verify.pipeline import build_verify

    up = upstream_candidate(model_cand, upstream_patch, folder)
    _, _, result = build_verify(
        up.path,
        fork=opts.fork,
        state_dir=opts.state,
        jobs=opts.jobs,
        signing_policy=opts.signing_policy,
    )
    model_patch = "".join(model_cand.patch_texts())
    cmp = compare(model_patch, upstream_patch, model_ok, result.passed)
    doc = cmp.model_dump(mode="json", by_alias=True)
    folder.write("accuracy.json", json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return cmp
