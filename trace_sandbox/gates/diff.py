"""Parsing unified diffs (git or plain `diff -u`, any context size) into files, hunks and lines.

The canonical form trace hashes and shows is `git diff -U0 --no-color`: `canonical()` renders a
parsed patch that way (context dropped, hunks split at context). Every parsed line remembers its
index in the original text, so a mutant can be made by replacing one added line of the original
patch: the patch still applies with its own context.
"""

from __future__ import annotations

import re

from ._dataclasses import dataclass, field

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Literal

    LineKind = Literal["+", "-", " "]
    Status = Literal["modified", "added", "deleted", "renamed"]
else:  # plain strings at run time: the gates import no `typing` (a process's start-up)
    LineKind = Status = str

_HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")
_GIT_RE = re.compile(r"^diff --git (\S+) (\S+)$")


class DiffError(ValueError):
    """The text is not a unified diff this parser understands (with the 1-based line)."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line


@dataclass(frozen=True)
class Line:
    """A line of a hunk: its kind (+, - or context), text and line numbers."""

    kind: LineKind
    text: str
    old_no: int | None  # line number in the old file (for '-' and ' ')
    new_no: int | None  # line number in the new file (for '+' and ' ')
    index: int  # 0-based index of this line in the patch text


@dataclass
class Hunk:
    """One hunk of a file's diff: its ranges and lines."""

    old_start: int
    old_count: int
    new_start: int
    new_count: int
    section: str = ""
    lines: list[Line] = field(default_factory=list)

    @property
    def added(self) -> list[Line]:
        return [ln for ln in self.lines if ln.kind == "+"]

    @property
    def removed(self) -> list[Line]:
        return [ln for ln in self.lines if ln.kind == "-"]


@dataclass
class FileDiff:
    """One file's part of a patch: its old and new paths and its hunks."""

    old_path: str | None  # None for a new file
    new_path: str | None  # None for a deleted file
    hunks: list[Hunk] = field(default_factory=list)
    binary: bool = False
    patch: int = 0  # which patch (0-based) of a series this file came from

    @property
    def path(self) -> str:
        """The path the change is about: the new path, or the old one for a deletion."""
        return self.new_path or self.old_path or ""

    @property
    def status(self) -> Status:
        if self.old_path is None:
            return "added"
        if self.new_path is None:
            return "deleted"
        if self.old_path != self.new_path:
            return "renamed"
        return "modified"

    @property
    def added(self) -> list[Line]:
        return [ln for h in self.hunks for ln in h.added]

    @property
    def removed(self) -> list[Line]:
        return [ln for h in self.hunks for ln in h.removed]


@dataclass
class Patch:
    """A parsed patch series: every file's diff, in order."""

    files: list[FileDiff] = field(default_factory=list)

    @property
    def lines_added(self) -> int:
        return sum(len(f.added) for f in self.files)

    @property
    def lines_removed(self) -> int:
        return sum(len(f.removed) for f in self.files)

    @property
    def hunk_count(self) -> int:
        """Hunks in canonical (-U0) form: runs of changed lines without context between."""
        return sum(len(_u0_hunks(h)) for f in self.files for h in f.hunks)

    def summary(self) -> dict[str, int]:
        return {
            "files": len(self.files),
            "hunks": self.hunk_count,
            "lines_added": self.lines_added,
            "lines_removed": self.lines_removed,
        }


