"""The package's tests as the unpatched tree has them: which files are tests, the patch series
without its test-file hunks, and how a patch weakens the tests it touches.

The regression gate runs the *base* tree's test suite against the post-fix build, so a patch
cannot pass by loosening the tests that judge it. `filter_series` leaves out every file section
of the series that touches a test file (split with the gate's own diff parser, engine/gates/
core/diff.py); the rest applies as before. `weakenings` reads what was left out: a deleted test
file, a removed or edited line of a test (a loosened comparison, an edited expected value or
golden file, a deleted assertion or test function), or an added line of a kind in WEAKENING
(`|| true`, `|| [ -z ...]`, skip markers, an early `exit 0`). Added lines otherwise are new
tests: welcome, never a finding.

Which files are tests: the conventions of lang.is_test_path (tests/, test_*.py, *_test.c, ...)
and every path of the unpatched tree that the package's checkPhase or installCheckPhase names
(a directory named there covers the files under it).
"""

from __future__ import annotations

import os
import re
import shlex

from ._dataclasses import dataclass
from .diff import DiffError, FileDiff, Hunk, parse
from .lang import is_test_path

# Added lines that weaken a test without removing one: (name, pattern, what it does).
WEAKENING: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("or-true", re.compile(r"\|\|\s*(?:true|:)\b"), "a failure made a success (`|| true`)"),
    (
        "or-empty",
        re.compile(r"\|\|\s*(?:\[\s*-z|test\s+-z|\[\s*-n|test\s+-n)"),
        "a comparison loosened (`|| [ -z ... ]`)",
    ),
    ("or-exit-0", re.compile(r"\|\|\s*exit\s+0\b"), "a failure exits 0"),
    ("exit-0", re.compile(r"^\s*exit\s+0\s*(?:;|$)"), "the test script exits 0 early"),
    ("exit-77", re.compile(r"\bexit\s+77\b|\breturn\s+77\s*;"), "the test is skipped (77)"),
    ("set-e-off", re.compile(r"\bset\s+\+e\b"), "errors no longer stop the test script"),
    (
        "py-skip",
        re.compile(
            r"pytest\.mark\.(?:skip|skipif|xfail)|unittest\.skip|\bpytest\.skip\s*\(|"
            r"\.skipTest\s*\(|raise\s+(?:unittest\.)?SkipTest"
        ),
        "a test is skipped",
    ),
    ("if-0", re.compile(r"^\s*#\s*if\s+0\b"), "test code compiled out (#if 0)"),
)


@dataclass(frozen=True)
class Section:
    """One file's part of one patch: its text and what the parser read from it."""

    patch: int
    text: str
    diff: FileDiff


def _starts(lines: list[str]) -> list[int]:
    """Line indexes where a file's section begins (`diff --git`, or a `--- ` header that is not
    already inside a `diff --git` header)."""
    starts: list[int] = []
    in_header = False
    for i, line in enumerate(lines):
        if line.startswith("diff --git ") or line.startswith("diff -"):
            starts.append(i)
            in_header = True
        elif line.startswith("@@"):
            in_header = False
        elif (
            line.startswith("--- ")
            and i + 1 < len(lines)
            and lines[i + 1].startswith("+++ ")
            and not in_header
        ):
            starts.append(i)
    return starts


def sections(text: str, patch: int = 0) -> list[Section]:
    """A patch split per file, each part parsed on its own (text before the first file, the
    commit message of a `git format-patch`, belongs to no file and is dropped)."""
    lines = text.splitlines(keepends=True)
    starts = _starts(lines)
    out: list[Section] = []
    for n, start in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        part = "".join(lines[start:end])
        parsed = parse(part, patch=patch).files
        if len(parsed) != 1:
            raise DiffError(f"expected one file in this part of patch {patch}", start + 1)
        out.append(Section(patch, part, parsed[0]))
    return out


def named_paths(scripts: list[str], tree: str) -> set[str]:
    """The paths of `tree` (the unpatched source) that the check scripts name; a directory
    stands for every file under it (as `dir/`)."""
    found: set[str] = set()
    for script in scripts:
        try:
            words = shlex.split(script, comments=True)
        except ValueError:
            words = script.split()
        for word in words:
            for token in re.split(r"[=;|&<>()`]", word):
                rel = os.path.normpath(token.strip("'\"")).removeprefix("./")
                if not rel or rel.startswith(("/", "..", "$")) or rel == ".":
                    continue
                full = os.path.join(tree, rel)
                if os.path.isfile(full):
                    found.add(rel)
                elif os.path.isdir(full):
                    found.add(rel.rstrip("/") + "/")
    return found


def is_test_file(path: str, named: set[str]) -> bool:
    if is_test_path(path) or path in named:
        return True
    return any(n.endswith("/") and path.startswith(n) for n in named)


def touches_tests(diff: FileDiff, named: set[str]) -> bool:
    paths = [p for p in (diff.old_path, diff.new_path) if p is not None]
    return any(is_test_file(p, named) for p in paths)


