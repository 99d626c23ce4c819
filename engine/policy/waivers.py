"""Waivers: each lifts ONE named reason code for ONE candidate, with a justification, until an
expiry date, and only when a maintainer signed it (engine.policy.signed_waiver).

`load_waivers(path, catalogue, trust)` reads a directory of signed waiver files (`*.json`, as
`trace waive` writes them), one such file, or a `trace.waivers/v1` TOML file. A file that is
not a valid signed waiver (unsigned, signed by a key the maintainers policy does not list or by
trace's own signing key, changed after signing, stale: the candidate's patch changed) is
IGNORED with a warning on stderr naming the file and why, and listed in the decision as
ignored. Every TOML entry is unsigned: the file is still checked strictly (a code the catalogue
does not define, a code marked `waivable = false`, a duplicate (candidate, reason) pair, a short
justification are errors), then each entry is ignored. Expired waivers simply stop applying.
"""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field

from engine.errors import PolicyError
from engine.policy.reasons import Catalogue, require_code
from engine.policy.source import (
    PolicyHeader,
    PolicyRef,
    Strict,
    find_line,
    load_policy,
    ref,
)

if TYPE_CHECKING:
    from engine.policy.signed_waiver import WaiverTrust

SCHEMA = "trace.waivers/v1"


class Waiver(Strict):
    candidate: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", description="the candidate id it applies to"
    )
    reason: str = Field(description="the one reason code it lifts")
    justification: str = Field(min_length=20, description="why shipping despite it is right")
    expires: dt.date = Field(description="last day the waiver applies (inclusive)")
    approved_by: str = Field(min_length=1, description="who accepted the risk (a team or role)")
    patch_sha256: str | None = Field(default=None, description="the patch it was signed for")
    signer: str | None = Field(default=None, description="the maintainer key's hint")
    signed_on: dt.date | None = Field(default=None, description="the day it was signed")
    file: str | None = Field(default=None, description="the bundle's copy: waivers/<reason>.json")

    def active_on(self, today: dt.date) -> bool:
        return today <= self.expires


class WaiverFile(Strict):
    policy: PolicyHeader
    waivers: list[Waiver] = Field(default_factory=list)


class IgnoredWaiver(Strict):
    file: str = Field(description="the file's name (the warning on stderr gives its path)")
    candidate: str | None = Field(description="the candidate it names, when readable")
    why: str


class WaiverSet(Strict):
    ref: PolicyRef | None = Field(description="None when no waiver file was given")
    waivers: list[Waiver] = Field(default_factory=list, description="valid, signed waivers")
    ignored: list[IgnoredWaiver] = Field(default_factory=list)
    maintainers: PolicyRef | None = Field(default=None, description="who may sign them")
    signed: dict[str, bytes] = Field(
        default_factory=dict, description="each valid waiver's file bytes: 'CANDIDATE REASON'"
    )

    def for_candidate(self, candidate: str) -> list[Waiver]:
        return [w for w in self.waivers if w.candidate == candidate]

    def files_of(self, candidate: str) -> list[tuple[str, bytes]]:
        """(bundled path, signed bytes) of each valid waiver naming `candidate`."""
        return [
            (str(w.file), self.signed[f"{w.candidate} {w.reason}"])
            for w in self.for_candidate(candidate)
            if w.file is not None and f"{w.candidate} {w.reason}" in self.signed
        ]


NO_WAIVERS = WaiverSet(ref=None, waivers=[])


def load_waivers(path: Path, catalogue: Catalogue, trust: WaiverTrust) -> WaiverSet:
    """The valid signed waivers at `path` (a directory, a signed file or a TOML file); every
    other one is ignored with a warning (see the module docstring)."""
    # signed waivers name no waiver file (`ref` None): each is identified by its own signature,
    # and a bundle carries each one it lists
    if path.is_dir():
        return _report(_signed(sorted(path.glob("*.json")), catalogue, trust), path)
    if path.suffix == ".json":
        return _report(_signed([path], catalogue, trust), path)
    toml = _load_toml(path, catalogue)
    ignored = [
        IgnoredWaiver(
            file=path.name,
            candidate=w.candidate,
            why=f"unsigned ({w.reason}: a TOML entry; a maintainer signs one with `trace waive`)",
        )
        for w in toml.waivers
        if not trust.patches or w.candidate in trust.patches
    ]
    out = WaiverSet(ref=toml.ref, ignored=ignored, maintainers=trust.maintainers.ref)
    return _report(out, path)


def _signed(files: list[Path], catalogue: Catalogue, trust: WaiverTrust) -> WaiverSet:
    from engine.policy.signed_waiver import check_signed

    valid: list[Waiver] = []
    ignored: list[IgnoredWaiver] = []
    signed: dict[str, bytes] = {}
    for f in files:
        try:
            raw = f.read_bytes()
        except OSError as exc:
            ignored.append(IgnoredWaiver(file=f.name, candidate=None, why=str(exc.strerror)))
            continue
        got = check_signed(raw, trust, catalogue)
        if got is None:
            continue  # a waiver of another candidate: another decision's
        if not isinstance(got, Waiver):
            ignored.append(IgnoredWaiver(file=f.name, candidate=got.candidate, why=got.why))
        elif any((w.candidate, w.reason) == (got.candidate, got.reason) for w in valid):
            why = f"a second waiver for '{got.candidate}' and '{got.reason}'"
            ignored.append(IgnoredWaiver(file=f.name, candidate=got.candidate, why=why))
        else:
            valid.append(got)
            signed[f"{got.candidate} {got.reason}"] = raw
    return WaiverSet(
        ref=None, waivers=valid, ignored=ignored, maintainers=trust.maintainers.ref, signed=signed
    )


def _report(found: WaiverSet, path: Path) -> WaiverSet:
    for i in found.ignored:
        where = path if path.name == i.file else path / i.file
        print(f"trace: warning: {where}: waiver ignored: {i.why}", file=sys.stderr)
    return found


def _load_toml(path: Path, catalogue: Catalogue) -> WaiverSet:
    spec, text, digest = load_policy(path, WaiverFile, schema=SCHEMA, what="waiver file")
    seen: set[tuple[str, str]] = set()
    for i, w in enumerate(spec.waivers):
        loc: tuple[str | int, ...] = ("waivers", i, "reason")
        require_code(catalogue, w.reason, file=path, text=text, loc=loc)
        spec_reason = catalogue.get(w.reason)
        if spec_reason is not None and not spec_reason.waivable:
            raise PolicyError(
                f"reason '{w.reason}' cannot be waived (waivable = false in the catalogue)",
                file=path,
                key=f"waivers.{i}.reason",
                line=find_line(text, loc),
                hint="fix the evidence instead; this reason marks a claim that does not hold",
            )
        if (w.candidate, w.reason) in seen:
            raise PolicyError(
                f"a second waiver for candidate '{w.candidate}' and reason '{w.reason}'",
                file=path,
                key=f"waivers.{i}",
                line=find_line(text, ("waivers", i)),
                hint="keep one waiver per candidate and reason (edit its expiry instead)",
            )
        seen.add((w.candidate, w.reason))
    return WaiverSet(ref=ref(spec.policy, path, digest), waivers=spec.waivers)
