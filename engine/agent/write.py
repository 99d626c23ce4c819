"""Writing a drafted candidate folder: candidate.toml and the files it names, atomically each,
and tracked so that a draft ended by an error removes what it wrote."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from engine.files import write_atomic


def toml_value(value: Any) -> str:
    """TOML for the few value types a candidate holds (JSON strings are TOML basic strings)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        items = ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items())
        return "{ " + items + " }" if items else "{}"
    raise TypeError(f"no TOML for {type(value).__name__}")


def candidate_toml(top: dict[str, Any], tables: dict[str, dict[str, Any]]) -> str:
    lines = ["# Drafted by `trace draft`: every file here came from a model step (see draft.json)."]
    lines += [f"{k} = {toml_value(v)}" for k, v in top.items() if v is not None]
    for name, table in tables.items():
        lines += ["", f"[{name}]"]
        lines += [f"{k} = {toml_value(v)}" for k, v in table.items() if v is not None]
    return "\n".join(lines) + "\n"


class Folder:
    """A candidate folder whose files this run wrote (for `rollback`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.created = not path.exists()
        self.written: list[Path] = []
        self.before: dict[Path, bytes] = {}

    def write(self, rel: str, data: str | bytes) -> Path:
        target = self.path / rel
        if target.is_file() and target not in self.written:
            self.before[target] = target.read_bytes()
        write_atomic(target, data)
        if target not in self.written:
            self.written.append(target)
        return target

    def remove(self, rel: str) -> None:
        """Drop a stale file of an earlier draft (restored by `rollback`)."""
        target = self.path / rel
        if target.is_file():
            if target not in self.written:
                self.before[target] = target.read_bytes()
                self.written.append(target)
            target.unlink()

    def rollback(self) -> None:
        if self.created:
            shutil.rmtree(self.path, ignore_errors=True)
            return
        for p in self.written:
            if p in self.before:
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(self.before[p])
            else:
                p.unlink(missing_ok=True)
