"""The mutation gate's condition operators (mutate.py): `negate`, the condition of an `if` or
`while` (C) or `if`/`elif`/`while` (Python) negated; `clause`, one top-level clause of such a
condition dropped (`a && b` becomes `a` and `b`; `and`/`or` in Python)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from .constant_op import Edit
from .lang import Lang


def matching_paren(code: str, open_at: int) -> int:
    depth = 0
    for k in range(open_at, len(code)):
        if code[k] == "(":
            depth += 1
        elif code[k] == ")":
            depth -= 1
            if depth == 0:
                return k
    return -1


def negate_edits(text: str, code: str, lang: Lang) -> Iterator[Edit]:
    if lang == "c":
        for m in re.finditer(r"\b(if|while)\s*\(", code):
            open_at = m.end() - 1
            close = matching_paren(code, open_at)
            if close < 0:
                continue
            cond = text[open_at + 1 : close]
            mutated = text[: open_at + 1] + "!(" + cond + ")" + text[close:]
            yield Edit("negate", open_at + 1, mutated, f"negate {m.group(1)} condition")
        return
    pm = re.match(r"^(\s*)(if|elif|while)\s+", code)
    if not pm:
        return
    m = pm
    depth = 0
    colon = -1
    for k in range(m.end(), len(code)):
        ch = code[k]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == ":" and depth == 0 and code[k + 1 : k + 2] != "=":
            colon = k
            break
    if colon < 0:
        return
    cond = text[m.end() : colon].rstrip()
    mutated = text[: m.end()] + "not (" + cond + ")" + text[m.end() + len(cond) :]
    yield Edit("negate", m.end(), mutated, f"negate {m.group(2)} condition")


def _split_clauses(code: str, lo: int, hi: int, lang: Lang) -> list[tuple[int, int]]:
    """Spans of the top-level clauses of the condition code[lo:hi] joined by &&/|| (C) or
    and/or (Python); with the operator spans between them, alternating clause, op, clause..."""
    ops = re.compile(r"&&|\|\|") if lang == "c" else re.compile(r"\b(?:and|or)\b")
    spans: list[tuple[int, int]] = []
    depth = 0
    start = lo
    k = lo
    while k < hi:
        ch = code[k]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0:
            m = ops.match(code, k)
            if m and (lang == "c" or (code[k - 1 : k] in (" ", ")") and code[m.end()] in " (")):
                spans.append((start, k))
                spans.append((k, m.end()))
                start = k = m.end()
                continue
        k += 1
    spans.append((start, hi))
    return spans


def clause_edits(text: str, code: str, lang: Lang) -> Iterator[Edit]:
    conds: list[tuple[int, int]] = []
    if lang == "c":
        for m in re.finditer(r"\b(?:if|while)\s*\(", code):
            close = matching_paren(code, m.end() - 1)
            if close > 0:
                conds.append((m.end(), close))
    else:
        pm = re.match(r"^\s*(?:if|elif|while)\s+", code)
        colon = code.rstrip().rfind(":")
        if pm and colon > pm.end():
            conds.append((pm.end(), colon))
    for lo, hi in conds:
        spans = _split_clauses(code, lo, hi, lang)
        clauses = spans[0::2]
        if len(clauses) < 2:
            continue
        for k, (a, b) in enumerate(clauses):
            keep = list(spans)
            # drop clause k with the operator before it (the one after it for the first)
            drop = [2 * k, 2 * k - 1] if k else [0, 1]
            kept = [keep[j] for j in range(len(keep)) if j not in drop]
            body = "".join(text[x:y] for x, y in kept).strip()
            lead = text[lo : lo + len(text[lo:hi]) - len(text[lo:hi].lstrip())]
            tail = text[lo:hi][len(text[lo:hi].rstrip()) :]
            mutated = text[:lo] + lead + body + tail + text[hi:]
            clause = " ".join(text[a:b].split())
            yield Edit("clause", a, mutated, f"drop clause '{clause}'")
