"""A per-user secret key file for MACs over caches kept in state dirs others may have written.

The key lives outside every project (under $XDG_STATE_HOME or ~/.local/state), is created on
first use with mode 0600, and is refused when it is not a regular file only its owner can read,
has the wrong length, or lies inside a directory the data it authenticates comes from (a fork's
root or state dir: whoever writes there could forge it)."""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path

KEY_BYTES = 32


def state_home() -> Path | None:
    base = os.environ.get("XDG_STATE_HOME")
    if base:
        return Path(base)
    try:
        return Path.home() / ".local" / "state"
    except RuntimeError:  # no $HOME and no passwd entry: nowhere outside the project
        return None


def load(path: Path, outside: Iterable[Path] = (), *, create: bool = True) -> bytes | None:
    """The key at `path` (made when missing and `create`), or None when it cannot be trusted."""
    path = path.absolute()
    real = path.resolve()
    for inside in outside:
        if path.is_relative_to(inside.absolute()) or real.is_relative_to(inside.resolve()):
            return None
    try:
        if create and not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            except FileExistsError:
                pass  # another run made it a moment ago
            else:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(secrets.token_bytes(KEY_BYTES))
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            data = fh.read(KEY_BYTES + 1)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        return None
    return data if len(data) == KEY_BYTES else None
