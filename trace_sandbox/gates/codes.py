"""The gates' rules and the reason codes they emit.

A gate record's `reasons` are codes of the one catalogue, policy/reasons.toml (kebab-case,
stable). Each finding also names its finer `rule` (`<gate>.<rule>`, also stable), so a reviewer
sees *which* check was weakened. The rules are data of that same catalogue (`[[rules]]`: rule,
code, message, what to do); this module only reads them. A gate step gets the catalogue as its
`reasons` input (graphs/gates.toml), whose store path templates/lib/gate.nix puts in
TRACE_GATE_REASONS; outside the sandbox (a checkout, the tests) it is the checkout's
policy/reasons.toml. It is read on first use, so a step that emits no rule needs no catalogue.

In a gate step TRACE_GATE_REASONS names the catalogue's rule table as JSON (`rules.json`, the
same `[[rules]]` in the same order), made from the catalogue ONCE by a derivation every gate
step shares (templates/lib/gate.nix, `python3 -m trace_sandbox.gates.main rules-json`): parsing
TOML takes importing `tomllib`, which cost a gate interpreter more than the rest of its
start-up's imports (~10-20 ms each, every rule gate of every verify). A path ending in `.toml`
is read as the catalogue itself.
"""

from __future__ import annotations

import json
import os
from functools import cache

CATALOGUE_ENV = "TRACE_GATE_REASONS"
CHECKOUT_CATALOGUE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    "policy",
    "reasons.toml",
)


TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NamedTuple

    class Rule(NamedTuple):
        code: str  # the catalogue code the rule reports under
        message: str
        solution: str

else:  # the same class (typing.NamedTuple makes a collections.namedtuple) without `typing`
    from collections import namedtuple

    Rule = namedtuple("Rule", ("code", "message", "solution"))


def catalogue_path() -> str:
    return os.environ.get(CATALOGUE_ENV) or CHECKOUT_CATALOGUE


RULE_FIELDS = ("rule", "code", "message", "solution")


def read_rule_table(path: str) -> list[dict[str, str]]:
    """The catalogue's `[[rules]]` (each: rule, code, message, solution), in its order, from
    the catalogue itself (`.toml`) or from the rule table made of it (`rules.json`)."""
    try:
        if path.endswith(".json"):
            with open(path, encoding="utf-8") as f:
                table = json.load(f)
        else:
            import tomllib  # only here: a gate step reads the JSON table

            with open(path, "rb") as f:
                table = tomllib.load(f).get("rules", [])
    except (OSError, ValueError) as exc:  # TOMLDecodeError and JSONDecodeError are ValueErrors
        raise RuntimeError(
            f"the gates' rule catalogue {path} cannot be read ({exc}); a gate step that emits "
            f"rules needs the `reasons` input (graphs/gates.toml) in ${CATALOGUE_ENV}"
        ) from exc
    return [{k: str(r[k]) for k in RULE_FIELDS} for r in table]


def write_rule_table(catalogue: str, out: str) -> None:
    """`rules-json CATALOGUE OUT`: the catalogue's rule table as JSON (read_rule_table)."""
    with open(out, "w", encoding="utf-8") as f:
        json.dump(read_rule_table(catalogue), f, indent=1, sort_keys=True)
        f.write("\n")


@cache
def rules() -> dict[str, Rule]:
    """rule -> (code, message, solution), in the catalogue's order."""
    return {
        r["rule"]: Rule(r["code"], r["message"], r["solution"])
        for r in read_rule_table(catalogue_path())
    }


def codes() -> tuple[str, ...]:
    """The codes the rules report under, in the order a record lists them."""
    return tuple(dict.fromkeys(rule.code for rule in rules().values()))


def code_of(rule: str) -> str:
    """The catalogue code a rule reports under (a typo in a rule name fails loudly)."""
    table = rules()
    if rule not in table:
        raise KeyError(f"unknown gate rule {rule!r}")
    return table[rule].code


def gate_record(
    gate: str,
    fired: list[str],
    *,
    measurable: bool,
    score: float | None,
    details: dict[str, object],
) -> dict[str, object]:
    """THE trace.gate/v1 record of a rule-based gate: passed when no rule fired, its reasons the
    fired rules' catalogue codes (in catalogue order), the rules themselves in details.rules."""
    return {
        "schema": "trace.gate/v1",
        "gate": gate,
        "passed": not fired,
        "measurable": measurable,
        "score": score,
        "reasons": sorted({code_of(r) for r in fired}, key=codes().index),
        "details": {**details, "rules": list(fired)},
    }
