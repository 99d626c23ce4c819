"""Waivers: a documented file that lifts ONE named reason code for ONE candidate, with a
justification, until an expiry date. Expired waivers stay in the file and simply stop applying.

Rejected at load: a code the catalogue does not define, a code marked `waivable = false`, a
duplicate (candidate, reason) pair, a missing justification.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from pydantic import Field

from engine.errors import PolicyError
from engine.policy.reasons import Catalogue, require_code
from engine.policy.source import (
    PolicyHeader,
    PolicyRef,
    Strict,
    check_schema,
    find_line,
    read_toml,
    ref,
    validate,
)

SCHEMA = "trace.waivers/v1"


class Waiver(Strict):
    candidate: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", description="the candidate id it applies to"
    )
    reason: str = Field(description="the one reason code it lifts")
    justification: str = Field(min_length=20, description="why shipping despite it is right")
    expires: dt.date = Field(description="last day the waiver applies (inclusive)")
    approved_by: str = Field(min_length=1, description="who accepted the risk (a team or role)")

    def active_on(self, today: dt.date) -> bool:
        return today <= self.expires


class WaiverFile(Strict):
    policy: PolicyHeader
    waivers: list[Waiver] = Field(default_factory=list)


class WaiverSet(Strict):
    ref: PolicyRef | None = Field(description="None when no waiver file was given")
    waivers: list[Waiver] = Field(default_factory=list)

    def for_candidate(self, candidate: str) -> list[Waiver]:
        return [w for w in self.waivers if w.candidate == candidate]


NO_WAIVERS = WaiverSet(ref=None, waivers=[])


def load_waivers(path: Path, catalogue: Catalogue) -> WaiverSet:
    text, data, digest = read_toml(path, what="waiver file")
    spec = validate(WaiverFile, data, path=path, text=text, what="waiver file")
    check_schema(spec.policy, SCHEMA, path=path, text=text)
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
