"""The signing policy's decision on a drafted candidate: what `trace decide` decides, in process
(engine.signoff.decide), with the record written beside the draft's other decisions."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from engine.errors import TraceError
from engine.paths import cli

if TYPE_CHECKING:
    from engine.agent.options import DraftOptions


def decide_draft(candidate: Path, opts: DraftOptions) -> tuple[str, list[str]]:
    """('allow' | 'deny', its reason codes), from the cached verify of this very candidate."""
    from engine.errors import InputError
    from engine.signoff.decide import decide_candidate

    out = opts.state / "decisions" / f"draft-{candidate.parent.name}.json"
    out.unlink(missing_ok=True)
    try:
        decided = decide_candidate(
            candidate,
            today=dt.datetime.now(dt.UTC).date(),
            fork=opts.fork,
            state_dir=opts.state,
            out=out,
            signing=opts.signing_policy,
        )
    except TraceError as exc:
        print(f"trace: error: {exc.render()}", file=sys.stderr)
        raise InputError(
            f"`{cli('decide')}` could not decide the drafted candidate (exit {exc.exit_code})",
            file=candidate,
            hint=f"run `{cli('decide')}` on it to see why",
        ) from None
    return decided.decision.decision, [r.code for r in decided.decision.reasons]
