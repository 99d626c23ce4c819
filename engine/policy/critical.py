"""The critical-package list (policy/critical-packages.toml): packages whose fixes always get a
human, whatever else routing says. Entries match a package's attribute path exactly or by glob.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from pathlib import Path

from pydantic import Field

from engine.policy.source import (
    PolicyHeader,
    PolicyRef,
    Strict,
    load_policy,
    ref,
    require_unique,
)

SCHEMA = "trace.critical/v1"


class CriticalEntry(Strict):
    pattern: str = Field(
        pattern=r"^[A-Za-z0-9_*?\[\]'.-]+$",
        description="attribute path, or a glob over it (python3Packages.*)",
    )
    why: str = Field(min_length=1, description="why a fix here needs a human")


class CriticalFile(Strict):
    policy: PolicyHeader
    packages: list[CriticalEntry] = Field(default_factory=list)


class CriticalList(Strict):
    ref: PolicyRef
    packages: list[CriticalEntry]

    def match(self, package: str) -> CriticalEntry | None:
        return next((e for e in self.packages if fnmatchcase(package, e.pattern)), None)


def load_critical(path: Path) -> CriticalList:
    spec, text, digest = load_policy(
        path, CriticalFile, schema=SCHEMA, what="critical-package list"
    )
    require_unique(
        [e.pattern for e in spec.packages],
        table="packages",
        field="pattern",
        what="pattern",
        verb="is listed twice",
        path=path,
        text=text,
        hint="keep one entry per pattern",
    )
    return CriticalList(ref=ref(spec.policy, path, digest), packages=spec.packages)
