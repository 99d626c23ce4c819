"""The fault-site gate: does the patch touch a function on the pre-fix failing stack?

The pre-fix run records carry, per failing target invocation, the frames of its own sanitizer
report or Python traceback (innermost first; the harness's `faults.py`). The first K frames of
the package's own code count (K = `frames` in the signing policy's [gates.fault-site]; frames
without a source file, in the sanitizer runtime or in the reproducer's own code are skipped).
The patch touches a frame when it changes a line of that frame's function in the same file: the
function's extent is read from the unpatched source (`src`, the package's source tree or
tarball: from its definition above the frame's line to its closing `}` at column 0, or, in
Python, to the next line indented no deeper than its `def`); without the source, from the patch
alone (the nearest definition above the changed line in the hunk, else the hunk header's
section, as `git diff`/`diff -p` print it). Changing the frame's very line always counts.

A lifetime bug (heap-use-after-free, double-free) has three stacks, all of which count: the
access (the second free, the late read), where the memory was freed ("freed by thread T0 here:")
and where it was allocated (the harness's `lifetime_frames`): the real fix of a double free is
often at the first free.

* touched: passed; away from every stack: `fix-away-from-fault` (the patch makes the reproducer
  pass without changing the code that failed: a plausible wrong fix, e.g. a bigger constant);
* no stack at all (a wrong-output bug, a clean non-zero exit, a bare signal): not measurable,
  passed, no reason: the gate cannot say, and says so (details.summary).

Stdlib only: runs in the sandbox (`python3 -S -B -m trace_sandbox.gates.main fault-site OUT`).
"""

from __future__ import annotations

import functools
import json
import os
import re
import tarfile

from .applied import applied_policy, bound
from .diff import FileDiff, Hunk, parse_series
from .entry import driver_check, located
from .lang import definition_patterns
from .library_side import verdict
from .oracle import invocation_failed

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

DEFAULT_FRAMES = 5
RUNTIME = ("__interceptor_", "__asan", "__ubsan", "__sanitizer", "__libc_", "_start")
C_DEF = re.compile(r"^(?:[A-Za-z_][\w\s\*]*?[\s\*])?([A-Za-z_]\w*)\s*\([^;]*$")
PY_DEF = re.compile(r"^(\s*)(?:async\s+)?def\s+(\w+)")
NOT_FUNCTIONS = {"if", "while", "for", "switch", "return", "sizeof", "else"}


def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="surrogateescape") as fh:
        return fh.read()


def base_function(name: str) -> str:
    """`ns::Parser::parse(int)` -> `parse`; `parse_line` -> `parse_line`."""
    return name.split("(", 1)[0].rsplit("::", 1)[-1].rsplit(".", 1)[-1]


def definition(text: str) -> tuple[int, str] | None:
    """(indent, name) when the line starts a function definition (C-like or Python)."""
    m = PY_DEF.match(text)
    if m:
        return len(m.group(1)), m.group(2)
    if text[:1].isspace() or text.startswith(("#", "/", "*", "}")):
        return None
    m = C_DEF.match(text)
    if m and m.group(1) not in NOT_FUNCTIONS:
        return 0, m.group(1)
    return None


def _indent(text: str) -> int:
    return len(text) - len(text.lstrip())


def touched(hunk: Hunk) -> tuple[set[str], set[int]]:
    """The functions the hunk's changed lines lie in, and the old-file lines it changes (a '+'
    line is placed at the old line it is inserted before)."""
    functions: set[str] = set()
    lines: set[int] = set()
    defs: list[tuple[int, str]] = []
    prev_old = hunk.old_start - 1
    for ln in hunk.lines:
        if ln.kind != "+" and ln.old_no is not None:
            prev_old = ln.old_no
        if ln.kind != " ":
            lines.add(prev_old if ln.kind == "-" else prev_old + 1)
            enclosing = [name for indent, name in defs if indent < max(_indent(ln.text), 1)]
            if enclosing:
                functions.add(enclosing[-1])
            elif hunk.section:
                found = definition(hunk.section.strip())
                if found:
                    functions.add(found[1])
        if ln.kind != "+":
            found = definition(ln.text)
            if found:
                defs.append(found)
    return functions, lines


