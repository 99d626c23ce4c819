"""Where the target failed, as the run records hold it: each failing invocation's full frame list
(symbolized, innermost first: `frames`, and a lifetime bug's `freed`/`allocated` stacks), not the
2,000-character stderr tail; an older record without frames falls back to the frames its tail
shows. Frames in a function the patch changes are marked `patched` (the hunk headers' function
names, the lines the hunks span, and the fault-site gate's `touched` frames)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel

from engine.report.diff import HUNK
from engine.report.lenient_json import as_dict, as_list, as_str
from engine.report.load import LoadedBundle

TAIL_FRAME = re.compile(r"^\s*#(\d+)\s+(0x\S+)\s+in\s+(\S+)\s*(.*)$")
SUMMARY = re.compile(r"^SUMMARY: (.*)$", re.MULTILINE)
IDENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")
PY_DEF = re.compile(r"\bdef\s+([A-Za-z_][A-Za-z0-9_]*)")
MAX_PICTURE = 14  # frames drawn in the fault-site picture (the table has them all)


class StackFrame(BaseModel):
    n: int
    function: str
    where: str
    patched: bool = False


class Stack(BaseModel):
    title: str
    frames: list[StackFrame]
    from_tail: bool = False  # read from the stderr tail (an older record): maybe cut

    @property
    def cut(self) -> bool:
        return self.from_tail and bool(self.frames) and self.frames[0].n != 0


class Patched(BaseModel):
    """What the patch changes: function names, and (file name, line) spans of the old file."""

    functions: set[str] = set()
    spans: list[tuple[str, int, int]] = []

    def marks(self, function: str, file: str, line: int | None) -> bool:
        if base_function(function) in self.functions:
            return True
        name = file.rsplit("/", 1)[-1]
        return line is not None and any(name == f and lo <= line <= hi for f, lo, hi in self.spans)


def base_function(name: str) -> str:
    """`ns::parse_key(char*)` and `parse_key.cold` -> parse_key."""
    name = name.split("(", 1)[0].rsplit("::", 1)[-1].rsplit(".", 1)[0]
    return name.strip()


def patched(b: LoadedBundle) -> Patched:
    out = Patched()
    for link in b.under("patches/"):
        file = ""
        for line in (link.text or "").splitlines():
            if line.startswith("--- "):
                file = line[4:].split("\t", 1)[0].rsplit("/", 1)[-1]
            m = HUNK.match(line)
            if not m:
                continue
            start, count = int(m.group(1)), int(m.group(2) or 1)
            out.spans.append((file, start, start + max(count - 1, 0)))
            header = line[m.end() :]
            found = PY_DEF.search(header) or IDENT.search(header)
            if found:
                out.functions.add(found.group(1))
    for link in b.under("gates/"):
        rec = as_dict(link.doc)
        if rec.get("gate") == "fault-site":
            for hit in as_list(as_dict(rec.get("details")).get("touched")):
                out.functions.add(base_function(as_str(hit).split(" ", 1)[0]))
    out.functions.discard("")
    return out


def _frame(n: int, f: dict[str, Any], marks: Patched) -> StackFrame:
    file, line = as_str(f.get("file")), f.get("line")
    ln = line if isinstance(line, int) and not isinstance(line, bool) else None
    where = f"{file}:{line}" if file and line is not None else file
    fn = as_str(f.get("function")) or "?"
    return StackFrame(n=n, function=fn, where=where, patched=marks.marks(fn, file, ln))


def tail_stacks(text: str, marks: Patched) -> list[Stack]:
    """Sanitizer frames (`#N 0xADDR in func file:line`) of an output tail, a stack per #0."""
    stacks: list[Stack] = []
    for line in text.splitlines():
        m = TAIL_FRAME.match(line)
        if not m:
            continue
        if not stacks or m.group(1) == "0":
            stacks.append(Stack(title="frames in the stderr tail", frames=[], from_tail=True))
        fn, where = m.group(3), m.group(4)
        file, _, num = where.rpartition(":")
        line_no = int(num.split(":")[0]) if num.split(":")[0].isdigit() else None
        stacks[-1].frames.append(
            StackFrame(
                n=int(m.group(1)),
                function=fn,
                where=where,
                patched=marks.marks(fn, file or where, line_no),
            )
        )
    return stacks


def invocation_stacks(inv: dict[str, Any], marks: Patched) -> list[Stack]:
    """The invocation's recorded stacks (full), else what its stderr tail shows."""
    lifetime = as_dict(inv.get("lifetime_frames"))
    recorded = (
        ("where it failed", inv.get("frames")),
        ("freed by", lifetime.get("freed")),
        ("previously allocated by", lifetime.get("allocated")),
    )
    out = []
    for title, value in recorded:
        frames = [as_dict(f) for f in as_list(value)]
        if frames:
            out.append(
                Stack(title=title, frames=[_frame(i, f, marks) for i, f in enumerate(frames)])
            )
    return out or tail_stacks(as_str(inv.get("stderr_tail")), marks)


def fault_stack(verify: dict[str, Any], marks: Patched) -> Stack | None:
    """The first failing pre-fix invocation's first stack: the fault-site picture."""
    for r in as_list(as_dict(verify.get("pre")).get("runs")):
        for inv in map(as_dict, as_list(as_dict(r).get("invocations"))):
            stacks = invocation_stacks(inv, marks)
            if stacks and stacks[0].frames:
                return stacks[0]
    return None
