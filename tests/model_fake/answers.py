"""Canned model answers for the fixture fork's cparse bug (TRACE-2026-0001): a real fix, a
plausible wrong fix (a bigger buffer), a reproducer, reviews, and malformed answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "fork"
CPARSE = FIXTURE / "trace" / "candidates" / "cparse-key-overflow"
WRONG = FIXTURE / "trace" / "candidates" / "cparse-wrong-fix"

RATIONALE = (
    "parse_line() copies the key into a KEY_MAX-byte buffer without checking its length; "
    "the fix refuses keys of KEY_MAX bytes or more before the copy. SECRET-RATIONALE-MARKER"
)


def patch_answer(diff: str, rationale: str = RATIONALE) -> str:
    return f"Here is the fix.\n\n```diff\n{diff}```\n\n## Rationale\n\n{rationale}\n"


GOOD_PATCH = patch_answer((CPARSE / "fix.patch").read_text())
WRONG_PATCH = patch_answer((WRONG / "fix.patch").read_text(), "A larger buffer holds longer keys.")
NOT_APPLYING = patch_answer(
    "--- a/cparse.c\n+++ b/cparse.c\n@@ -30,3 +30,3 @@\n-    no such line here\n"
    "+    nor here\n     or here\n"
)
NO_DIFF = "I think the bug is in parse_line, you should check the key length.\n"

REPRO = (
    "```json\n"
    + json.dumps(
        {
            "script": (CPARSE / "repro.sh").read_text(),
            "data": {
                "long-key.conf": (CPARSE / "long-key.conf").read_text(),
                "boundary-key.conf": (CPARSE / "boundary-key.conf").read_text(),
            },
            "expect": {"sanitizer": "AddressSanitizer: heap-buffer-overflow", "exit_code": 1},
        }
    )
    + "\n```\n"
)
APPROVE = '```json\n{"verdict": "approve", "concerns": [], "summary": "bounds check added"}\n```'
REQUEST_CHANGES = json.dumps(
    {"verdict": "request-changes", "concerns": ["only moves the limit"], "summary": "no"}
)
NOT_JSON = '```json\n{"verdict": "approve", concerns: \n```'


def system_of(path: str, doc: dict[str, Any]) -> str:
    if path == "/v1/messages":
        return str(doc.get("system", ""))
    return str(doc["messages"][0]["content"])


def by_role(patcher: str, reproducer: str = REPRO, reviewer: str = APPROVE) -> Any:
    """An answerer for FakeModelServer that answers each role from its system prompt."""

    def answer(path: str, doc: dict[str, Any]) -> str:
        system = system_of(path, doc)
        if "the Patcher" in system:
            return patcher
        if "the Reproducer" in system:
            return reproducer
        if "the Reviewer" in system:
            return reviewer
        raise AssertionError(f"unknown role: {system[:80]}")

    return answer


def agent_toml(anthropic_url: str, openai_url: str, *, reviewer_backend: str = "openai") -> str:
    """An agent file: the Patcher and Reproducer on the Anthropic API, the Reviewer on an
    OpenAI-compatible endpoint (another family), both at the fake server."""
    rev_url = openai_url if reviewer_backend == "openai" else anthropic_url
    return f"""
version = 1
[models.drafter]
backend = "anthropic"
model = "claude-fake-1"
base_url = "{anthropic_url}"
api_key_env = "FAKE_MODEL_KEY"
deadline_s = 20
retries = 0
[models.critic]
backend = "{reviewer_backend}"
model = "gpt-fake-1"
family = "{"openai" if reviewer_backend == "openai" else "anthropic"}"
base_url = "{rev_url}"
api_key_env = "FAKE_MODEL_KEY"
parameters = {{ temperature = 0, seed = 3 }}
deadline_s = 20
retries = 0
[steps.patch]
role = "patcher"
model = "drafter"
template = "trace:templates/agent/patcher.md.j2"
needs = ["advisory", "upstream", "sources"]
[steps.repro]
role = "reproducer"
model = "drafter"
template = "trace:templates/agent/reproducer.md.j2"
needs = ["advisory", "sources"]
[steps.review]
role = "reviewer"
model = "critic"
template = "trace:templates/agent/reviewer.md.j2"
needs = ["advisory", "patch.diff", "verify"]
"""
