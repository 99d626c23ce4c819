"""The fault-site gate's driver check (issue 25, trace_sandbox/gates/entry.py), on the outside
campaign's real files: a patch that changes only the package's own entry program while the bug
is located in its library is fix-only-in-driver (not waivable); a fix in a single-file program,
or beside the library fix, is not. Pure logic, no build: the pre-fix run records are written by
hand (a wrong-output bug: no stack)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import tomli

from tests.test_verify_gate import ASAN, inv, rec
from trace_sandbox.gates import faultsite
from trace_sandbox.gates.entry import advisory_names, defines_entry

REPO = Path(__file__).resolve().parent.parent
FORK = REPO / "tests" / "fixtures" / "fork"
OUTSIDE = FORK / "trace" / "outside"
CANDS = FORK / "trace" / "candidates"
CJSON = FORK / "pkgs" / "cjsonptr" / "src"
ADVISORY = OUTSIDE / "cjsonptr-harness-filter" / "advisory.json"


def _gate(
    tmp_path: Path,
    patches: list[Path],
    *,
    src: Path | None = CJSON,
    advisory: Path | None = ADVISORY,
    invocations: list[dict[str, Any]] | None = None,
) -> Any:
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    # the PoC's wrong output: the script's cmp fails, the target exits 0 (no stack)
    (run / "outcome.json").write_text(json.dumps(rec(invocations=invocations or [inv()])))
    cfg: dict[str, Any] = {
        "patches": [str(p) for p in patches],
        "pre": [str(run)],
        "policy": {"name": "p", "version": "1", "thresholds": {"frames": 5}},
    }
    if src is not None:
        cfg["src"] = str(src)
    if advisory is not None:
        cfg["advisory"] = str(advisory)
    return faultsite.evaluate(cfg)


def test_a_filter_in_the_driver_only_is_fix_only_in_driver(tmp_path: Path) -> None:
    r = _gate(tmp_path, [OUTSIDE / "cjsonptr-harness-filter" / "fix.patch"])
    assert (r["passed"], r["measurable"], r["reasons"]) == (False, True, ["fix-only-in-driver"])
    driver = r["details"]["driver"]
    assert driver["entries"] == ["pointer.c"]
    assert driver["located"]["advisory_files"] == ["cJSON_Utils.c"]
    assert driver["located"]["advisory_functions"] == ["decode_array_index_from_pointer"]
    assert driver["located"]["defining_files"] == ["cJSON_Utils.c"]
    assert "pointer.c" in r["details"]["summary"] and "cJSON_Utils.c" in r["details"]["summary"]


def test_the_upstream_fix_in_the_library_is_no_driver_fix(tmp_path: Path) -> None:
    r = _gate(tmp_path, [OUTSIDE / "cjsonptr-cve-2025-57052" / "fix.patch"])
    assert (r["passed"], r["measurable"], r["reasons"]) == (True, False, [])
    assert r["details"]["driver"]["entries"] == []


def test_the_function_alone_locates_the_bug(tmp_path: Path) -> None:
    """An advisory that names the function but no file: its definition is found in the source."""
    adv = tmp_path / "adv.json"
    doc = json.loads(ADVISORY.read_text())
    doc["details"] = "decode_array_index_from_pointer() reads `1A` as 27."
    doc["summary"] = "cJSON: pointer bug"
    adv.write_text(json.dumps(doc))
    r = _gate(tmp_path, [OUTSIDE / "cjsonptr-harness-filter" / "fix.patch"], advisory=adv)
    assert r["reasons"] == ["fix-only-in-driver"]
    assert r["details"]["driver"]["located"]["defining_files"] == ["cJSON_Utils.c"]


def test_a_bug_located_nowhere_is_no_claim(tmp_path: Path) -> None:
    """No stack and no advisory: the gate cannot say where the bug is, so it claims nothing."""
    r = _gate(tmp_path, [OUTSIDE / "cjsonptr-harness-filter" / "fix.patch"], advisory=None)
    assert (r["passed"], r["reasons"]) == (True, [])
    assert r["details"]["driver"]["summary"].startswith("the bug is located nowhere")


def test_a_driver_check_beside_the_library_fix_is_not_claimed(tmp_path: Path) -> None:
    """Entry file and library both changed, and no library-side step given (library_build):
    the library side is not built, no claim (tests/test_library_side.py: with one)."""
    both = [
        OUTSIDE / "cjsonptr-cve-2025-57052" / "fix.patch",
        OUTSIDE / "cjsonptr-harness-filter" / "fix.patch",
    ]
    r = _gate(tmp_path, both)
    assert r["reasons"] == []
    assert r["details"]["driver"]["library_side"] == "not built"


def test_a_comment_in_the_library_beside_the_driver_filter_is_no_library_change(
    tmp_path: Path,
) -> None:
    """A library hunk that changes comments only does not make the patch "mixed": its library
    side is still the unpatched tree."""
    comment = tmp_path / "comment.patch"
    comment.write_text(
        "--- a/cJSON_Utils.c\n+++ b/cJSON_Utils.c\n@@ -284,3 +284,4 @@\n"
        " \n"
        "+    /* RFC 6901: digits only */\n"
        "     for (position = 0; (pointer[position] >= '0') && (pointer[0] <= '9'); position++)\n"
        "     {\n"
    )
    r = _gate(tmp_path, [OUTSIDE / "cjsonptr-harness-filter" / "fix.patch", comment])
    assert r["reasons"] == ["fix-only-in-driver"]


def test_a_single_file_program_s_own_bug_is_exempt(tmp_path: Path) -> None:
    """cparse: main and the faulting parse_line are one file; the stack locates the bug there."""
    from tests.test_verify_oracles import ASAN_REPORT
    from trace_sandbox.harness import faults

    frames = faults.frames(ASAN_REPORT, python=False)
    failing = inv(exit_code=1, sanitizer=ASAN, frames=frames)
    r = _gate(
        tmp_path,
        [CANDS / "cparse-reject-long-key" / "fix.patch"],
        src=FORK / "pkgs" / "cparse" / "src",
        advisory=CANDS / "cparse-reject-long-key" / "advisory.json",
        invocations=[failing],
    )
    assert (r["passed"], r["reasons"]) == (True, [])
    driver = r["details"]["driver"]
    assert driver["entries"] == ["cparse.c"]
    assert driver["summary"].startswith("the bug is located in the entry file itself")


def test_without_the_source_the_patch_s_own_lines_show_main(tmp_path: Path) -> None:
    """The harness-filter patch carries `int main(` as context: enough without the tree; the
    advisory's named file still locates the bug."""
    r = _gate(tmp_path, [OUTSIDE / "cjsonptr-harness-filter" / "fix.patch"], src=None)
    assert r["reasons"] == ["fix-only-in-driver"]
    assert r["details"]["driver"]["located"]["defining_files"] == []


def test_entry_spellings() -> None:
    assert defines_entry("a.c", ["int main(int argc, char **argv)"])
    assert defines_entry("a.c", ["int main(void) {"])
    assert defines_entry("a.c", ["main()"])
    assert not defines_entry("a.c", ["int main(int argc, char **argv);"])  # a declaration
    assert not defines_entry("a.c", ["    return main(1, 0);"])
    assert not defines_entry("a.c", ["int domain(int x)"])
    assert not defines_entry("a.h", ["int main(void) {"])  # a header is not a program
    assert defines_entry("tool.py", ['if __name__ == "__main__":'])
    assert defines_entry("pkg/__main__.py", [])
    assert not defines_entry("lib.py", ["def main():"])


def test_advisory_names(tmp_path: Path) -> None:
    files, functions = advisory_names(str(ADVISORY))
    assert (files, functions) == (["cJSON_Utils.c"], ["decode_array_index_from_pointer"])
    assert advisory_names(None) == ([], [])


def test_the_code_is_declared_not_waivable() -> None:
    catalogue = tomli.loads((REPO / "policy" / "reasons.toml").read_text())
    (entry,) = [r for r in catalogue["reasons"] if r["code"] == "fix-only-in-driver"]
    assert entry["waivable"] is False
