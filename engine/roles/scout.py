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


def query_api(
    base_url: str, queries: list[tuple[str, str, str]], deadline_s: float = 30.0
) -> list[Found]:
    """The OSV API (online, optional): one `POST /v1/querybatch` for every (name, ecosystem,
    version), then `GET /v1/vulns/ID` for each advisory named; every request under a deadline.
    An endpoint that fails or does not answer in time is an input error naming it."""
    import urllib.error
    import urllib.request

    base = base_url.rstrip("/")

    def call(url: str, body: bytes | None = None) -> bytes:
        req = urllib.request.Request(url, data=body, method="POST" if body else "GET")
        req.add_header("content-type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=deadline_s) as resp:
                data: bytes = resp.read(64 * 1024 * 1024)
                return data
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise InputError(
                f"OSV API {url} failed or did not answer within {deadline_s:g} s: {exc}",
                hint="check --osv-api, or scout offline from a directory or an OSV export zip",
            ) from None

    body = {
        "queries": [{"package": {"name": n, "ecosystem": e}, "version": v} for n, e, v in queries]
    }
    raw = call(f"{base}/v1/querybatch", json.dumps(body).encode())
    try:
        results = json.loads(raw)["results"]
        ids = sorted({v["id"] for r in results for v in r.get("vulns", [])})
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise InputError(f"OSV API {base}/v1/querybatch answered no results list: {exc}") from None
    return [_parse(f"{vid}.json", call(f"{base}/v1/vulns/{vid}")) for vid in ids]