def _strip_path(raw: str, strip: int) -> str | None:
    path = raw.split("\t", 1)[0].strip()
    if path.startswith('"') and path.endswith('"'):
        path = path[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")
    if path == "/dev/null":
        return None
    parts = path.split("/")
    return "/".join(parts[strip:]) if len(parts) > strip else parts[-1]


def parse(text: str, *, strip: int = 1, patch: int = 0) -> Patch:
    """Parse a unified diff. `strip` removes leading path components like `patch -p1`."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    result = Patch()
    cur: FileDiff | None = None
    i = 0
    n = len(lines)
    while i < n:
        line = lines[i]
        m = _GIT_RE.match(line)
        if m:
            cur = FileDiff(_strip_path(m.group(1), strip), _strip_path(m.group(2), strip))
            cur.patch = patch
            result.files.append(cur)
            i += 1
            continue
        if cur is not None and not cur.hunks:
            if line.startswith("new file mode"):
                cur.old_path = None
            elif line.startswith("deleted file mode"):
                cur.new_path = None
            elif line.startswith("rename from "):
                cur.old_path = line[len("rename from ") :]
            elif line.startswith("rename to "):
                cur.new_path = line[len("rename to ") :]
            elif line.startswith(("Binary files ", "GIT binary patch")):
                cur.binary = True
        if line.startswith("--- ") and i + 1 < n and lines[i + 1].startswith("+++ "):
            old = _strip_path(line[4:], strip)
            new = _strip_path(lines[i + 1][4:], strip)
            if cur is None or cur.hunks or _is_plain_header(lines, i):
                cur = FileDiff(old, new)
                cur.patch = patch
                result.files.append(cur)
            else:
                cur.old_path, cur.new_path = old, new
            i += 2
            continue
        m = _HUNK_RE.match(line)
        if m:
            if cur is None:
                raise DiffError("hunk header before any file header", i + 1)
            hunk = Hunk(
                old_start=int(m.group(1)),
                old_count=int(m.group(2)) if m.group(2) is not None else 1,
                new_start=int(m.group(3)),
                new_count=int(m.group(4)) if m.group(4) is not None else 1,
                section=m.group(5).strip(),
            )
            i = _read_hunk(lines, i + 1, hunk)
            cur.hunks.append(hunk)
            continue
        i += 1
    return result


def _is_plain_header(lines: list[str], i: int) -> bool:
    """A `---`/`+++` pair not preceded by its own `diff --git` line starts a new file."""
    j = i - 1
    while j >= 0 and not lines[j].startswith(("diff --git ", "@@", "+", "-", " ")):
        j -= 1
    return j < 0 or not lines[j].startswith("diff --git ")


def _read_hunk(lines: list[str], i: int, hunk: Hunk) -> int:
    old_no, new_no = hunk.old_start, hunk.new_start
    old_left, new_left = hunk.old_count, hunk.new_count
    # In -U0 form an empty side starts *after* line N; the first real line would be N + 1.
    if hunk.old_count == 0:
        old_no += 1
    if hunk.new_count == 0:
        new_no += 1
    while i < len(lines) and (old_left > 0 or new_left > 0):
        line = lines[i]
        tag = line[:1]
        if tag == "\\":  # "\ No newline at end of file"
            i += 1
            continue
        if tag == "+":
            hunk.lines.append(Line("+", line[1:], None, new_no, i))
            new_no += 1
            new_left -= 1
        elif tag == "-":
            hunk.lines.append(Line("-", line[1:], old_no, None, i))
            old_no += 1
            old_left -= 1
        elif tag == " " or line == "":
            hunk.lines.append(Line(" ", line[1:], old_no, new_no, i))
            old_no += 1
            new_no += 1
            old_left -= 1
            new_left -= 1
        else:
            raise DiffError(f"unexpected line in hunk: {line[:40]!r}", i + 1)
        i += 1
    if old_left > 0 or new_left > 0:
        raise DiffError("hunk ends early (its header counts more lines)", i)
    while i < len(lines) and lines[i].startswith("\\"):
        i += 1
    return i


def parse_series(texts: list[str], *, strip: int = 1) -> Patch:
    """Several patches applied in order, as one list of file changes (in series order)."""
    out = Patch()
    for k, text in enumerate(texts):
        out.files.extend(parse(text, strip=strip, patch=k).files)
    return out


def _u0_hunks(hunk: Hunk) -> list[list[Line]]:
    runs: list[list[Line]] = []
    cur: list[Line] = []
    for ln in hunk.lines:
        if ln.kind == " ":
            if cur:
                runs.append(cur)
                cur = []
        else:
            cur.append(ln)
    if cur:
        runs.append(cur)
    return runs


def _range(start: int, count: int) -> str:
    return f"{start}" if count == 1 else f"{start},{count}"


def canonical(patch: Patch) -> str:
    """The patch as `git diff -U0 --no-color` would print it (without index lines)."""
    out: list[str] = []
    for f in patch.files:
        a = f"a/{f.old_path}" if f.old_path is not None else "/dev/null"
        b = f"b/{f.new_path}" if f.new_path is not None else "/dev/null"
        out.append(f"diff --git a/{f.old_path or f.new_path} b/{f.new_path or f.old_path}")
        if f.status == "added":
            out.append("new file mode 100644")
        elif f.status == "deleted":
            out.append("deleted file mode 100644")
        if f.binary:
            out.append(f"Binary files {a} and {b} differ")
            continue
        out.append(f"--- {a}")
        out.append(f"+++ {b}")
        for h in f.hunks:
            for run in _u0_hunks(h):
                rem = [ln for ln in run if ln.kind == "-"]
                add = [ln for ln in run if ln.kind == "+"]
                o_start = rem[0].old_no if rem else _before_old(h, run[0])
                n_start = add[0].new_no if add else _before_new(h, run[0])
                head = f"@@ -{_range(o_start or 0, len(rem))} +{_range(n_start or 0, len(add))} @@"
                out.append(head)
                out.extend("-" + ln.text for ln in rem)
                out.extend("+" + ln.text for ln in add)
    return "\n".join(out) + ("\n" if out else "")


def _before_old(h: Hunk, first: Line) -> int:
    """Old-side line after which a pure addition goes (git prints N for 'after line N')."""
    n = h.old_start - (0 if h.old_count else -1) - 1
    for ln in h.lines:
        if ln is first:
            break
        if ln.old_no is not None:
            n = ln.old_no
    return n


def _before_new(h: Hunk, first: Line) -> int:
    n = h.new_start - (0 if h.new_count else -1) - 1
    for ln in h.lines:
        if ln is first:
            break
        if ln.new_no is not None:
            n = ln.new_no
    return n
