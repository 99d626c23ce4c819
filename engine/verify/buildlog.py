"""What a failed package build's log says, in one line for the verdict table: for a patch that
does not apply, the patch, the file and the failing hunk's header (from the candidate's own
patch file); and always where the full log is (`nix log DRV`)."""

from __future__ import annotations

import re
from pathlib import Path

from engine.errors import InputError
from engine.loader import read_bytes

HUNK = re.compile(r"Hunk #?(\d+) FAILED")
APPLYING = re.compile(r"applying patch (\S+)")
PATCHING = re.compile(r"patching file (\S+)")
STORE_PREFIX = re.compile(r"^[0-9a-z]{32}-")


def _strip(path: str) -> str:
    return path.split("/", 1)[1] if path.startswith(("a/", "b/")) else path


def hunk_header(patch: Path, file: str, n: int) -> str | None:
    """The `@@ … @@` line of the n-th hunk for `file` in `patch` (None when not found)."""
    try:  # the one patch rule (Candidate.patch_texts): UTF-8 with surrogateescape
        lines = read_bytes(patch, "patch").decode("utf-8", "surrogateescape").splitlines()
    except InputError:
        return None
    current: str | None = None
    seen = 0
    for line in lines:
        if line.startswith("+++ "):
            current = _strip(line[4:].split("\t")[0].strip())
            seen = 0
        elif line.startswith("@@") and current == file:
            seen += 1
            if seen == n:
                return line.strip()
    return None


def build_failure_detail(log_tail: str, drv: str | None, patches: list[Path]) -> str:
    from engine.hostpaths import ADVICE, missing_tool

    lines = [ln.strip() for ln in log_tail.splitlines() if ln.strip()]
    detail = lines[-1][:300] if lines else ""
    if missing := missing_tool(log_tail):
        detail = f"{missing[1]}: {ADVICE}"
    patch_name = file = None
    for line in lines:
        if m := APPLYING.search(line):
            patch_name, file = STORE_PREFIX.sub("", Path(m.group(1)).name), None
        elif m := PATCHING.search(line):
            file = m.group(1)
        elif (m := HUNK.search(line)) and patch_name:
            n = int(m.group(1))
            where = f" of {file}" if file else ""
            detail = f"{patch_name} does not apply: hunk #{n}{where} failed"
            own = [p for p in patches if p.name == patch_name or patch_name.endswith(p.name)]
            header = hunk_header(own[0], file, n) if own and file else None
            if header:
                detail += f" ({header})"
            break
    if drv:
        detail += f"; full log: nix log {drv}"
    return detail
