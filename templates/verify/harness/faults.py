"""Where a target failed: the frames of its own sanitizer report or Python traceback.

Stdlib only. Frames are listed innermost first, as {function, file, line, source}: `source` is
`sanitizer` (the first stack of an AddressSanitizer/UBSan/... report: build the program with
`-g` so frames carry file:line) or `python` (the last traceback on the target's stderr, reversed).
Files are as the report names them (normalised: the package's store path is `<target>`); a frame
without a source location (a shared library, the sanitizer runtime) has `file` None. A signal
without a sanitizer report leaves no frames (no debugger runs in the sandbox).
"""

from __future__ import annotations

import re
from typing import Any

MAX_FRAMES = 32
SAN_FRAME = re.compile(r"^\s*#(\d+) 0x\w+ in (\S+)(?: (.*))?$")
LOCATION = re.compile(r"^(.*?):(\d+)(?::\d+)?$")
PY_FRAME = re.compile(r'^  File "([^"]+)", line (\d+), in (\S+)')


def sanitizer_frames(stderr: str) -> list[dict[str, Any]]:
    """The first stack trace after a sanitizer's ERROR line."""
    start = stderr.find("ERROR: ")
    if start < 0 or "Sanitizer" not in stderr[start : start + 80]:
        start = stderr.find("runtime error:")  # UBSan without an ERROR header
        if start < 0:
            return []
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
