"""A fix that special-cases the proof of concept: compares against a literal lifted from it.

The plausible wrong fix of issue 10 made the reproducer pass by recognising its input (the
exact length of the PoC's line, the PoC's string) and left the faulty code alone. From the
reproducer script and its data files this module collects what identifies the PoC:

* strings: each data file's whole content, each of its lines, each token (split at blanks and
  `= , : ;`), and the quoted strings of the reproducer script (without `$` expansions), at least
  `MIN_STRING` characters long;
* lengths: the size of each data file, of each line (with and without its newline) and of each
  token, when at least `MIN_LENGTH` (a small number such as 1 or 2 is not a fingerprint).

An added code line of a C, Python or shell file that compares (`==`, `!=`, `strcmp`/`memcmp`/
`strstr`, `in`, `startswith`, `case`, ...) against a string literal equal to such a string (or,
`MIN_SUBSTRING` characters or longer, part of the PoC's content), or tests equality (`==`, `!=`,
`case`) against an integer literal equal to such a length, is a finding. Only what the line
compares with is read: a bound (`klen >= 16`) is a check, not an equality with the PoC.
"""

from __future__ import annotations

import os
import re

from ._dataclasses import dataclass, field
from .diff import FileDiff, Patch
from .lang import Lang, classify, code_only, is_test_path, language
from .pocvalues import NUMBER, Field, data_fields, literals_in, notable, number_value, script_fields

MIN_STRING = 4
MIN_SUBSTRING = 8
MIN_LENGTH = 8
MAX_READ = 1 << 20

_TOKEN_SPLIT = re.compile(r"[\s=,:;]+")
_QUOTED = re.compile(r"'([^'\n]*)'|\"((?:[^\"\\\n]|\\.)*)\"")
_COMPARES = re.compile(
    r"==|!=|\s-(?:eq|ne)\s|\b(?:strn?cmp|strn?casecmp|memcmp|strstr|strcasestr|bcmp|case|in|startswith|"
    r"endswith|find|index|match|search|fullmatch)\b"
)
_EQUALS = re.compile(r"==|!=|\bcase\b|\s-(?:eq|ne)\s")
_INT = re.compile(r"(?<![\w.])(\d+)(?![\w.])")


@dataclass
class PocFacts:
    """What the PoC's inputs hold: strings, lengths, content and numeric values."""

    strings: set[str] = field(default_factory=set)
    lengths: set[int] = field(default_factory=set)
    content: list[str] = field(default_factory=list)
    values: dict[int, Field] = field(default_factory=dict)  # value -> its first field

    def add_fields(self, fields: list[Field]) -> None:
        for f in fields:
            self.values.setdefault(f.value, f)


def _add_text(facts: PocFacts, text: str) -> None:
    facts.content.append(text)
    if len(text.strip()) >= MIN_STRING:
        facts.strings.add(text.strip())
    if len(text) >= MIN_LENGTH:
        facts.lengths.add(len(text.encode("utf-8", "surrogateescape")))
    for line in text.splitlines(keepends=True):
        bare = line.rstrip("\r\n")
        for n in {len(line), len(bare)}:
            if n >= MIN_LENGTH:
                facts.lengths.add(n)
        if len(bare.strip()) >= MIN_STRING:
            facts.strings.add(bare.strip())
        for tok in _TOKEN_SPLIT.split(bare):
            if len(tok) >= MIN_STRING:
                facts.strings.add(tok)
            if len(tok) >= MIN_LENGTH:
                facts.lengths.add(len(tok))


def _files(path: str) -> list[str]:
    if os.path.isdir(path):
        return sorted(os.path.join(b, n) for b, _, names in os.walk(path) for n in names)
    return [path]


def collect(script: str | None, data: list[str]) -> PocFacts:
    """What identifies the PoC: the reproducer script's quoted strings, its data files."""
    facts = PocFacts()
    for top in data:
        for path in _files(top):
            with open(path, "rb") as fh:
                raw = fh.read(MAX_READ)
            _add_text(facts, raw.decode("utf-8", "surrogateescape"))
            facts.add_fields(data_fields(os.path.basename(path), raw))
    if script:
        with open(script, encoding="utf-8", errors="surrogateescape") as fh:
            text = fh.read(MAX_READ)
        facts.add_fields(script_fields(text))
        for m in _QUOTED.finditer(text):
            s = m.group(1) if m.group(1) is not None else m.group(2)
            if s is not None and "$" not in s and len(s) >= MIN_STRING:
                facts.strings.add(s)
                facts.content.append(s)
                if len(s) >= MIN_LENGTH:
                    facts.lengths.add(len(s))
    return facts


