"""Reading a bundle that may be hostile: bounded, regular files only, no recursion.

A bundle is untrusted input until its signature and digests hold, and even the checks must not
be turned against the verifier: a FIFO named statement.json would block a read forever,
`/dev/zero` would fill memory, a 1 GiB signature file would exhaust it, ten thousand nested
directories would exhaust the stack, and a symlink would read outside the bundle. So:

- `read_regular` opens with O_NOFOLLOW|O_NONBLOCK (a symlink fails, a FIFO does not block),
  checks `fstat` is a regular file and its size is within the cap, and reads at most cap+1 bytes;
- `walk` lists payload/ iteratively (no recursion, `lstat` only, never following a link), with
  a cap on depth, entries and total size: every non-regular entry is reported with its kind,
  every empty directory as an extra entry;
- `unsafe_name` says why a subject name must not be joined to a path (absolute, `..`, `.`,
  empty parts, NUL, backslash).

Problems carry the reason codes of engine.audit.reasons.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

MiB = 1 << 20
MAX_STATEMENT = 16 * MiB  # statement.json and statement.sigstore.json
MAX_FILE = 64 * MiB  # one payload file
MAX_TOTAL = 512 * MiB  # all payload files
MAX_ENTRIES = 20_000  # files and directories under payload/
MAX_DEPTH = 32  # directory nesting under payload/


class Unsafe(Exception):
    """A file the verifier will not read: reason code and detail."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISLNK, "symlink"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISDIR, "directory"),
    ):
        if test(mode):
            return name
    return "regular file" if stat.S_ISREG(mode) else "special file"


def read_regular(path: Path, limit: int, name: str | None = None) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; Unsafe otherwise."""
    name = name or path.name
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise Unsafe("bundle.layout", f"{name}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise Unsafe("bundle.not-regular", f"{name} is a {kind(st.st_mode)}, not a regular file")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise Unsafe("bundle.not-regular", f"{name}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)  # the file opened, not the name looked up before
        if not stat.S_ISREG(st.st_mode):
            raise Unsafe("bundle.not-regular", f"{name} is a {kind(st.st_mode)}")
        if st.st_size > limit:
            raise Unsafe("bundle.too-large", f"{name}: {st.st_size} bytes, the cap is {limit}")
        chunks: list[bytes] = []
        got = 0
        while got <= limit:
            chunk = os.read(fd, min(MiB, limit + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        if got > limit:
            raise Unsafe("bundle.too-large", f"{name}: more than {limit} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


@dataclass
class Listing:
    files: dict[str, tuple[Path, int]] = field(default_factory=dict)  # rel -> (path, size)
    problems: list[tuple[str, str]] = field(default_factory=list)  # (reason, detail)
    extra_dirs: list[str] = field(default_factory=list)  # empty directories
    odd: list[str] = field(default_factory=list)  # entries not listed as files (rel paths)


def walk(payload: Path) -> Listing:
    """Every regular file under `payload` (iteratively, links never followed), with problems."""
    out = Listing()
    stack: list[tuple[Path, str, int]] = [(payload, "", 0)]
    entries = total = 0
    while stack:
        directory, rel, depth = stack.pop()
        if depth > MAX_DEPTH:
            out.problems.append(("bundle.too-deep", f"{rel}/: nested deeper than {MAX_DEPTH}"))
            continue
        try:
            with os.scandir(directory) as it:
                children = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            out.problems.append(("bundle.layout", f"{rel or '.'}/: {exc.strerror}"))
            continue
        if not children and rel:
            out.extra_dirs.append(rel + "/")
        for entry in children:
            entries += 1
            if entries > MAX_ENTRIES:
                out.problems.append(("bundle.too-deep", f"more than {MAX_ENTRIES} entries"))
                return out
            child = f"{rel}/{entry.name}" if rel else entry.name
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                stack.append((Path(entry.path), child, depth + 1))
            elif stat.S_ISREG(st.st_mode):
                total += st.st_size
                if st.st_size > MAX_FILE:
                    out.odd.append(child)
                    out.problems.append(
                        ("bundle.too-large", f"{child}: {st.st_size} bytes, the cap is {MAX_FILE}")
                    )
                else:
                    out.files[child] = (Path(entry.path), st.st_size)
            else:
                out.odd.append(child)
                out.problems.append(
                    ("bundle.not-regular", f"{child} is a {kind(st.st_mode)}, not a regular file")
                )
    if total > MAX_TOTAL:
        out.problems.append(("bundle.too-large", f"payload: {total} bytes, the cap is {MAX_TOTAL}"))
    return out


def unsafe_name(name: str) -> str | None:
    """Why a subject name cannot name a file inside payload/, or None."""
    if not name:
        return "empty"
    if "\x00" in name:
        return "holds a NUL byte"
    if name.startswith("/"):
        return "absolute"
    if "\\" in name:
        return "holds a backslash"
    parts = name.split("/")
    if ".." in parts:
        return "climbs out with '..'"
    if any(p in ("", ".") for p in parts):
        return "has an empty or '.' part"
    return None
