"""The candidate skeleton `trace record` writes: candidate.toml (its `[expect]` stating how the
recorded call failed), repro.sh, the call's data files, an advisory (the given OSV file, or a
stub naming the failure), the fix patches when given, and record.json (trace.record/v1: what
was captured, redacted and minimised). Each file is written atomically; an error while writing
removes what this run wrote."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.record.capture import Redactions
from engine.record.failure import Failure
from engine.record.interaction import Interaction, repro_script

RECORD_SCHEMA = "trace.record/v1"
FIX = "fix.patch"


@dataclass(frozen=True)
class Skeleton:
    cid: str
    package: str
    failure: Failure
    recorded: Interaction  # as captured (redacted)
    written: Interaction  # as written (minimised, when asked)
    redactions: Redactions
    advisory: bytes | None  # the OSV file given, else a stub is written
    patches: tuple[tuple[str, bytes], ...]  # (name, content) of fixes given
    minimisation: dict[str, Any] | None
    run: dict[str, Any]  # the recorded call's run, as the harness saw it (failure.run_summary)


def _toml(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def candidate_toml(s: Skeleton) -> str:
    expect = s.failure.expect()
    lines = [
        f"# Recorded by `trace record` (docs/record.md): {s.failure.describe()}.",
        "# record.json says what was captured and redacted"
        + (", and how it was minimised." if s.minimisation else "."),
    ]
    if not s.patches:
        lines.append(f"# Next: write the fix as {FIX}, then `trace verify` this file.")
    lines += [
        f"id = {_toml(s.cid)}",
        f"package = {_toml(s.package)}",
        f"patches = {_toml([n for n, _ in s.patches] or [FIX])}",
        'origin = "human"',
        f"scope = {_toml([f'pkgs/{s.package}/**'])}",
        "",
        "[advisory]",
        'osv = "advisory.json"',
        "",
        "[reproducer]",
        'script = "repro.sh"',
        f"data = {_toml(list(s.written.data()))}",
        "runs = 3",
        "",
        "[expect]",
        *(f"{k} = {_toml(v)}" for k, v in expect.items()),
    ]
    return "\n".join(lines) + "\n"


def stub_advisory(s: Skeleton) -> bytes:
    doc = {
        "schema_version": "1.6.0",
        "id": f"TRACE-RECORD-{s.cid}",
        "summary": f"{s.package}: {s.failure.describe()}",
        "details": "A failing call recorded by `trace record`; no advisory was given "
        "(--advisory OSV): replace this file with the real advisory.",
        "affected": [{"package": {"ecosystem": "Nix", "name": s.package}}],
    }
    return (json.dumps(doc, indent=2) + "\n").encode()


def _files(call: Interaction) -> dict[str, Any]:
    return {
        n: {"bytes": len(c), "sha256": hashlib.sha256(c).hexdigest()}
        for n, c in call.data().items()
    }


def _call(call: Interaction) -> dict[str, Any]:
    return {
        "program": f"bin/{call.program}",
        "args": [{"file": a.text} if a.file else a.text for a in call.args],
        "files": _files(call),
        "env": [name for name, _ in call.env],
        "bytes": call.size(),
    }


def record_json(s: Skeleton) -> bytes:
    f = s.failure
    doc = {
        "schema": RECORD_SCHEMA,
        "package": s.package,
        "recorded": _call(s.recorded),
        "written": _call(s.written),
        "failure": {
            "target": f.target,
            "exit_code": f.exit_code,
            "signal": f.signal,
            "sanitizer": f.sanitizer,
            "function": f.function,
        },
        "expect": f.expect(),
        "run": s.run,
        "redactions": s.redactions.counts,
        "minimisation": s.minimisation,
    }
    return (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()


def write_skeleton(folder: Path, s: Skeleton) -> Path:
    """Every file of the skeleton under `folder`; returns candidate.toml."""
    from engine.agent.write import Folder

    out = Folder(folder)
    try:
        for name, content in s.written.data().items():
            out.write(name, content)
        out.write(
            "repro.sh",
            repro_script(s.written, f"Recorded by `trace record`: {s.failure.describe()}."),
        )
        out.write("advisory.json", s.advisory if s.advisory is not None else stub_advisory(s))
        for name, content in s.patches:
            out.write(name, content)
        out.write("record.json", record_json(s))
        return out.write("candidate.toml", candidate_toml(s))
    except BaseException:
        out.rollback()
        raise
