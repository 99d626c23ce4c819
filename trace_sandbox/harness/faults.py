"""Where a target failed: the frames of its own sanitizer report or Python traceback.

Stdlib only. Frames are listed innermost first, as {function, file, line, source}: `source` is
`sanitizer` (the first stack of an AddressSanitizer/UBSan/... report: build the program with
`-g` so frames carry file:line) or `python` (the last traceback on the target's stderr, reversed).
A lifetime bug's report (heap-use-after-free, double-free, ...) has two more stacks, kept apart
(`lifetime_frames`): where the memory was freed ("freed by thread T0 here:") and where it was
allocated ("previously allocated by thread T0 here:"); the fix of a double free is often at the
first free, not at the second (the access stack).

The report's kind is read from its `SUMMARY: <Tool>: <kind> <file>:<line> in <function>` line
(`double-free`, `heap-use-after-free`, `SEGV`, `stack-buffer-overflow`, ...), not from the
`ERROR:` line, which says "attempting double-free" or "SEGV on unknown address"
(`sanitizer_report`).
Files are as the report names them (normalised: the package's store path is `<target>`); a frame
without a source location (a shared library, the sanitizer runtime) has `file` None. A signal
without a sanitizer report leaves no frames (no debugger runs in the sandbox).
"""

from __future__ import annotations

import re

TYPE_CHECKING = False  # typing only for the type checker (isolation.py)
if TYPE_CHECKING:
    from typing import Any

MAX_FRAMES = 32
SAN_FRAME = re.compile(r"^\s*#(\d+) 0x\w+ in (\S+)(?: (.*))?$")
LOCATION = re.compile(r"^(.*?):(\d+)(?::\d+)?$")
PY_FRAME = re.compile(r'^  File "([^"]+)", line (\d+), in (\S+)')


ERROR_RE = re.compile(r"ERROR: (\w+Sanitizer): (?:attempting )?([A-Za-z][\w-]*)")
SUMMARY_RE = re.compile(r"^SUMMARY: (\w+Sanitizer): ([A-Za-z][\w-]*)", re.MULTILINE)
LIFETIME_HEADS = {
    "freed": re.compile(r"^freed by thread \S+ here:", re.MULTILINE),
    "allocated": re.compile(r"^previously allocated by thread \S+ here:", re.MULTILINE),
}


def sanitizer_report(stderr: str) -> dict[str, str] | None:
    """{tool, kind} of the first sanitizer report on the target's stderr: the tool of its
    ERROR line, the kind of its SUMMARY line (the ERROR line's own word when the report has no
    SUMMARY, "attempting" dropped). A leak report's SUMMARY counts bytes: kind `memory-leak`."""
    head = ERROR_RE.search(stderr)
    if head is None:
        return None
    tool, kind = head.group(1), head.group(2)
    summary = SUMMARY_RE.search(stderr, head.end())
    if tool == "LeakSanitizer":
        kind = "memory-leak"
    elif summary is not None:
        kind = summary.group(2)
    return {"tool": tool, "kind": kind}


def lifetime_frames(stderr: str) -> dict[str, list[dict[str, Any]]]:
    """A lifetime bug's other stacks: {"freed": [...], "allocated": [...]}, those it has."""
    out: dict[str, list[dict[str, Any]]] = {}
    for name, head in LIFETIME_HEADS.items():
        m = head.search(stderr)
        if m is not None:
            found = stack_after(stderr, m.start())
            if found:
                out[name] = found
    return out


def sanitizer_frames(stderr: str) -> list[dict[str, Any]]:
    """The first stack trace after a sanitizer's ERROR line."""
    start = stderr.find("ERROR: ")
    if start < 0 or "Sanitizer" not in stderr[start : start + 80]:
        start = stderr.find("runtime error:")  # UBSan without an ERROR header
        if start < 0:
            return []
    return stack_after(stderr, start)


def stack_after(stderr: str, start: int) -> list[dict[str, Any]]:
    """The first stack trace after the line at `start`."""
    frames: list[dict[str, Any]] = []
    for line in stderr[start:].splitlines()[1:]:
        m = SAN_FRAME.match(line)
        if m is None:
            if frames:
                break  # the first stack ended
            continue
        if int(m.group(1)) == 0 and frames:
            break
        where = (m.group(3) or "").strip()
        loc = LOCATION.match(where) if not where.startswith("(") else None
        frames.append(
            {
                "function": m.group(2),
                "file": loc.group(1) if loc else None,
                "line": int(loc.group(2)) if loc else None,
                "source": "sanitizer",
            }
        )
        if len(frames) >= MAX_FRAMES:
            break
    return frames


def python_frames(stderr: str) -> list[dict[str, Any]]:
    """The last traceback's frames, innermost first."""
    start = stderr.rfind("Traceback (most recent call last):")
    if start < 0:
        return []
    found = [
        {"function": m.group(3), "file": m.group(1), "line": int(m.group(2)), "source": "python"}
        for m in (PY_FRAME.match(line) for line in stderr[start:].splitlines())
        if m is not None
    ]
    return list(reversed(found))[:MAX_FRAMES]


def frames(stderr: str, python: bool) -> list[dict[str, Any]]:
    found = sanitizer_frames(stderr)
    if not found and python:
        found = python_frames(stderr)
    return found
