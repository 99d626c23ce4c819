"""Scout's reading: OSV advisories from a directory of JSON files or an OSV export zip.

A file that is not a valid advisory is reported with its name and why (one bad record in an
export of thousands does not stop the others); a source that is neither is an input error.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from engine.advisory import OsvAdvisory
from engine.errors import InputError


class Found(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    advisory: OsvAdvisory | None
    raw: bytes
    problem: str | None = None


def _parse(name: str, raw: bytes) -> Found:
    try:
        doc = json.loads(raw)
        return Found(name=name, advisory=OsvAdvisory.model_validate(doc), raw=raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return Found(name=name, advisory=None, raw=raw, problem=f"not JSON: {exc}")
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        return Found(name=name, advisory=None, raw=raw, problem=f"{where}: {err['msg']}")


def read_advisories(source: Path) -> list[Found]:
    if source.is_dir():
        return [_parse(p.name, p.read_bytes()) for p in sorted(source.rglob("*.json"))]
    if source.is_file() and zipfile.is_zipfile(source):
        with zipfile.ZipFile(source) as zf:
            names = sorted(n for n in zf.namelist() if n.endswith(".json"))
            return [_parse(n, zf.read(n)) for n in names]
    raise InputError(
        f"{source} is neither a directory of OSV JSON files nor an OSV export zip",
        hint="pass a directory or the zip osv.dev exports per ecosystem",
    )
