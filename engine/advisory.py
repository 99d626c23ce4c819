"""OSV advisories: the typed model trace reads, with CVSS v3 base scores computed from the vector.

Only the fields trace uses are modelled; other OSV fields (`schema_version`, `credits`,
`database_specific`, ...) are accepted and ignored, since OSV is an external, growing format.
What is modelled is validated: a malformed CVSS v3 vector is an error, not a silent "unknown".

The base score follows the CVSS v3.1 specification (section 7.1 formulas, Appendix A
`Roundup`); v3.0 vectors use v3.0's plain ceiling to one decimal, as that version specifies.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from engine.errors import InputError
from engine.loader import parse_json, read_text

Level = Literal["none", "low", "medium", "high", "critical", "unknown"]
LEVELS: tuple[Level, ...] = ("unknown", "none", "low", "medium", "high", "critical")

_WEIGHTS: dict[str, dict[str, float]] = {
    "AV": {"N": 0.85, "A": 0.62, "L": 0.55, "P": 0.2},
    "AC": {"L": 0.77, "H": 0.44},
    "PR": {"N": 0.85, "L": 0.62, "H": 0.27},
    "UI": {"N": 0.85, "R": 0.62},
    "S": {"U": 0.0, "C": 0.0},
    "C": {"H": 0.56, "L": 0.22, "N": 0.0},
    "I": {"H": 0.56, "L": 0.22, "N": 0.0},
    "A": {"H": 0.56, "L": 0.22, "N": 0.0},
}
_PR_CHANGED = {"N": 0.85, "L": 0.68, "H": 0.5}
# Temporal and environmental metrics may follow the base metrics; the base score ignores them.
_OTHER: dict[str, set[str]] = {
    "E": set("XUPFH"),
    "RL": set("XOTWU"),
    "RC": set("XURC"),
    "CR": set("XLMH"),
    "IR": set("XLMH"),
    "AR": set("XLMH"),
    "MAV": set("XNALP"),
    "MAC": set("XLH"),
    "MPR": set("XNLH"),
    "MUI": set("XNR"),
    "MS": set("XUC"),
    "MC": set("XNLH"),
    "MI": set("XNLH"),
    "MA": set("XNLH"),
}


def _roundup_31(x: float) -> float:
    """CVSS v3.1 Appendix A: the smallest one-decimal number >= x, immune to float noise."""
    i = round(x * 100000)
    if i % 10000 == 0:
        return i / 100000.0
    return (math.floor(i / 10000) + 1) / 10.0


def _roundup_30(x: float) -> float:
    return math.ceil(x * 10) / 10.0


def parse_cvss3(vector: str) -> tuple[str, dict[str, str]]:
    """'CVSS:3.1/AV:N/...' -> ('3.1', {'AV': 'N', ...}); ValueError says what is wrong."""
    parts = vector.strip().split("/")
    head = parts[0]
    if head not in ("CVSS:3.0", "CVSS:3.1"):
        raise ValueError(
            f"not a CVSS v3 vector (must start with CVSS:3.0/ or CVSS:3.1/): {vector!r}"
        )
    metrics: dict[str, str] = {}
    for part in parts[1:]:
        name, sep, value = part.partition(":")
        if not sep:
            raise ValueError(f"malformed metric {part!r} in {vector!r} (want NAME:VALUE)")
        allowed = set(_WEIGHTS[name]) if name in _WEIGHTS else _OTHER.get(name)
        if allowed is None:
            raise ValueError(f"unknown CVSS v3 metric {name!r} in {vector!r}")
        if value not in allowed:
            raise ValueError(
                f"bad value {value!r} for metric {name} in {vector!r} "
                f"(allowed: {', '.join(sorted(allowed))})"
            )
        if name in metrics:
            raise ValueError(f"metric {name} given twice in {vector!r}")
        metrics[name] = value
    missing = [m for m in _WEIGHTS if m not in metrics]
    if missing:
        raise ValueError(f"base metric(s) {', '.join(missing)} missing in {vector!r}")
    return head.removeprefix("CVSS:"), metrics


def cvss3_base_score(vector: str) -> float:
    version, m = parse_cvss3(vector)
    changed = m["S"] == "C"
    iss = 1 - (1 - _WEIGHTS["C"][m["C"]]) * (1 - _WEIGHTS["I"][m["I"]]) * (
        1 - _WEIGHTS["A"][m["A"]]
    )
    impact = 7.52 * (iss - 0.029) - 3.25 * (iss - 0.02) ** 15 if changed else 6.42 * iss
    pr = (_PR_CHANGED if changed else _WEIGHTS["PR"])[m["PR"]]
    exploitability = (
        8.22 * _WEIGHTS["AV"][m["AV"]] * _WEIGHTS["AC"][m["AC"]] * pr * _WEIGHTS["UI"][m["UI"]]
    )
    if impact <= 0:
        return 0.0
    roundup = _roundup_31 if version == "3.1" else _roundup_30
    total = (1.08 if changed else 1.0) * (impact + exploitability)
    return roundup(min(total, 10.0))


def level_of(score: float) -> Level:
    """Qualitative severity rating scale of CVSS v3 (section 5)."""
    if score == 0:
        return "none"
    if score < 4.0:
        return "low"
    if score < 7.0:
        return "medium"
    if score < 9.0:
        return "high"
    return "critical"


# GitHub's database_specific.severity words -> the CVSS scale's levels.
_DB_LEVELS: dict[str, Level] = {
    "LOW": "low",
    "MODERATE": "medium",
    "MEDIUM": "medium",
    "HIGH": "high",
    "CRITICAL": "critical",
}


class _Osv(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class Severity(_Osv):
    type: str = Field(description="CVSS_V2, CVSS_V3, CVSS_V4, Ubuntu, ...")
    score: str

    @field_validator("score")
    @classmethod
    def _vector(cls, v: str, info: ValidationInfo) -> str:
        if info.data.get("type") == "CVSS_V3":
            parse_cvss3(v)
        return v


class Package(_Osv):
    ecosystem: str
    name: str
    purl: str | None = None


class Event(_Osv):
    introduced: str | None = None
    fixed: str | None = None
    last_affected: str | None = None
    limit: str | None = None


class Range(_Osv):
    type: Literal["GIT", "SEMVER", "ECOSYSTEM"]
    repo: str | None = None
    events: list[Event] = Field(min_length=1)


class Affected(_Osv):
    package: Package | None = None
    ranges: list[Range] = Field(default_factory=list)
    versions: list[str] = Field(default_factory=list)


class Reference(_Osv):
    type: str = Field(description="ADVISORY, ARTICLE, DETECTION, DISCUSSION, REPORT, FIX, ...")
    url: str


class OsvAdvisory(_Osv):
    """An OSV advisory, with its severity computed and its upstream fix located."""

    id: str = Field(min_length=1)
    aliases: list[str] = Field(default_factory=list)
    summary: str = ""
    details: str = ""
    modified: str | None = None
    published: str | None = None
    withdrawn: str | None = None
    severity: list[Severity] = Field(default_factory=list)
    affected: list[Affected] = Field(default_factory=list)
    references: list[Reference] = Field(default_factory=list)
    database_specific: dict[str, Any] = Field(default_factory=dict)

    @property
    def cvss_vector(self) -> str | None:
        """The CVSS v3 vector; the highest-versioned one when several are given."""
        vectors = [s.score for s in self.severity if s.type == "CVSS_V3"]
        return max(vectors, key=lambda v: v.split("/")[0]) if vectors else None

    @property
    def base_score(self) -> float | None:
        vector = self.cvss_vector
        return cvss3_base_score(vector) if vector else None

    @property
    def level(self) -> Level:
        """From the CVSS v3 score; else the database's own word (GitHub); else 'unknown'."""
        score = self.base_score
        if score is not None:
            return level_of(score)
        word = self.database_specific.get("severity")
        if isinstance(word, str):
            return _DB_LEVELS.get(word.upper(), "unknown")
        return "unknown"

    @property
    def ecosystems(self) -> list[str]:
        return sorted({a.package.ecosystem for a in self.affected if a.package})

    @property
    def packages(self) -> list[str]:
        return sorted({a.package.name for a in self.affected if a.package})

    @property
    def fix_references(self) -> list[str]:
        return [r.url for r in self.references if r.type == "FIX"]

    @property
    def upstream_fix(self) -> str | None:
        """The first FIX reference (usually an upstream commit URL)."""
        fixes = self.fix_references
        return fixes[0] if fixes else None


def _json_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def load_advisory(path: Path) -> OsvAdvisory:
    """Read and validate an OSV JSON file; errors name the file, the JSON path and the fix."""
    data = parse_json(read_text(path, "advisory file"), path, "advisory file")
    if not isinstance(data, dict):
        raise InputError(
            "an OSV advisory must be a JSON object", file=path, hint="wrap it in { ... }"
        )
    try:
        return OsvAdvisory.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(
            p for p in err["loc"] if isinstance(p, int) or not str(p).startswith("function")
        )
        msg = str(err["msg"]).removeprefix("Value error, ")
        raise InputError(
            msg,
            file=path,
            key=_json_path(loc) or None,
            hint="fix that field (OSV schema: id, aliases, summary, severity[{type, score}], "
            "affected[{package, ranges}], references[{type, url}])",
        ) from None