def filter_series(texts: list[str], named: set[str]) -> tuple[list[str], list[Section]]:
    """Each patch without its test files' sections, and the sections left out."""
    kept: list[str] = []
    dropped: list[Section] = []
    for i, text in enumerate(texts):
        parts = sections(text, i)
        kept.append("".join(s.text for s in parts if not touches_tests(s.diff, named)))
        dropped.extend(s for s in parts if touches_tests(s.diff, named))
    return kept, dropped


def _hunk_text(h: Hunk) -> str:
    head = f"@@ -{h.old_start},{h.old_count} +{h.new_start},{h.new_count} @@"
    return "\n".join([head] + [f"{ln.kind}{ln.text}" for ln in h.lines])


def _hunk_findings(path: str, h: Hunk) -> list[dict[str, object]]:
    found: list[dict[str, object]] = []
    if h.removed:
        first = h.removed[0]
        found.append(
            {
                "file": path,
                "line": first.old_no,
                "kind": "removed-or-edited",
                "message": f"{len(h.removed)} line(s) of a test removed or edited: "
                f"{first.text.strip()[:100]}",
            }
        )
    removed = {ln.text.strip() for ln in h.removed}
    for ln in h.added:
        if ln.text.strip() in removed:
            continue
        for name, rx, what in WEAKENING:
            if rx.search(ln.text):
                found.append(
                    {
                        "file": path,
                        "line": ln.new_no,
                        "kind": name,
                        "message": f"{what}: {ln.text.strip()[:100]}",
                    }
                )
    return found


def weakenings(dropped: list[Section]) -> list[dict[str, object]]:
    """What the left-out test sections weaken, each finding with its hunk(s)."""
    out: list[dict[str, object]] = []
    for s in dropped:
        d = s.diff
        if d.status == "deleted":
            out.append(
                {
                    "file": d.path,
                    "line": None,
                    "kind": "test-file-deleted",
                    "message": "test file deleted",
                    "hunk": "",
                }
            )
            continue
        for h in d.hunks:
            for f in _hunk_findings(d.path, h):
                out.append({**f, "hunk": _hunk_text(h)})
    return out


def source_tree(tree: str, scratch: str) -> str:
    """The unpacked source: `tree` itself, or a tarball's single top directory under scratch."""
    if not tree or os.path.isdir(tree):
        return tree
    import tarfile

    try:
        with tarfile.open(tree) as tar:
            # plain files and directories with safe names only (no links, no escapes)
            members = [
                m
                for m in tar.getmembers()
                if (m.isfile() or m.isdir())
                and not m.name.startswith("/")
                and ".." not in m.name.split("/")
            ]
            tar.extractall(scratch, members=members)
    except (tarfile.TarError, OSError):
        return ""
    entries = os.listdir(scratch)
    if len(entries) == 1 and os.path.isdir(os.path.join(scratch, entries[0])):
        return os.path.join(scratch, entries[0])
    return scratch


# Written beside the filtered series when it equals the candidate's series byte for byte (no
# section left out, no text before a first file dropped): the post-fix build tested with the base
# tests is then the very computation of the patched-tests build (the same patch bytes, the base
# package's checkPhase either way), whose result the tests-post-base step reuses
# (templates/gates/package-tests.nix.j2) instead of building and testing the package again.
IDENTICAL = "identical"


def write_base_test_patches(cfg: dict[str, object], out: str) -> None:
    """cfg: patches (paths, in order), tree (the unpatched `src`), scripts (the base package's
    checkPhase and installCheckPhase). Writes OUT/N.patch (patch N without its test files'
    sections; possibly empty, which `patch` applies as a no-op), OUT/tests.json, and
    OUT/identical when the filtered series is the candidate's byte for byte (IDENTICAL)."""
    import json
    import tempfile

    patches = [str(p) for p in cfg["patches"]]  # type: ignore[attr-defined]
    scripts = [str(s) for s in cfg.get("scripts") or []]  # type: ignore[attr-defined]
    texts: list[str] = []
    for p in patches:
        with open(p, encoding="utf-8", errors="surrogateescape") as fh:
            texts.append(fh.read())
    with tempfile.TemporaryDirectory() as scratch:
        named = named_paths(scripts, source_tree(str(cfg.get("tree") or ""), scratch))
    kept, dropped = filter_series(texts, named)
    if kept == texts:  # byte for byte: the base-tests build is the patched-tests build
        with open(os.path.join(out, IDENTICAL), "w", encoding="utf-8") as fh:
            fh.write("the filtered series is the candidate's, byte for byte\n")
    for i, text in enumerate(kept):
        with open(
            os.path.join(out, f"{i}.patch"), "w", encoding="utf-8", errors="surrogateescape"
        ) as fh:
            fh.write(text)
    doc = {
        "named": sorted(named),
        "dropped": [
            {"patch": s.patch, "file": s.diff.path, "status": s.diff.status} for s in dropped
        ],
        "weakened": weakenings(dropped),
    }
    with open(os.path.join(out, "tests.json"), "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1, sort_keys=True)
