"""Redaction rules, applied to every text payload before it is hashed or stored.

The rules are data (`RULES`), versioned (`REDACTION_VERSION`) and written into every bundle as
`payload/redaction.json`, so a reviewer sees exactly what was removed and why. Each match is
replaced by `[REDACTED:<rule id>]`. Rules run in order; earlier, more specific rules win
(a JWT is reported as a JWT, not as a generic secret assignment). Binary payloads (not UTF-8) are
left alone and must not carry secrets.

What is redacted (the user-facing rules are in docs/evidence.md): every payload file's name
(`redact_path`: statement subjects and index.json never hold an unredacted name), every text
payload file (a JSON file value by value, so it stays the same JSON: `redact_entry`), the replay
record (payload/replay.json and the copy of it the statement is built from; its outcome pins are
digests of the *redacted* outcomes, `engine.evidence.replay.outcome_digest`, so the pins, the
bundled bytes and a replay's re-check all see the same bytes), and every other string that goes
into statement.json (candidate id, builder id, policy names). Digests are taken over the redacted
bytes only: the statement's subjects, the decision's evidence references and model.json's
`prompt_sha256` all name the bundled files.

The rules live in one data file, `trace_sandbox/harness/redaction-rules.json`, which the
sandbox harness reads too: it redacts a target's output before it cuts tails or keeps anything
(and, in a variant run, every piece of its PoC's secrets: trace_sandbox/harness/redaction.py),
so what reaches a bundle was never cut in the middle of a secret.

Rules (change a rule only together with a new `REDACTION_VERSION`):

| id                  | removes                                                                |
|---------------------|------------------------------------------------------------------------|
| private-key         | PEM private key blocks (`-----BEGIN … PRIVATE KEY-----` … `END …`)     |
| jwt                 | JSON Web Tokens (`eyJ….eyJ….sig`), e.g. OIDC identity tokens           |
| pem-body            | PEM bodies whose BEGIN line is gone (3+ lines of 64 base64 characters) |
| github-token        | GitHub tokens by prefix (`ghp_`, `gho_`, `ghu_`, `ghs_`, `ghr_`, …)    |
| api-token           | `glpat-`, `xox?-`, `sk-`, `AIza`, `npm_`, `pypi-` tokens by prefix     |
| aws-access-key      | AWS access key ids (`AKIA…`, `ASIA…`)                                  |
| bearer              | the credential after `Authorization: Bearer` / `Basic`                 |
| secret-assignment   | the value in `token=…`, `password: …`, `api_key = "…"` (8+ characters) |
| email               | e-mail addresses                                                       |
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from functools import cache, lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict

from engine.evidence.payload import PayloadEntry, canonical_json

REDACTION_VERSION = "trace.redaction/2"


class RedactionRule(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    description: str
    pattern: str
    keep_group: int = 0  # a capture group kept verbatim before the replacement (e.g. "token=")


class RedactionReport(BaseModel):
    """What a redaction pass did to one payload file: rule id -> number of replacements."""

    path: str
    counts: dict[str, int]


RULES_FILE = "trace_sandbox/harness/redaction-rules.json"  # under the data dir


def load_rules() -> tuple[RedactionRule, ...]:
    """The rules as data: one file that both this module and the sandbox harness read (the
    harness redacts a target's output before it cuts a tail off or keeps any of it)."""
    from engine.paths import data_dir

    doc = json.loads((data_dir() / RULES_FILE).read_text(encoding="utf-8"))
    return tuple(RedactionRule.model_validate(r) for r in doc["rules"])


RULES: tuple[RedactionRule, ...] = load_rules()


@cache
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


MEMO_CHARS = 4096  # strings up to this long are redacted once per process (keys, short values)
_MEMO_RULES = RULES  # the only rules the memo answers for


def redact_text(text: str, rules: tuple[RedactionRule, ...] = RULES) -> tuple[str, dict[str, int]]:
    if rules is not _MEMO_RULES or len(text) > MEMO_CHARS:
        return _redact_text(text, rules)
    out, counts = _redact_short(text)
    return out, dict(counts)


@lru_cache(maxsize=1 << 14)
def _redact_short(text: str) -> tuple[str, tuple[tuple[str, int], ...]]:
    """A bundle redacts the same short strings many times (JSON keys, step ids, statuses: a fork
    no-op with two candidates asks 27,000 times for 1,500 strings); the answer is a pure function
    of the text and the rules."""
    out, counts = _redact_text(text, _MEMO_RULES)  # keyed by the text alone: hashing the rules
    return out, tuple(counts.items())  # (pydantic models) on every call cost more than a hit


def _redact_text(text: str, rules: tuple[RedactionRule, ...]) -> tuple[str, dict[str, int]]:
    counts: dict[str, int] = {}
    for rule in rules:
        marker = f"[REDACTED:{rule.id}]"

        def repl(m: re.Match[str], rule: RedactionRule = rule, marker: str = marker) -> str:
            return (m.group(rule.keep_group) if rule.keep_group else "") + marker

        text, n = _compiled(rule.pattern).subn(repl, text)
        if n:
            counts[rule.id] = n
    return text, counts


def redact_path(path: str, rules: tuple[RedactionRule, ...] = RULES) -> tuple[str, dict[str, int]]:
    """A payload path with each name redacted (a secret used as a file name)."""
    counts: dict[str, int] = {}
    parts = []
    for part in path.split("/"):
        out, n = redact_text(part, rules)
        parts.append(out.replace("/", "_"))
        for rule_id, k in n.items():
            counts[rule_id] = counts.get(rule_id, 0) + k
    return "/".join(parts), counts


def redact_entry(
    entry: PayloadEntry, rules: tuple[RedactionRule, ...] = RULES
) -> tuple[PayloadEntry, RedactionReport]:
    """The entry's bytes redacted: JSON value by value (re-serialised canonically), other text
    as text; binary left alone. The path is `redact_path`'s business (names can collide)."""
    if not entry.is_text:
        return entry, RedactionReport(path=entry.path, counts={})
    if entry.media_type == "application/json":
        try:
            value = json.loads(entry.data)
        except ValueError:
            value = None
        else:
            redacted, counts = redact_value(value, rules)
            data = canonical_json(redacted) if counts else entry.data
            return entry.model_copy(update={"data": data}), RedactionReport(
                path=entry.path, counts=counts
            )
    text, counts = redact_text(entry.data.decode("utf-8"), rules)
    if not counts:
        return entry, RedactionReport(path=entry.path, counts={})
    return entry.model_copy(update={"data": text.encode("utf-8")}), RedactionReport(
        path=entry.path, counts=counts
    )


def rules_document(
    rules: tuple[RedactionRule, ...], reports: list[RedactionReport]
) -> dict[str, object]:
    """The `payload/redaction.json` content: the rules and what each file lost."""
    return {
        "version": REDACTION_VERSION,
        "replacement": "[REDACTED:<rule id>]",
        "rules": [r.model_dump() for r in rules],
        "applied": {r.path: r.counts for r in reports if r.counts},
    }


def redact_value(
    value: Any, rules: tuple[RedactionRule, ...] = RULES
) -> tuple[Any, dict[str, int]]:
    """A JSON-like value with every string (object keys included) redacted; rule id -> count."""
    counts: dict[str, int] = {}

    def text(s: str) -> str:
        out, n = redact_text(s, rules)
        for rule_id, k in n.items():
            counts[rule_id] = counts.get(rule_id, 0) + k
        return out

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            return text(v)
        if isinstance(v, dict):
            return {text(str(k)): b64(x) if k == "b64" else walk(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [walk(x) for x in v]
        return v

    def b64(v: Any) -> Any:
        """A run record's stdin (`{"b64": …}`): its text redacted, base64 again (binary stays)."""
        if not isinstance(v, str):
            return walk(v)
        try:
            raw = base64.b64decode(v, validate=True).decode("utf-8")
        except ValueError:
            return v
        out = text(raw)
        return v if out == raw else base64.b64encode(out.encode("utf-8")).decode()

    return walk(value), counts


def rules_digest(rules: tuple[RedactionRule, ...] = RULES) -> str:
    """sha256 of the rules as data (sorted-key JSON): what the statement pins for `redaction`."""
    doc = [r.model_dump() for r in rules]
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()
