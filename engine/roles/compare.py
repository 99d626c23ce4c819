"""The accuracy comparison: the model's patch against the human/upstream fix, both verified
against the same reproducer. What each touches (files, functions from the hunk headers, changed
lines of the original), their overlap, and a short diff between the two patches."""

from __future__ import annotations

import difflib
import re

from pydantic import BaseModel, ConfigDict, Field

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@ ?(.*)$")
_FILE = re.compile(r"^\+\+\+ (?:b/)?(\S+)")
_FUNC = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")


class Touched(BaseModel):
    model_config = ConfigDict(frozen=True)

    files: list[str]
    functions: list[str] = Field(description="from the hunk headers' context (as git shows it)")
    lines: dict[str, list[int]] = Field(description="file -> lines of the original it changes")
    added: int
    removed: int


class Comparison(BaseModel):
    model_config = ConfigDict(frozen=True)

    schema_: str = Field(default="trace.accuracy/v1", alias="schema")
    summary: str = Field(description="one line for tables and reports")
    model_verdict: bool | None
    upstream_verdict: bool | None
    model: Touched
    upstream: Touched
    model_reasons: list[str] = Field(
        default_factory=list, description="why the model's patch failed verify (its gates' codes)"
    )
    upstream_reasons: list[str] = Field(default_factory=list)
    same_files: bool
    line_overlap: float = Field(description="shared changed lines / all changed lines (Jaccard)")
    identical: bool = Field(
        description="the two post-fix source trees are byte-identical (never judged from text)"
    )
    behaviour: str | None = Field(
        default=None,
        description="the differential gate's finding on the model's patch against the upstream "
        "fix, input by input (None: not measured)",
    )
    diff: str = Field(description="a short unified diff from the upstream patch to the model's")


def touched(patch: str) -> Touched:
    files: list[str] = []
    funcs: list[str] = []
    lines: dict[str, set[int]] = {}
    added = removed = 0
    current = ""
    old_line = 0
    replacing = False  # a '+' right after '-' lines replaces them: no further original line
    for raw in patch.splitlines():
        if m := _FILE.match(raw):
            current = m.group(1)
            files.append(current)
            lines.setdefault(current, set())
        elif m := _HUNK.match(raw):
            old_line = int(m.group(1))
            replacing = False
            if (fm := _FUNC.search(m.group(3))) and fm.group(1) not in funcs:
                funcs.append(fm.group(1))
        elif raw.startswith("-") and not raw.startswith("---"):
            removed += 1
            lines[current].add(old_line)
            old_line += 1
            replacing = True
        elif raw.startswith("+") and not raw.startswith("+++"):
            added += 1
            if not replacing:  # an insertion is placed before this original line
                lines[current].add(old_line)
        elif raw.startswith(" "):
            old_line += 1
            replacing = False
    return Touched(
        files=files,
        functions=funcs,
        lines={f: sorted(v) for f, v in lines.items()},
        added=added,
        removed=removed,
    )


class Verdicts(BaseModel):
    """What was measured beside the text: each side's verify verdict and reasons, whether the
    post-fix trees are byte-identical (None: unknown), the differential gate's summary."""

    model_config = ConfigDict(frozen=True)

    model_ok: bool | None = None
    upstream_ok: bool | None = None
    model_reasons: list[str] = Field(default_factory=list)
    upstream_reasons: list[str] = Field(default_factory=list)
    same_tree: bool | None = None
    behaviour: str | None = None


def compare(model_patch: str, upstream_patch: str, v: Verdicts) -> Comparison:
    m, u = touched(model_patch), touched(upstream_patch)
    ml = {(f, n) for f, ns in m.lines.items() for n in ns}
    ul = {(f, n) for f, ns in u.lines.items() for n in ns}
    union = ml | ul
    short = list(
        difflib.unified_diff(
            upstream_patch.splitlines(), model_patch.splitlines(), "upstream", "model", lineterm=""
        )
    )
    identical = v.same_tree is True
    overlap = round(len(ml & ul) / len(union), 3) if union else 1.0
    summary = f"model {_said(v.model_ok, v.model_reasons)}, "
    summary += f"upstream {_said(v.upstream_ok, v.upstream_reasons)}; "
    summary += "identical post-fix trees" if identical else f"line overlap {overlap:g}"
    if v.behaviour:
        summary += f"; behaviour: {v.behaviour}"
    return Comparison(
        summary=summary,
        model_verdict=v.model_ok,
        upstream_verdict=v.upstream_ok,
        model_reasons=v.model_reasons,
        upstream_reasons=v.upstream_reasons,
        behaviour=v.behaviour,
        model=m,
        upstream=u,
        same_files=sorted(m.files) == sorted(u.files),
        line_overlap=overlap,
        identical=identical,
        diff="\n".join(short[:60]) + ("\n…" if len(short) > 60 else ""),
    )


def _said(ok: bool | None, reasons: list[str]) -> str:
    """A side's verdict as the gates gave it: 'passes', 'fails (code, code)', 'not verified'."""
    if ok is None:
        return "not verified"
    if ok:
        return "passes"
    return "fails" + (f" ({', '.join(reasons[:4])})" if reasons else "")


def where(t: object) -> str:
    """What a patch touches, in one line: `file:lines (functions)` per file."""
    d = t if isinstance(t, dict) else {}
    lines = d.get("lines")
    lines = lines if isinstance(lines, dict) else {}
    parts = [f"{f}:{','.join(str(n) for n in ns)}" for f, ns in sorted(lines.items())]
    funcs = d.get("functions") or []
    return " ".join(parts) + (f" ({', '.join(str(f) for f in funcs)})" if funcs else "")


def recorded_summary(doc: object, model_patch: str | None = None) -> list[str]:
    """A recorded comparison (accuracy.json) for tables: the verdicts and overlap, then what
    each patch touches; [] when there is none. Given the candidate's current `model_patch`, a
    comparison made of another patch says it is stale."""
    if not isinstance(doc, dict) or "summary" not in doc:
        return []
    if model_patch is not None and doc.get("model") != touched(model_patch).model_dump(mode="json"):
        return ["stale: made for another patch (draft again)"]
    return [
        str(doc["summary"]),
        f"model: {where(doc.get('model'))}",
        f"upstream: {where(doc.get('upstream'))}",
    ]