def same_file(frame_file: str, patch_path: str) -> bool:
    """The frame's file is the patched one: the paths end alike, by components: the file name,
    and its folder too where both name one (`src/pkg/x.py` is what the build installed as
    `<target>/lib/python3.11/site-packages/pkg/x.py`; a source layout is not an install's)."""
    a = [p for p in frame_file.split("/") if p not in ("", ".")]
    b = [p for p in patch_path.split("/") if p not in ("", ".")]
    common = 0
    while common < min(len(a), len(b)) and a[-1 - common] == b[-1 - common]:
        common += 1
    return common > 0 and common >= min(2, len(a), len(b))


def own_frames(frames: list[dict[str, Any]], k: int) -> list[dict[str, Any]]:
    """The first k frames of the package's own code."""
    kept = []
    for f in frames:
        file, fn = f.get("file"), str(f.get("function") or "")
        if not file or fn.startswith(RUNTIME) or str(file).startswith(("<work>", "<string>")):
            continue
        if str(file).startswith("/nix/store/"):
            continue
        # a Python frame is the package's own only under the package (`<target>/…`): the
        # interpreter's library (/usr/lib/python3.x/…) would push the package's frames past k
        if str(file).endswith(".py") and not str(file).startswith("<target>/"):
            continue
        kept.append(f)
    return kept[:k]


