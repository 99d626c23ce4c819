"""The fault-site gate's driver check (issue 25): a fix in the package's own entry program only.

The reproducer reaches the library through a program the package builds (a C file that defines
`main`, a Python script run as `__main__`). A patch that only filters the PoC's input in that
program makes every input trace can run behave as the real fix, while the library keeps the bug
for every other caller: the entry program is part of the instrument, unless the bug is there.

* entry files: the patched files whose unpatched text (else the patch's own lines) defines a
  program's entry: a C/C++ `main` definition at column 0, a Python `if __name__ == "__main__":`
  (or a `__main__.py`);
* the bug's location: the files of the pre-fix failing stacks' own frames, the source files the
  advisory names (`cJSON_Utils.c`) and the files that define a function it names
  (`decode_array_index_from_pointer`, an identifier with an underscore or a call's `()`);
* the patch touches an entry file and the bug is located in one: exempt (a single-file program
  whose own code is at fault); located nowhere: no claim (the gate cannot say);
* the patch touches only entry files and the bug is located outside them: the library side (the
  post-fix tree with the entry files' hunks reverted) is the unpatched tree, which misbehaved on
  the PoC (the expectation gate's pre-fix claim): `fix-only-in-driver`, not waivable;
* the patch touches an entry file and other files (mixed): the library side is the package
  built with the entry files' sections left out (the `library-side` step, library_side.py) and
  the reproducer run against it (`library-side-run`); when it still misbehaves as [expect] says,
  `library-side-still-fails`, not waivable (details.library_side: "still fails"); when it does
  not build, `library-side-not-built`, not waivable ("did not build": nothing shows the fix is
  in the library); when it no longer misbehaves, no claim. A file whose hunks change only
  comments and whitespace is no other file (the library side is the unpatched tree).

Stdlib only: runs in the sandbox with the fault-site gate.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable

from .diff import FileDiff
from .lang import definition_patterns

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

C_MAIN = re.compile(r"^(?:[A-Za-z_][\w\s\*]*[\s\*])?main\s*\([^;]*$")
PY_MAIN = re.compile(r"""^if\s+__name__\s*==\s*['"]__main__['"]\s*:""")
C_SOURCES = (".c", ".cc", ".cpp", ".cxx", ".c++", ".m")
SOURCES = (*C_SOURCES, ".h", ".hh", ".hpp", ".hxx", ".inc", ".py")
NAMED_FILE = re.compile(r"(?<![\w/.-])([\w][\w./-]*\.(?:c|cc|cpp|cxx|h|hh|hpp|hxx|py))\b")
IDENT = re.compile(r"\b([A-Za-z_]\w{2,})\b(\s*\(\))?")
SameFile = Callable[[str, str], bool]
Lines = Callable[[str], "list[str] | None"]
# the library side's measurement: (reasons, state, summary) (library_side.verdict)
Library = Callable[[], tuple[list[str], str, str]]


def defines_entry(path: str, lines: Iterable[str]) -> bool:
    """The file's text defines a program's entry (C/C++ `main`, Python `__main__`)."""
    if path.endswith(".py"):
        return os.path.basename(path) == "__main__.py" or any(PY_MAIN.match(t) for t in lines)
    if not path.endswith(C_SOURCES):
        return False
    return any(C_MAIN.match(t) for t in lines)


def entry_files(files: list[FileDiff], source: Lines) -> list[str]:
    """The patched files that define a program's entry: by their unpatched text, else by the
    patch's own lines (context, removed and added)."""
    found = []
    for fd in files:
        text = source(fd.path) if fd.old_path is not None else None
        if text is None:
            text = [ln.text for h in fd.hunks for ln in h.lines]
        if defines_entry(fd.path, text):
            found.append(fd.path)
    return found


def advisory_names(advisory: str | None) -> tuple[list[str], list[str]]:
    """(files, functions) the advisory's summary and details name."""
    if not advisory or not os.path.isfile(advisory):
        return [], []
    with open(advisory, encoding="utf-8") as fh:
        doc = json.load(fh)
    text = " ".join(str(doc.get(k) or "") for k in ("summary", "details"))
    files = sorted(set(NAMED_FILE.findall(text)))
    bare = [m.group(1) for m in IDENT.finditer(text) if "_" in m.group(1) or m.group(2)]
    stems = {f.rsplit("/", 1)[-1].rsplit(".", 1)[0] for f in files}
    functions = sorted({n for n in bare if n not in stems and not n.startswith("__")})
    return files, functions


