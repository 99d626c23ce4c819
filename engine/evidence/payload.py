"""Typed payload entries and the canonical forms they are stored (and hashed) in.

Every claim in a bundle is one `PayloadEntry`: a relative POSIX path inside `payload/`, the bytes,
and the kind of claim it supports. Builders canonicalise before anything is hashed:

- text: UTF-8, LF line endings (CRLF and lone CR become LF), exactly one trailing newline;
- JSON: keys sorted, two-space indent, UTF-8, LF, trailing newline;
- diffs: `git diff -U0 --no-color` form: colour codes stripped, context lines dropped, hunk
  headers recomputed (without git's section heading, which depends on git's configuration),
  file headers kept.
"""

from __future__ import annotations

import json
import re
from pathlib import PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

ClaimKind = Literal[
    "advisory",
    "upstream",
    "patch",
    "rationale",
    "review",
    "reproducer",
    "run",
    "gate",
    "verify",
    "routing",
    "signing",
    "replay",
    "redaction",
    "accuracy",
    "waiver",
    "other",
]

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PayloadEntry(BaseModel):
    """One payload file: where it goes, what it proves, and its (canonical) bytes."""

    model_config = ConfigDict(frozen=True)

    path: str = Field(description="relative POSIX path inside payload/")
    kind: ClaimKind
    data: bytes
    media_type: str = "text/plain"

    @field_validator("path")
    @classmethod
    def _relative(cls, v: str) -> str:
        p = PurePosixPath(v)
        if (
            not v
            or p.is_absolute()
            or "\\" in v
            or any(part in ("", ".", "..") for part in v.split("/"))
        ):
            raise ValueError(f"payload path {v!r} must be a plain relative path (no '..', no '/')")
        return v

    @property
    def is_text(self) -> bool:
        try:
            self.data.decode("utf-8")
        except UnicodeDecodeError:
            return False
        return True


def canonical_text(text: str | bytes) -> bytes:
    """UTF-8 with LF line endings and exactly one trailing newline (empty stays empty)."""
    s = text.decode("utf-8") if isinstance(text, bytes) else text
    s = s.replace("\r\n", "\n").replace("\r", "\n").rstrip("\n")
    return (s + "\n").encode("utf-8") if s else b""


def canonical_json(value: Any) -> bytes:
    """Sorted keys, two-space indent, LF, trailing newline."""
    return (json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode()


def _flush_run(
    out: list[str], old_no: int, new_no: int, removed: list[str], added: list[str]
) -> None:
    if not removed and not added:
        return
    # git's -U0 convention: a zero count names the line *before* the change.
    old_start = old_no - len(removed) if removed else old_no - 1
    new_start = new_no - len(added) if added else new_no - 1
    old_part = f"{old_start}" if len(removed) == 1 else f"{old_start},{len(removed)}"
    new_part = f"{new_start}" if len(added) == 1 else f"{new_start},{len(added)}"
    out.append(f"@@ -{old_part} +{new_part} @@")
    out.extend(removed)
    out.extend(added)


def canonical_diff(text: str | bytes) -> bytes:
    """A unified diff rewritten to `git diff -U0 --no-color` form (see module docstring).

    Lines outside hunks (file headers, `diff --git`, `index`, mode lines) are kept as they are;
    within hunks only changed lines survive, grouped into runs with recomputed headers.
    """
    raw = text.decode("utf-8", errors="replace") if isinstance(text, bytes) else text
    lines = _ANSI.sub("", raw.replace("\r\n", "\n").replace("\r", "\n")).split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        m = _HUNK.match(lines[i])
        if not m:
            if lines[i] or i < len(lines) - 1:
                out.append(lines[i])
            i += 1
            continue
        old_left = int(m.group(2)) if m.group(2) is not None else 1
        new_left = int(m.group(4)) if m.group(4) is not None else 1
        old_no, new_no = int(m.group(1)), int(m.group(3))
        if old_left == 0:
            old_no += 1
        if new_left == 0:
            new_no += 1
        removed: list[str] = []
        added: list[str] = []
        i += 1
        while i < len(lines) and (old_left > 0 or new_left > 0 or lines[i].startswith("\\")):
            line = lines[i]
            if line.startswith("\\"):  # "\ No newline at end of file" belongs to the run
                (added if added else removed).append(line)
            elif line.startswith("-"):
                removed.append(line)
                old_no += 1
                old_left -= 1
            elif line.startswith("+"):
                added.append(line)
                new_no += 1
                new_left -= 1
            else:  # context line (" " or an empty line in a mangled diff)
                _flush_run(out, old_no, new_no, removed, added)
                removed, added = [], []
                old_no += 1
                new_no += 1
                old_left -= 1
                new_left -= 1
            i += 1
        _flush_run(out, old_no, new_no, removed, added)
    return canonical_text("\n".join(out))


def text_entry(path: str, kind: ClaimKind, text: str | bytes) -> PayloadEntry:
    return PayloadEntry(path=path, kind=kind, data=canonical_text(text))


def json_entry(path: str, kind: ClaimKind, value: Any) -> PayloadEntry:
    return PayloadEntry(
        path=path, kind=kind, data=canonical_json(value), media_type="application/json"
    )


def diff_entry(path: str, text: str | bytes) -> PayloadEntry:
    return PayloadEntry(
        path=path, kind="patch", data=canonical_diff(text), media_type="text/x-diff"
    )
