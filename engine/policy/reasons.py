"""The one catalogue of stable reason codes (policy/reasons.toml), in the manner of Conforma rules.

Each code is kebab-case, led by its area (`scope-too-large`), and carries a message, what to
do, the date from which it denies (`effective_on`; before that date a hit is only a warning) and
whether a waiver may lift it.
A code, once published, never changes meaning: retire it and add a new one instead.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from pydantic import Field

from engine.errors import PolicyError
from engine.policy.source import (
    PolicyHeader,
    PolicyRef,
    Strict,
    closest,
    find_line,
    load_policy,
    ref,
    require_unique,
)

SCHEMA = "trace.reasons/v1"
CODE_RE = r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$"
RULE_RE = r"^[a-z][a-z0-9-]*(\.[a-z0-9]+(-[a-z0-9]+)*)+$"


class ReasonSpec(Strict):
    code: str = Field(pattern=CODE_RE, description="stable machine code, kebab-case, area first")
    message: str = Field(min_length=1, description="what went wrong, for a human")
    solution: str = Field(min_length=1, description="what to do about it")
    effective_on: dt.date = Field(description="from this date a hit denies; before: a warning")
    waivable: bool = Field(default=True, description="may a waiver lift it for one candidate")


class GateRuleSpec(Strict):
    """One rule of a gate (`[[rules]]`): the sandbox's gates read this table (codes.py)."""

    rule: str = Field(pattern=RULE_RE, description="`<gate>.<rule>`, stable: details.rules")
    code: str = Field(pattern=CODE_RE, description="the reason code it reports under")
    message: str = Field(min_length=1, description="what the rule found, for a human")
    solution: str = Field(min_length=1, description="what to do about it")


class CatalogueFile(Strict):
    policy: PolicyHeader
    reasons: list[ReasonSpec] = Field(min_length=1)
    rules: list[GateRuleSpec] = Field(default_factory=list)


class Catalogue(Strict):
    ref: PolicyRef
    reasons: dict[str, ReasonSpec]
    rules: dict[str, GateRuleSpec] = Field(default_factory=dict)

    def get(self, code: str) -> ReasonSpec | None:
        return self.reasons.get(code)

    def __contains__(self, code: object) -> bool:
        return code in self.reasons

    def suggest(self, code: str) -> str:
        """A hint for an unknown code: the closest known code, and where the codes are."""
        guess = closest(code, list(self.reasons))
        where = f"the codes are declared in {self.ref.path}"
        return f"did you mean '{guess}'? {where[0].upper()}{where[1:]}" if guess else where


# table -> (field, what, hint) of a value a catalogue declares once
_ONCE = {
    "reasons": (
        "code",
        "reason code",
        "a code has one meaning forever: remove the duplicate or give it a new code",
    ),
    "rules": ("rule", "gate rule", "a rule is declared once: remove the duplicate"),
}


def _each_once(table: str, values: list[str], path: Path, text: str) -> None:
    field, what, hint = _ONCE[table]
    require_unique(
        values,
        table=table,
        field=field,
        what=what,
        verb="is declared twice",
        path=path,
        text=text,
        hint=hint,
    )


def _each_code_once(codes: list[str], path: Path, text: str) -> None:
    _each_once("reasons", codes, path, text)


def _rules_name_declared_codes(spec: CatalogueFile, path: Path, text: str) -> None:
    _each_once("rules", [r.rule for r in spec.rules], path, text)
    codes = {r.code for r in spec.reasons}
    for i, rule in enumerate(spec.rules):
        if rule.code not in codes:
            raise PolicyError(
                f"gate rule '{rule.rule}' reports an undeclared code '{rule.code}'",
                file=path,
                key=f"rules.{i}.code",
                line=find_line(text, ("rules", i, "code")),
                hint="declare the code in [[reasons]] first, or name a declared one",
            )


def load_catalogue(path: Path) -> Catalogue:
    spec, text, digest = load_policy(path, CatalogueFile, schema=SCHEMA, what="reason catalogue")
    _each_code_once([r.code for r in spec.reasons], path, text)
    _rules_name_declared_codes(spec, path, text)
    return Catalogue(
        ref=ref(spec.policy, path, digest),
        reasons={r.code: r for r in spec.reasons},
        rules={r.rule: r for r in spec.rules},
    )


def require_code(
    catalogue: Catalogue, code: str, *, file: Path, text: str, loc: tuple[str | int, ...]
) -> None:
    """A policy or waiver file may only name codes the catalogue defines."""
    if code not in catalogue:
        raise PolicyError(
            f"unknown reason code '{code}'",
            file=file,
            key=".".join(str(p) for p in loc),
            line=find_line(text, loc),
            hint=catalogue.suggest(code),
        )


# The reason codes of `trace verify-bundle` (policy/bundle-reasons.toml): `<area>.<rule>`, one per
# integrity check. Declared like the catalogue above (a `[policy]` header, `[[reasons]]` with
# code, message and solution); a failed integrity check is never waivable and never dated, so they
# carry no `effective_on` or `waivable`.
BUNDLE_SCHEMA = "trace.bundle-reasons/v1"
BUNDLE_CODE_RE = r"^[a-z]+\.[a-z]+(-[a-z]+)*$"


class BundleReasonSpec(Strict):
    code: str = Field(pattern=BUNDLE_CODE_RE, description="stable machine code, `<area>.<rule>`")
    message: str = Field(min_length=1, description="what the failed check found, for a human")
    solution: str = Field(min_length=1, description="what to do about it")


class BundleCatalogueFile(Strict):
    policy: PolicyHeader
    reasons: list[BundleReasonSpec] = Field(min_length=1)


def load_bundle_catalogue(path: Path) -> dict[str, BundleReasonSpec]:
    """code -> declaration of verify-bundle's catalogue, or a PolicyError naming file and key."""
    what = "bundle reason catalogue"
    spec, text, _ = load_policy(path, BundleCatalogueFile, schema=BUNDLE_SCHEMA, what=what)
    _each_code_once([r.code for r in spec.reasons], path, text)
    return {r.code: r for r in spec.reasons}