def stacks(records: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The failing stacks of the first pre-fix run (runs of one side agree, or it is flaky):
    per failing invocation its access stack, then a lifetime bug's "freed by" and "previously
    allocated by" stacks (a double free is fixed at either free; a use after free where the
    memory is freed too early, or allocated in the wrong owner)."""
    found = []
    for r in records[:1]:
        for i in r.get("invocations") or []:
            if not invocation_failed(i):
                continue
            lifetime = i.get("lifetime_frames") or {}
            for s in (i.get("frames"), lifetime.get("freed"), lifetime.get("allocated")):
                if s:
                    found.append(list(s))
    return found


def source_tree(src: str | None, tmp: str) -> str | None:
    """The unpacked source: `src` itself when a directory, else its tarball unpacked."""
    if not src or not os.path.exists(src):
        return None
    if os.path.isdir(src):
        return src
    dest = os.path.join(tmp, "trace-fault-site-src")
    try:
        with tarfile.open(src) as tf:
            if hasattr(tarfile, "data_filter"):
                tf.extractall(dest, filter="data")
            else:  # an older python: members are checked below the destination by hand
                safe = [m for m in tf.getmembers() if m.isfile() or m.isdir()]
                safe = [m for m in safe if not m.name.startswith("/") and ".." not in m.name]
                tf.extractall(dest, members=safe)
    except (tarfile.TarError, OSError):
        return None
    entries = os.listdir(dest)
    one = os.path.join(dest, entries[0]) if len(entries) == 1 else dest
    return one if os.path.isdir(one) else dest


def source_lines(root: str | None, path: str) -> list[str] | None:
    if root is None:
        return None
    best: tuple[int, str] | None = None
    for d, _dirs, names in os.walk(root):
        for n in names:
            full = os.path.join(d, n)
            rel = os.path.relpath(full, root)
            if same_file(rel, path) and (best is None or len(rel) < best[0]):
                best = (len(rel), full)
    return _read(best[1]).splitlines() if best else None


def extent(lines: list[str], function: str, line: int) -> tuple[int, int] | None:
    """(first, last) 1-based lines of `function`, which contains `line`, in the source."""
    name = re.escape(base_function(function))
    py, c = definition_patterns(name)
    for start in range(min(line, len(lines)), 0, -1):
        text = lines[start - 1]
        m = py.match(text)
        if m:
            indent = len(m.group(1))
            end = start
            for k in range(start + 1, len(lines) + 1):
                body = lines[k - 1]
                if body.strip() and _indent(body) <= indent:
                    break
                end = k
            return start, max(end, line)
        if c.match(text):
            for k in range(start, len(lines) + 1):
                if lines[k - 1].startswith("}"):
                    return start, max(k, line)
            return start, len(lines)
    return None


def frame_touched(frame: dict[str, Any], files: list[FileDiff], root: str | None) -> bool:
    for fd in files:
        path = fd.old_path or fd.new_path
        if path is None or not same_file(str(frame["file"]), path):
            continue
        source = source_lines(root, path)
        span = (
            extent(source, str(frame.get("function")), int(frame["line"] or 0)) if source else None
        )
        for h in fd.hunks:
            functions, lines = touched(h)
            if frame.get("line") in lines:
                return True
            if span is not None and any(span[0] <= n <= span[1] for n in lines):
                return True
            if span is None and base_function(str(frame.get("function") or "")) in functions:
                return True
    return False


def _where(f: dict[str, Any]) -> str:
    return f"{f.get('function')} {f.get('file')}:{f.get('line')}"


def evaluate(cfg: dict[str, Any]) -> dict[str, Any]:
    """cfg: patches, pre (the pre-fix run steps' store paths), policy (K = thresholds.frames),
    src (the unpatched package's source, optional), advisory (the candidate's OSV file,
    optional: where the bug is, for the driver check), library_plan, library_build and library
    (the library-side plan, build and run steps, optional) with oracles (the candidate's
    [expect]): the driver check's library side (library_side.py)."""
    policy = applied_policy(cfg)
    k = bound(policy, "frames") or DEFAULT_FRAMES
    records = []
    for p in cfg.get("pre") or []:
        with open(os.path.join(p, "outcome.json"), encoding="utf-8") as fh:
            records.append(json.load(fh))
    records.sort(key=lambda r: int(r.get("run", 0)))
    files = parse_series([_read(p) for p in cfg["patches"]]).files
    found = [own_frames(s, k) for s in stacks(records)]
    found = [s for s in found if s]
    details: dict[str, Any] = {"policy": policy, "frames_considered": k}
    tree = functools.cache(lambda: source_tree(cfg.get("src"), os.environ.get("TMPDIR", "/tmp")))
    stack_files = [str(f["file"]) for s in found for f in s]
    driver, details["driver"] = driver_check(
        files,
        lambda: located(stack_files, cfg.get("advisory"), tree()),
        lambda path: source_lines(tree(), path),
        same_file,
        (lambda: _library(cfg)) if cfg.get("library_build") else None,
    )
    site = _site(found, files, tree() if found else None, k, details)
    if driver:
        details["summary"] = details["driver"]["summary"] + "; " + details["summary"]
        return _record(False, True, driver + site, details)
    return _record(not site, bool(found), site, details)


def _library(cfg: dict[str, Any]) -> tuple[list[str], str, str]:
    """The library side's verdict from its plan, its build and its run records."""
    from .expectation import load

    oracles = cfg.get("oracles") or {}
    oracles = json.loads(oracles) if isinstance(oracles, str) else oracles
    plan = cfg.get("library_plan")
    records = load(list(cfg.get("library") or []), "pre")
    return verdict(str(plan) if plan else None, str(cfg["library_build"]), records, oracles)


def _site(
    found: list[list[dict[str, Any]]],
    files: list[FileDiff],
    root: str | None,
    k: int,
    details: dict[str, Any],
) -> list[str]:
    """The stacks against the patch: [] or ["fix-away-from-fault"]; the summary in details."""
    if not found:
        details["summary"] = (
            "not measurable: the pre-fix failure left no stack of the package's own code (a "
            "wrong output, a clean non-zero exit or a bare signal)"
        )
        return []
    details["source"] = "read" if root else "not available (function extents from the patch)"
    hits = [_where(f) for s in found for f in s if frame_touched(f, files, root)]
    details["stacks"] = [[_where(f) for f in s] for s in found]
    details["touched"] = hits
    if hits:
        details["summary"] = f"the patch changes {hits[0]} (on the failing stack)"
        return []
    details["summary"] = (
        f"the patch changes none of the first {k} frames of the failing stack"
        + ("s" if len(found) > 1 else "")
        + ": "
        + "; ".join(", ".join(_where(f) for f in s) for s in found)
    )
    return ["fix-away-from-fault"]


def _record(
    passed: bool, measurable: bool, reasons: list[str], details: dict[str, Any]
) -> dict[str, Any]:
    return {
        "schema": "trace.gate/v1",
        "gate": "fault-site",
        "passed": passed,
        "measurable": measurable,
        "score": None,
        "reasons": reasons,
        "details": details,
    }
