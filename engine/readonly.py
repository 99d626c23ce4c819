"""Reading the state database without writing anything (bad input exits 2 having written nothing,
and a no-op run leaves the state directory as it found it).

A plain `mode=ro` connection to a WAL database creates its `-wal` and `-shm` files and, read-only,
never removes them. Without a `-wal` file no connection has the database open (SQLite removes
it when the last one closes), so every committed row is in the main file and `immutable=1`
reads exactly what is there, creating nothing. With one (a writer running now, or killed), the
reader goes through it with `mode=ro`: those files exist already."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from urllib.parse import quote


def read_only_connection(db_path: Path) -> sqlite3.Connection:
    """A connection that reads `db_path` and creates no file. Raises sqlite3.Error when the
    database cannot be opened."""
    uri = "file:" + quote(os.fspath(db_path))
    if os.path.lexists(f"{db_path}-wal"):
        return sqlite3.connect(f"{uri}?mode=ro", uri=True)
    return sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True)