def _literals(text: str, kinds: str) -> list[str]:
    """The contents of the string literals on a line (quotes and a Python prefix dropped)."""
    out: list[str] = []
    k = 0
    while k < len(text):
        if kinds[k] != "s":
            k += 1
            continue
        j = k
        while j < len(text) and kinds[j] == "s":
            j += 1
        lit = text[k:j]
        q = lit[:3] if lit[:3] in ('"""', "'''") else lit[:1]
        body = lit[len(q) : len(lit) - len(q)] if lit.endswith(q) and len(lit) > len(q) else lit
        out.append(body.encode("latin-1", "backslashreplace").decode("unicode_escape", "replace"))
        k = j
    return out


_OPERAND = r"(-?\s*(?:0[xX][0-9a-fA-F]+|0[oO][0-7]+|0[bB][01]+|\d+)[uUlL]*)(?![\w.])"
_EQ_NUMBER = re.compile(
    r"(?:==|!=|\s-eq|\s-ne)\s*[\"']?"
    + _OPERAND
    + r"|(?<![\w.])"
    + _OPERAND
    + r"\s*(?:==|!=)|\bcase\s+"
    + _OPERAND
)
_NUMERIC = re.compile(r"\s*[-+]?\s*(?:0[xX][0-9a-fA-F]+|0[oO]?[0-7]+|\d+)\s*")


def compared_numbers(code: str) -> list[str]:
    """The integer literals a line of code tests equality with (`== 0x84`, `-45 !=`,
    `case 132:`), as spelled."""
    out = []
    for m in _EQ_NUMBER.finditer(code):
        spelling = next(g for g in m.groups() if g is not None)
        out.append(spelling.replace(" ", ""))
    return out


def nearby_values(f: FileDiff, lang: Lang) -> set[int]:
    """The integer literals of the unpatched code around the change: the file's context and
    removed lines in the patch."""
    out: set[int] = set()
    for h in f.hunks:
        for ln in h.lines:
            if ln.kind != "+":
                out |= literals_in(code_only(ln.text, lang))
    return out


def _value_hit(spellings: list[str], facts: PocFacts, nearby: set[int], what: str) -> str | None:
    for spelling in spellings:
        for v in number_value(spelling):
            if v in facts.values and notable(v, nearby):
                where = facts.values[v].where()
                return f"{what} {spelling} ({v}), a value of the reproducer's input ({where})"
    return None


def _string_hit(lit: str, facts: PocFacts, joined: str, nearby: set[int]) -> str | None:
    if len(lit) >= MIN_STRING and lit in facts.strings:
        return f"compares with {lit[:40]!r}, a string of the reproducer's input"
    if len(lit) >= MIN_SUBSTRING and lit in joined:
        return f"compares with {lit[:40]!r}, part of the reproducer's input"
    if _NUMERIC.fullmatch(lit) and NUMBER.search(lit):
        return _value_hit([lit.strip()], facts, nearby, "compares with the string")
    return None


def _line_hit(text: str, lang: Lang, facts: PocFacts, joined: str, nearby: set[int]) -> str | None:
    code = code_only(text, lang)
    if not _COMPARES.search(code):
        return None
    for lit in _literals(text, classify(text, lang)):
        hit = _string_hit(lit, facts, joined, nearby)
        if hit:
            return hit
    if not _EQUALS.search(code):
        return None
    for m in _INT.finditer(code):
        if int(m.group(1)) in facts.lengths:
            return f"tests equality with {m.group(1)}, a length of the reproducer's input"
    return _value_hit(compared_numbers(code), facts, nearby, "tests equality with")


def findings(series: Patch, facts: PocFacts) -> list[tuple[str, int | None, str]]:
    """(file, line, message) for each added line that compares against a PoC literal: a
    string, a length, or a value (pocvalues: a number of its text or a field of its binary
    data, unless `notable` rules it out)."""
    out: list[tuple[str, int | None, str]] = []
    if not facts.strings and not facts.lengths and not facts.values:
        return out
    joined = "\n".join(facts.content)
    for f in series.files:
        if f.new_path is None or f.binary or is_test_path(f.new_path):
            continue
        lang = language(f.new_path)
        if lang not in ("c", "python", "shell"):
            continue
        nearby = nearby_values(f, lang)
        for ln in f.added:
            hit = _line_hit(ln.text, lang, facts, joined, nearby)
            if hit:
                out.append((f.path, ln.new_no, hit))
    return out
