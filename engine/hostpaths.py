"""The identity of what the build sandbox sees of the host: `[nix] extra_sandbox_paths`.

A path the sandbox exposes (the host's gcc, python3, libc ...) is an input of every build, but
Nix does not hash it: a derivation built with a tool missing, or with another version of it,
keeps its output path, and Nix hands that output back. So trace computes an *identity* of those
paths and puts it both into every step's key (engine/run.py) and into every derivation the run
evaluates (engine/expression.py: the `TRACE_SANDBOX_PATHS` attribute): when the files behind the
paths change, every derivation that could see them gets a new path and is really rebuilt.

The identity is a cheap signature, not a digest of every byte (a digest of /usr would cost
seconds on every run): for each declared path (`path`, `target=source`, `path?` as Nix reads
them), the real path of its source and the (kind, mode, size, mtime_ns, ctime_ns, inode) of it
and of every entry at most DEPTH levels below it (a symlink by its own lstat and target text;
the ctime sees an edit whose mtime was set back, `touch -r`, `cp -p`). A declared path that is
itself a regular file also enters by its content digest. Installing, removing or upgrading a
tool renames files into a directory (its mtime moves) or writes a file near the top (its mtime
moves): both are seen down to DEPTH + 1 levels. An in-place edit of a file deeper than DEPTH is
not: `--rebuild-all` rebuilds regardless (docs/fork.md).

Standard library only: the no-op fast path (engine/fastpath.py) checks it too.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from collections.abc import Sequence

DEPTH = 2  # levels of entries below a declared directory whose stat enters the identity
MAX_CONTENT = 64 << 20  # a declared file enters by its content when at most this big
ATTRIBUTE = "TRACE_SANDBOX_PATHS"  # the derivation attribute that carries the identity

Entry = tuple[object, ...]


def source_of(spec: str) -> tuple[str, bool]:
    """(host path, optional) of one sandbox-paths entry: `path`, `target=source`, `path?`."""
    optional = spec.endswith("?")
    text = spec[:-1] if optional else spec
    _, sep, source = text.partition("=")
    return (source if sep else text), optional


def _content(path: str) -> str | None:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
    except OSError:
        return None
    return h.hexdigest()


def _entry(path: str, rel: str, st: os.stat_result, whole: bool) -> Entry:
    kind = stat.S_IFMT(st.st_mode)
    size = -1 if kind == stat.S_IFDIR else st.st_size
    sig: list[object] = [rel, kind, stat.S_IMODE(st.st_mode), size, st.st_mtime_ns]
    sig += [st.st_ctime_ns, st.st_ino]
    if kind == stat.S_IFLNK:
        try:
            sig.append(os.readlink(path))
        except OSError:
            sig.append(None)
    elif whole and kind == stat.S_IFREG and st.st_size <= MAX_CONTENT:
        sig.append(_content(path))
    return tuple(sig)


def _walk(root: str, rel: str, level: int, out: list[Entry]) -> None:
    try:
        it = os.scandir(os.path.join(root, rel) if rel else root)
    except OSError as exc:
        out.append((rel, "unreadable", exc.errno))
        return
    with it:
        for e in it:
            relpath = f"{rel}/{e.name}" if rel else e.name
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue  # vanished while listed
            out.append(_entry(e.path, relpath, st, whole=False))
            if level < DEPTH and stat.S_ISDIR(st.st_mode):
                _walk(root, relpath, level + 1, out)


def signature(path: str) -> list[Entry]:
    """The sorted stat entries of one host path (resolved) and what lies below it."""
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError as exc:
        return [("", "missing", exc.errno)]
    out = [_entry(real, "", st, whole=True)]
    if stat.S_ISDIR(st.st_mode):
        _walk(real, "", 1, out)
    out.sort(key=lambda e: str(e[0]))
    return [("real", real), *out]


def identity(paths: Sequence[str]) -> str | None:
    """A digest that changes when the list or the files behind it change (None: no paths)."""
    if not paths:
        return None
    seen: dict[str, list[Entry]] = {}
    parts = []
    for spec in paths:
        source, optional = source_of(spec)
        real = os.path.realpath(source)
        if real not in seen:  # /bin and /usr/bin: one walk
            seen[real] = signature(source)
        parts.append([spec, optional, seen[real]])
    text = json.dumps(parts, separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


# A shell (or make) that could not find a program: busybox `sh: gcc: not found`, dash `sh: 1: cc:
# not found`, bash `bash: line 3: gcc: command not found`, a script `/nix/store/…/setup.sh: line 9:
# cc: command not found`, make `make: cc: No such file or directory`, and trace's compile
# recorder (templates/verify/cc-record) `cc: not found (trace's compile recorder …)`.
_NOT_FOUND = re.compile(
    r"(?m)^\s*(?:[>|]\s*)?(?:"
    r"(?:\S*(?:sh|\.sh)|/\S+|make(?:\[\d+\])?): (?:line )?(?:\d+: )?([A-Za-z0-9_.+-]+): "
    r"(?:command not found|not found|No such file or directory)\s*$"
    r"|([A-Za-z0-9_.+-]+): not found \(trace's compile recorder[^\n]*)"
)
ADVICE = (
    "the sandbox lacks a tool the build needs (an environment problem, not the patch): declare "
    "the host paths that hold it in [nix] extra_sandbox_paths of the fork's trace.toml (e.g. "
    '["/usr", "/lib64", "/bin", "/lib"]) or use a stdenv that brings its own compiler, then '
    "run again: what those paths hold is part of every step, so the steps that saw the old "
    "sandbox are rebuilt"
)


def missing_tool(log: str) -> tuple[str, str] | None:
    """(program, the log line) when a build log shows a shell that could not find a program."""
    m = _NOT_FOUND.search(log)
    return (m.group(1) or m.group(2), m.group(0).strip()) if m else None
