"""Writing a file so that no reader ever sees half of it: one temp file in the same directory,
then one rename. Every module that writes a result, a page or a record goes through here."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def write_atomic(
    path: Path,
    data: bytes | str,
    *,
    durable: bool = False,
    if_changed: bool = False,
    mode: int | None = None,
) -> bool:
    """Write `data` to `path` through a temp file and `os.replace`. Returns whether it wrote.

    `durable` fsyncs the file before the rename (a policy or key a crash must not lose);
    `if_changed` leaves a file holding the same bytes untouched (no new mtime, no write);
    `mode` sets the permission bits (default: what the umask gives a new file)."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if if_changed and path.is_file() and path.read_bytes() == raw:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fh = open(tmp, "xb")  # noqa: SIM115 - closed by the `with` below; made first so a failed
    try:  # open never unlinks a file that is not ours
        with fh:
            fh.write(raw)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return True
