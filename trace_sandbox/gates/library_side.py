"""The driver check's library side (issue 25): a patch that changes an entry file AND other files.

A wrong fix can filter the PoC in the driver (the program the reproducer runs, entry.py) and put
a plausible but ineffective change in the library beside it: every input trace runs goes through
the driver, so the behavioural gates see the real fix. The library side is the package built
with the patch's entry files' sections left out (the "library-only" series): the
`library-plan` step splits the series (templates/gates/library-plan.nix.j2), the `library-side`
step builds it (library-build.nix.j2) and the `library-side-run` step runs the reproducer
against it with the verify harness; the fault-site gate judges that run
with the expectation gate's pre-fix claim (the candidate's [expect]): when the library side
alone still misbehaves as [expect] says, the fix is in the driver: `library-side-still-fails`
(not waivable). When the library side does not build (its half needs the entry files' half: a
declaration or a definition only the driver has), nothing shows the fix is in the library:
`library-side-not-built` (not waivable; never "no claim", or a driver filter beside a library
half that cannot build alone would pass as the real fix).

* mixed: the patch changes an entry file and at least one other file that is not cosmetic
  (entry.entry_and_other_files); only then is the library side built and run. Otherwise the
  filter writes OUT/unmixed: the library-side step reuses the pre-fix build (a copy: nothing is
  compiled) and the run step writes a not-run record (no reproducer started);
* exempt: the advisory locates the bug in an entry file (a single-file program whose own code is
  at fault: the driver check claims nothing there, so nothing is built either);
* the split reads each patch's file sections with the regression gate's own splitter
  (testfiles.sections, the patch parser of diff.py): a section is kept or left out whole.

Stdlib only: runs in the sandbox (`... main library-patches OUTDIR`; `verdict` in the fault-site
gate).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable

from .entry import entry_and_other_files, located
from .expectation import judge_side
from .testfiles import Section, sections, source_tree

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# Written by the filter (the library-plan step) when the patch is not mixed: the library-side
# step copies the pre-fix build instead of building anything, its run writes a NOT_RUN record
# instead of starting the reproducer (templates/lib/harness.nix `skip`), and the fault-site gate
# claims nothing.
UNMIXED = "unmixed"
NOT_RUN = "trace.not-run/v1"
PLAN = "library.json"
Lines = Callable[[str], "list[str] | None"]


def exempt(entries: list[str], advisory: str | None, tree: str | None) -> list[str]:
    """The files the advisory locates the bug in (its files, the files defining a function it
    names) that are entry files: the driver check's exemption, known before any run."""
    from .faultsite import same_file

    where = located([], advisory, tree or None)
    bug = {f for k in ("advisory_files", "defining_files") for f in where[k]}
    return sorted(b for b in bug if any(same_file(b, e) for e in entries))


def library_series(texts: list[str], entries: list[str]) -> tuple[list[str], list[Section]]:
    """Each patch without the entry files' sections (text before a first file dropped), and the
    sections left out."""
    kept: list[str] = []
    dropped: list[Section] = []
    for i, text in enumerate(texts):
        parts = sections(text, i)
        kept.append("".join(s.text for s in parts if s.diff.path not in entries))
        dropped += [s for s in parts if s.diff.path in entries]
    return kept, dropped


def _tree_lines(root: str) -> Lines:
    def lines(path: str) -> list[str] | None:
        full = os.path.join(root, path)
        if not root or not os.path.isfile(full):
            return None
        with open(full, encoding="utf-8", errors="surrogateescape") as fh:
            return fh.read().splitlines()

    return lines


def write_library_patches(cfg: dict[str, Any], out: str) -> None:
    """cfg: patches (paths, in order), tree (the unpatched `src`), advisory (the OSV file,
    optional). Writes OUT/N.patch (patch N without its entry files' sections),
    OUT/library.json (entries, others, exempt, mixed, dropped) and OUT/unmixed when the patch is
    not mixed or is exempt (the library side is not built)."""
    texts = []
    for p in cfg["patches"]:
        with open(str(p), encoding="utf-8", errors="surrogateescape") as fh:
            texts.append(fh.read())
    parts = [s for i, t in enumerate(texts) for s in sections(t, i)]
    with tempfile.TemporaryDirectory() as scratch:
        tree = source_tree(str(cfg.get("tree") or ""), scratch)
        entries, others = entry_and_other_files([s.diff for s in parts], _tree_lines(tree))
        inside = exempt(entries, cfg.get("advisory"), tree) if entries and others else []
    kept, dropped = library_series(texts, entries)
    is_mixed = bool(entries and others and not inside)
    if not is_mixed:
        with open(os.path.join(out, UNMIXED), "w", encoding="utf-8") as fh:
            fh.write("not mixed (entry and other files) or exempt: nothing to build\n")
    for i, text in enumerate(kept):
        path = os.path.join(out, f"{i}.patch")
        with open(path, "w", encoding="utf-8", errors="surrogateescape") as fh:
            fh.write(text)
    doc = {
        "entries": entries,
        "others": others,
        "exempt": inside,
        "mixed": is_mixed,
        "dropped": [{"patch": s.patch, "file": s.diff.path} for s in dropped],
    }
    with open(os.path.join(out, PLAN), "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=2, sort_keys=True)


def verdict(
    plan: str | None, build: str | None, records: list[dict[str, Any]], oracles: dict[str, Any]
) -> tuple[list[str], str, str]:
    """(reasons, library_side state, summary) of the library side: its plan (the library-plan
    step's output, written by trace's code alone: `unmixed` there is the one sign that nothing
    was built or run; a marker in the build's output could be the package's own), its build and
    its reproducer runs, judged with the expectation gate's pre-fix claim under [expect]."""
    if plan is None or build is None:
        return [], "not built", "the library side is not built (no library-side steps): no claim"
    if os.path.exists(os.path.join(plan, UNMIXED)):
        return [], "not built", "the library-side plan found the patch not mixed: no claim"
    if os.path.exists(os.path.join(build, ".trace-build-failed")):
        # mixed (the plan wrote no `unmixed`): a library half that needs the entry program to
        # compile is what a driver filter beside a decoy looks like; "not measurable" never
        # clears a fix, so a fix that cannot be shown to be in the library is denied
        return (
            ["library-side-not-built"],
            "did not build",
            "the library side (the package with the entry files' changes left out) does not "
            "build: nothing shows the fix is in the library rather than the driver",
        )
    if not records or any(r.get("schema") == NOT_RUN for r in records):
        # the run skips on the plan's `unmixed` only, checked above: a mixed patch's run that did
        # not run is a broken pipeline, never "no claim"
        raise ValueError(
            f"{plan}: the plan says mixed but the library-side run did not run "
            "(check the library-side-run step's skip_if in graphs/gates.toml)"
        )
    row = judge_side("pre", records, oracles)
    if row["holds"]:
        return (
            ["library-side-still-fails"],
            "still fails",
            "the library side (the package with the entry files' changes left out) still "
            f"misbehaves on the PoC as [expect] says ({row['detail']}): the fix is in the driver",
        )
    why = f"{row['reason']}: {row['detail']}"
    return [], "fixed", f"the library side alone no longer misbehaves on the PoC ({why})"
