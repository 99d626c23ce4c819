"""The detector gate: the post-fix build is instrumented exactly like the pre-fix build.

A patch can make the reproducer pass by blinding the instrument that shows the bug instead of
fixing it: drop `-fsanitize=address` from the Makefile, add `--param asan-instrument-writes=0`,
put `__attribute__((no_sanitize_address))` on the faulting function, set ASAN_OPTIONS from code.
Three independent measurements, each enough to deny:

1. the flags (ccflags.py): every compiler call of both builds, recorded from trace's side
   (templates/verify/cc-record), compared per translation unit;
2. the patch (blinding.py): a table of constructs that blind a detector;
3. the binary (instrumented.py): the functions of the pre-fix failing stack still call the
   sanitizer's checks in the post-fix build.

Any finding is `detector-weakened` (not waivable: a fix never needs to switch the detector off),
with what changed in the record's details (`flags`, `patch`, `functions`). The patch scan always
measures, so the record is always measurable; the parts that could not measure (no compile
log, no stack, no binutils, a Python package) say so in `details.not_measured`.

Stdlib only: runs in the sandbox (`python3 -S -B -m trace_sandbox.gates.main detector OUT`).
"""

from __future__ import annotations

import json
import os

from .applied import applied_policy
from .blinding import scan
from .diff import parse_series

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

LOG = os.path.join("nix-support", "trace-cc.log")
CODE = "detector-weakened"
MAX_FUNCTIONS = 16


def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="surrogateescape") as fh:
        return fh.read()


def compile_log(build: str) -> str | None:
    path = os.path.join(build, LOG)
    return _read(path) if os.path.isfile(path) else None


def stack_functions(pre_runs: list[str]) -> list[str]:
    """The package's own functions on the pre-fix failing stacks, innermost first, once each."""
    from .faultsite import base_function, own_frames, stacks

    records = []
    for p in pre_runs:
        with open(os.path.join(p, "outcome.json"), encoding="utf-8") as fh:
            records.append(json.load(fh))
    records.sort(key=lambda r: int(r.get("run", 0)))
    names: list[str] = []
    for stack in stacks(records):
        for frame in own_frames(stack, MAX_FUNCTIONS):
            fn = base_function(str(frame.get("function") or ""))
            if fn and not str(frame.get("file") or "").endswith(".py") and fn not in names:
                names.append(fn)
    return names


def flag_part(pre: str, post: str, details: dict[str, Any], missing: list[str]) -> list[Any]:
    from .ccflags import compare, summary

    pre_log, post_log = compile_log(pre), compile_log(post)
    if pre_log is None or post_log is None:
        missing.append("flags: a build has no compile log (built without the recorder)")
        return []
    if not pre_log.strip():
        missing.append("flags: the pre-fix build compiled nothing through the stdenv's compiler")
        return []
    details["units"] = summary(pre_log)
    diffs = compare(pre_log, post_log)
    details["flags"] = diffs
    return diffs


def binary_part(cfg: dict[str, Any], details: dict[str, Any], missing: list[str]) -> list[Any]:
    from .instrumented import compare, find_tools

    functions = stack_functions(list(cfg.get("pre") or []))
    if not functions:
        missing.append("functions: the pre-fix failure left no native stack of the package's own")
        return []
    tools = find_tools(cfg.get("binutils"))
    if tools is None:
        missing.append("functions: no nm/objdump (binutils) in the sandbox")
        return []
    lost, table = compare(tools, cfg["pre_build"], cfg["post_build"], functions)
    details["function_checks"] = table
    details["functions"] = lost
    return lost


def evaluate(cfg: dict[str, Any]) -> dict[str, Any]:
    """cfg: patches, pre_build and post_build (the two builds' outputs), pre (the pre-fix run
    steps' outputs: the failing stack), binutils (a bin directory, optional), policy."""
    details: dict[str, Any] = {"policy": applied_policy(cfg)}
    missing: list[str] = []
    findings = [f.as_dict() for f in scan(parse_series([_read(p) for p in cfg["patches"]]).files)]
    details["patch"] = findings
    flags = flag_part(cfg["pre_build"], cfg["post_build"], details, missing)
    lost = binary_part(cfg, details, missing)
    details["not_measured"] = missing
    weakened = bool(findings or flags or lost)
    details["summary"] = _summary(findings, flags, lost)
    return {
        "schema": "trace.gate/v1",
        "gate": "detector",
        "passed": not weakened,
        "measurable": True,
        "score": None,
        "reasons": [CODE] if weakened else [],
        "details": details,
    }


def _summary(findings: list[Any], flags: list[Any], lost: list[Any]) -> str:
    parts = [f"{f['file']}:{f['line']}: {f['meaning']}" for f in findings]
    parts += [f"{d['unit']}: {', '.join(d['changes'])}" for d in flags]
    parts += [f"{r['function']}: no sanitizer checks post-fix (had {r['pre']})" for r in lost]
    if not parts:
        return "the post-fix build is instrumented like the pre-fix build"
    return "the patch weakens the detector: " + "; ".join(parts)
