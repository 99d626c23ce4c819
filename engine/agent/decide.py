"""The signing policy's decision on a drafted candidate, through `trace decide` itself."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.agent.draft import DraftOptions


def signing_decision(candidate: Path, opts: DraftOptions) -> tuple[str, list[str]]:
    """('allow' | 'deny', its reason codes), from the cached verify of this very candidate."""
    from engine.cli import main

    out = opts.state / "decisions" / f"draft-{candidate.parent.name}.json"
    argv = ["decide", str(candidate), "--fork", str(opts.fork), "--state-dir", str(opts.state)]
    argv += ["--out", str(out)]
    if opts.signing_policy is not None:
        argv += ["--signing", str(opts.signing_policy)]
    out.unlink(missing_ok=True)
    with contextlib.redirect_stdout(io.StringIO()):
        rc = main(argv)
    if not out.is_file():
        from engine.errors import InputError

        raise InputError(
            f"`trace decide` could not decide the drafted candidate (exit {rc})",
            file=candidate,
            hint="run `trace decide` on it to see why",
        )
    doc = json.loads(out.read_text(encoding="utf-8"))
    return str(doc["decision"]), [str(r["code"]) for r in doc.get("reasons", [])]
