"""Redaction in the sandbox, before anything of a target's output is cut, kept or hashed.

Stdlib only. The rules are trace's own (`redaction-rules.json` beside this module: the one file
engine/evidence/redact.py reads too), so the bundle's redaction pass finds nothing more to do
in what the harness kept (it is idempotent), and a tail never starts in the middle of a secret
that a rule would have matched whole (a PEM block whose BEGIN line the cut removed).

Variants of a PoC (the variants gate) mutate its data, secrets included: a PEM line with one
byte substituted is no longer a shape any rule knows. A variant run is therefore told which
inputs its variant was derived from (`taint`: the PoC's original data files, stdin and
arguments); every secret a rule finds in them is cut into FRAGMENT-character pieces, and any
piece found in the variant's output is redacted as `[REDACTED:secret-fragment]`. So no run
record keeps FRAGMENT or more consecutive characters of a secret of the PoC, however the
variant changed it.
"""

from __future__ import annotations

import base64
import json
import os
import re

TYPE_CHECKING = False  # typing only for the type checker (isolation.py)
if TYPE_CHECKING:
    from typing import Any

RULES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "redaction-rules.json")
FRAGMENT = 12  # characters: a piece of a PoC secret this long is redacted wherever it appears
FRAGMENT_ID = "secret-fragment"
_SPLIT = re.compile(r"\s+|\\n")  # a PEM body's lines, as printed or as a string literal


def load_rules(path: str = RULES_FILE) -> list[tuple[re.Pattern[str], int, str]]:
    with open(path, encoding="utf-8") as fh:
        doc = json.load(fh)
    return [
        (re.compile(r["pattern"]), int(r.get("keep_group") or 0), f"[REDACTED:{r['id']}]")
        for r in doc["rules"]
    ]


RULES = load_rules()


def redact(text: str, fragments: frozenset[str] = frozenset()) -> str:
    """The text with every rule applied in order (as engine.evidence.redact.redact_text), then
    every run of known secret fragments replaced."""
    for pattern, keep, marker in RULES:

        def repl(m: re.Match[str], k: int = keep, r: str = marker) -> str:
            return (m.group(k) if k else "") + r

        text = pattern.sub(repl, text)
    return redact_fragments(text, fragments)


def redact_fragments(text: str, fragments: frozenset[str]) -> str:
    if not fragments or len(text) < FRAGMENT:
        return text
    covered = bytearray(len(text))
    hit = False
    for i in range(len(text) - FRAGMENT + 1):
        if text[i : i + FRAGMENT] in fragments:
            covered[i : i + FRAGMENT] = b"\1" * FRAGMENT
            hit = True
    if not hit:
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        if covered[i]:
            while i < len(text) and covered[i]:
                i += 1
            out.append(f"[REDACTED:{FRAGMENT_ID}]")
        else:
            j = i
            while j < len(text) and not covered[j]:
                j += 1
            out.append(text[i:j])
            i = j
    return "".join(out)


def secret_fragments(texts: list[str]) -> frozenset[str]:
    """Every FRAGMENT-character piece of every secret the rules find in `texts` (whitespace
    and literal `\\n` split a secret into the pieces it is printed as)."""
    grams: set[str] = set()
    for text in texts:
        for pattern, keep, _ in RULES:
            for m in pattern.finditer(text):
                secret = m.group(0)[len(m.group(keep)) :] if keep else m.group(0)
                for piece in _SPLIT.split(secret):
                    grams.update(piece[i : i + FRAGMENT] for i in range(len(piece) - FRAGMENT + 1))
    return frozenset(grams)


# taint_fragments' answers, by what they were computed from (see there); a few at most
_TAINTS: dict[tuple[object, ...], frozenset[str]] = {}
TAINTS_KEPT = 16


def taint_fragments(path: str | None) -> frozenset[str]:
    """The fragments of the secrets in the inputs a variant was derived from: `path` is the
    variant plan's `poc.json` ({"files": [store paths], "stdin_b64": [...], "args": [...]}).

    Remembered in this process: every run of a batch (trace_sandbox/gates/variant_runs.py) is
    given the same poc.json, and its files were read and scanned by every rule once per run.
    The answer is kept under poc.json's text and each file's path and status (device, inode,
    size, mtime and ctime: a file written since, or replaced, is read again)."""
    if not path or not os.path.isfile(path):
        return frozenset()
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    doc = json.loads(text)
    files = [f for f in doc.get("files") or [] if os.path.isfile(f)]
    key = (text, *(_status(f) for f in files))
    found = _TAINTS.get(key)
    if found is None:
        found = _fragments_of(doc, files)
        if len(_TAINTS) >= TAINTS_KEPT:
            _TAINTS.clear()
        _TAINTS[key] = found
    return found


def _status(path: str) -> tuple[object, ...]:
    st = os.stat(path)
    return (path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _fragments_of(doc: dict[str, Any], files: list[str]) -> frozenset[str]:
    texts = [str(a) for a in doc.get("args") or []]
    for raw in doc.get("stdin_b64") or []:
        texts.append(base64.b64decode(raw).decode("utf-8", "replace"))
    for f in files:
        with open(f, "rb") as fh:
            texts.append(fh.read().decode("utf-8", "replace"))
    return secret_fragments(texts)