def _defines(lines: list[str], name: str) -> bool:
    py, c = definition_patterns(re.escape(name))
    return any(c.match(t) or py.match(t) for t in lines)


def defining_files(root: str | None, functions: list[str]) -> list[str]:
    """The source files (relative to root) that define one of the functions."""
    if root is None or not functions:
        return []
    found = []
    for d, _dirs, names in os.walk(root):
        for n in sorted(names):
            if not n.endswith(SOURCES):
                continue
            full = os.path.join(d, n)
            with open(full, encoding="utf-8", errors="surrogateescape") as fh:
                lines = fh.read().splitlines()
            if any(_defines(lines, f) for f in functions):
                found.append(os.path.relpath(full, root))
    return sorted(found)


def located(stack_files: list[str], advisory: str | None, root: str | None) -> dict[str, list[str]]:
    """Where the bug is: by the failing stacks, the advisory's files and its functions."""
    files, functions = advisory_names(advisory)
    return {
        "stack": sorted(set(stack_files)),
        "advisory_files": files,
        "advisory_functions": functions,
        "defining_files": defining_files(root, functions),
    }


def _code(lines: list[str], python: bool) -> str:
    """The lines' code without comments and whitespace (C `/* */` and `//`, Python `#`)."""
    text = "\n".join(lines)
    if python:
        text = re.sub(r"#[^\n]*", "", text)
    else:
        text = re.sub(r"//[^\n]*", "", re.sub(r"/\*.*?\*/", "", text, flags=re.S))
    return re.sub(r"\s+", "", text)


def cosmetic(fd: FileDiff) -> bool:
    """The file's hunks change comments and whitespace only: the library side is unchanged."""
    if fd.binary or fd.old_path is None or fd.new_path is None or not fd.path.endswith(SOURCES):
        return False
    python = fd.path.endswith(".py")
    for h in fd.hunks:
        old = [ln.text for ln in h.lines if ln.kind != "+"]
        new = [ln.text for ln in h.lines if ln.kind != "-"]
        if _code(old, python) != _code(new, python):
            return False
    return True


def entry_and_other_files(files: list[FileDiff], source: Lines) -> tuple[list[str], list[str]]:
    """(entry files, other files whose changes are not cosmetic) of the patch: both non-empty is
    a mixed patch, whose library side is built (library_side.py)."""
    entries = entry_files(files, source)
    others = [fd.path for fd in files if fd.path not in entries and not cosmetic(fd)]
    return entries, others


def driver_check(
    files: list[FileDiff],
    locate: Callable[[], dict[str, list[str]]],
    source: Lines,
    same_file: SameFile,
    library: Library | None = None,
) -> tuple[list[str], dict[str, Any]]:
    """(reasons, details): `fix-only-in-driver` when the patch changes only entry files and the
    bug is located outside them; with other files, `library`'s verdict on the library side."""
    entries, others = entry_and_other_files(files, source)
    details: dict[str, Any] = {"entries": entries}
    if not entries:
        details["summary"] = "the patch changes no program's entry file"
        return [], details
    where = locate()
    bug = sorted({f for k in ("stack", "advisory_files", "defining_files") for f in where[k]})
    details["located"] = where
    if not bug:
        details["summary"] = "the bug is located nowhere (no stack, no file or function named)"
        return [], details
    inside = [b for b in bug if any(same_file(b, e) for e in entries)]
    if inside:
        details["summary"] = f"the bug is located in the entry file itself ({inside[0]})"
        return [], details
    if others:
        reasons, details["library_side"], why = (
            library() if library else ([], "not built", "the library side is not built: no claim")
        )
        details["summary"] = (
            f"the patch changes the entry file {entries[0]} and {len(others)} other file(s): {why}"
        )
        return reasons, details
    details["library_side"] = "the unpatched tree (pre-fix-run)"
    details["summary"] = (
        f"the patch changes only the entry program ({', '.join(entries)}) while the bug is "
        f"located in {', '.join(bug)}: the library side is the unpatched tree, which misbehaved "
        "on the PoC (the expectation gate's pre-fix runs)"
    )
    return ["fix-only-in-driver"], details
