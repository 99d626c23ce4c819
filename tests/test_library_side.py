"""The driver check's library side (issue 25, trace_sandbox/gates/library_side.py), pure logic on
the outside campaign's real files: the patch split by file sections (the entry files' left out),
whether it is mixed (an entry file and a non-cosmetic other file), and the fault-site gate's
verdict on the library side's run, judged with the candidate's own [expect]. No build: the run
records are written by hand (cjson-pointer's output for `/rows/12` and `/rows/1A`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import tomli

from engine.candidate import load_candidate
from tests.test_verify_gate import inv, rec
from trace_sandbox.gates import faultsite
from trace_sandbox.gates.diff import parse
from trace_sandbox.gates.library_side import (
    NOT_RUN,
    PLAN,
    UNMIXED,
    library_series,
    verdict,
    write_library_patches,
)

REPO = Path(__file__).resolve().parent.parent
FORK = REPO / "tests" / "fixtures" / "fork"
OUTSIDE = FORK / "trace" / "outside"
CJSON = FORK / "pkgs" / "cjsonptr" / "src"
WRONG = OUTSIDE / "cjsonptr-driver-and-check"
RIGHT = OUTSIDE / "cjsonptr-library-and-message"
UNBUILDABLE = OUTSIDE / "cjsonptr-driver-and-unbuildable-library"
BUGGY = '/rows/12 = "r12"\n/rows/1A = "r27"\n'
FIXED = (OUTSIDE / "cjsonptr-cve-2025-57052" / "want.txt").read_text()


def oracles() -> dict[str, Any]:
    return load_candidate(WRONG / "candidate.toml").oracles()


def run_dir(tmp_path: Path, name: str, stdout: str) -> Path:
    """A library-side run's record: cjson-pointer doc.json poc.txt printing `stdout`."""
    d = tmp_path / name
    d.mkdir()
    i = inv(target="bin/cjson-pointer", args=["doc.json", "poc.txt"], stdout=stdout)
    (d / "outcome.json").write_text(json.dumps(rec(invocations=[i])))
    return d


def split(tmp_path: Path, patch: Path) -> tuple[Path, dict[str, Any]]:
    out = tmp_path / "split"
    out.mkdir()
    write_library_patches({"patches": [str(patch)], "tree": str(CJSON)}, str(out))
    return out, json.loads((out / PLAN).read_text())


def test_a_mixed_patch_keeps_its_library_sections_only(tmp_path: Path) -> None:
    out, plan = split(tmp_path, WRONG / "fix.patch")
    assert (plan["entries"], plan["others"]) == (["pointer.c"], ["cJSON_Utils.c"])
    assert plan["mixed"] is True
    assert not (out / UNMIXED).exists()
    kept = parse((out / "0.patch").read_text()).files
    assert [f.path for f in kept] == ["cJSON_Utils.c"]
    assert "malformed" not in (out / "0.patch").read_text()
    assert "starts with a digit" in (out / "0.patch").read_text()


def test_the_entry_file_is_known_from_the_unpatched_tree(tmp_path: Path) -> None:
    """The correct mixed fix's pointer.c hunk shows no `main` (its context starts below it):
    the unpatched pointer.c does."""
    assert "int main" not in (RIGHT / "fix.patch").read_text()
    _, plan = split(tmp_path, RIGHT / "fix.patch")
    assert (plan["entries"], plan["mixed"]) == (["pointer.c"], True)
    assert plan["dropped"] == [{"patch": 0, "file": "pointer.c"}]


def test_patches_that_are_not_mixed_build_nothing(tmp_path: Path) -> None:
    comment = tmp_path / "comment.patch"
    comment.write_text(
        "--- a/cJSON_Utils.c\n+++ b/cJSON_Utils.c\n@@ -284,3 +284,4 @@\n \n"
        "+    /* RFC 6901: digits only */\n"
        "     for (position = 0; (pointer[position] >= '0') && (pointer[0] <= '9'); position++)\n"
        "     {\n"
    )
    driver = OUTSIDE / "cjsonptr-harness-filter" / "fix.patch"
    for n, patches in enumerate(
        [[OUTSIDE / "cjsonptr-cve-2025-57052" / "fix.patch"], [driver], [driver, comment]]
    ):
        out = tmp_path / str(n)
        out.mkdir()
        write_library_patches({"patches": [str(p) for p in patches], "tree": str(CJSON)}, str(out))
        assert (out / UNMIXED).exists(), patches
        assert json.loads((out / PLAN).read_text())["mixed"] is False


def test_a_series_is_split_per_patch() -> None:
    texts = [(WRONG / "fix.patch").read_text(), (RIGHT / "fix.patch").read_text()]
    kept, dropped = library_series(texts, ["pointer.c"])
    assert [[f.path for f in parse(t).files] for t in kept] == [["cJSON_Utils.c"]] * 2
    assert [(s.patch, s.diff.path) for s in dropped] == [(0, "pointer.c"), (1, "pointer.c")]
    assert library_series(texts, []) == ([t[t.index("--- a/") :] for t in texts], [])


def plan_dir(tmp_path: Path, patch: Path) -> Path:
    """The library-plan step's output for one patch (the filter run by hand)."""
    out = tmp_path / f"plan-{patch.parent.name}"
    out.mkdir()
    write_library_patches({"patches": [str(patch)], "tree": str(CJSON)}, str(out))
    return out


def test_the_verdict_on_the_library_side(tmp_path: Path) -> None:
    build = tmp_path / "build"
    build.mkdir()
    plan = str(plan_dir(tmp_path, WRONG / "fix.patch"))  # mixed
    still = [json.loads((run_dir(tmp_path, "still", BUGGY) / "outcome.json").read_text())]
    fixed = [json.loads((run_dir(tmp_path, "fixed", FIXED) / "outcome.json").read_text())]
    reasons, state, _ = verdict(plan, str(build), still, oracles())
    assert (reasons, state) == (["library-side-still-fails"], "still fails")
    assert verdict(plan, str(build), fixed, oracles())[:2] == ([], "fixed")
    assert verdict(plan, None, still, oracles())[:2] == ([], "not built")
    assert verdict(None, str(build), still, oracles())[:2] == ([], "not built")
    unmixed = str(plan_dir(tmp_path, OUTSIDE / "cjsonptr-cve-2025-57052" / "fix.patch"))
    assert verdict(unmixed, str(build), still, oracles())[:2] == ([], "not built")


def test_a_mixed_patch_whose_library_side_does_not_build_is_denied(tmp_path: Path) -> None:
    """A library half that does not build without the driver half (it reads a global the patch
    defines in pointer.c) shows nothing about the library: never "no claim", which let a driver
    filter pass for the fix. Whatever the run says (a failed build's run proves nothing)."""
    build = tmp_path / "build"
    build.mkdir()
    (build / ".trace-build-failed").write_text("2\n")
    plan = str(plan_dir(tmp_path, UNBUILDABLE / "fix.patch"))  # mixed
    assert json.loads((Path(plan) / PLAN).read_text())["mixed"] is True
    for stdout in (BUGGY, FIXED):
        run = json.loads(
            (run_dir(tmp_path, f"run-{len(stdout)}", stdout) / "outcome.json").read_text()
        )
        reasons, state, why = verdict(plan, str(build), [run], oracles())
        assert (reasons, state) == (["library-side-not-built"], "did not build")
        assert "does not build" in why and "no claim" not in why
    # not mixed: the step copied the pre-fix build; a marker there (the unpatched package's own
    # failure) is no claim about a library side that was never built
    unmixed = str(plan_dir(tmp_path, OUTSIDE / "cjsonptr-cve-2025-57052" / "fix.patch"))
    assert verdict(unmixed, str(build), [], oracles())[:2] == ([], "not built")


def test_a_mixed_patch_s_build_cannot_say_it_was_reused(tmp_path: Path) -> None:
    """`reused` in the build's output is a file the package's own install could write: only the
    plan (trace's filter, the patches as data) says whether the library side was built. A mixed
    patch whose library half installs `$out/reused` is judged all the same."""
    build = tmp_path / "build"
    build.mkdir()
    (build / "reused").write_text("/nix/store/...-cjsonptr\n")
    plan = str(plan_dir(tmp_path, WRONG / "fix.patch"))
    still = [json.loads((run_dir(tmp_path, "still", BUGGY) / "outcome.json").read_text())]
    assert verdict(plan, str(build), still, oracles())[:2] == (
        ["library-side-still-fails"],
        "still fails",
    )


def test_a_mixed_patch_s_run_that_did_not_run_is_an_error_not_no_claim(tmp_path: Path) -> None:
    build = tmp_path / "build"
    build.mkdir()
    plan = str(plan_dir(tmp_path, WRONG / "fix.patch"))
    not_run = {"schema": NOT_RUN, "run": 1, "not_run": "library-plan/unmixed exists"}
    for records in ([not_run], []):
        with pytest.raises(ValueError, match="the plan says mixed"):
            verdict(plan, str(build), records, oracles())


def _gate(tmp_path: Path, patch: Path, stdout: str, failed: bool = False) -> Any:
    pre = run_dir(tmp_path, "pre", BUGGY)
    build = tmp_path / "library-build"
    build.mkdir()
    if failed:
        (build / ".trace-build-failed").write_text("2\n")
    cfg: dict[str, Any] = {
        "library_plan": str(plan_dir(tmp_path, patch)),
        "patches": [str(patch)],
        "pre": [str(pre)],
        "policy": {"name": "p", "version": "1", "thresholds": {"frames": 5}},
        "src": str(CJSON),
        "advisory": str(WRONG / "advisory.json"),
        "library_build": str(build),
        "library": [str(run_dir(tmp_path, "library", stdout))],
        "oracles": json.dumps(oracles()),
    }
    return faultsite.evaluate(cfg)


def test_the_fault_site_gate_denies_a_library_side_that_still_fails(tmp_path: Path) -> None:
    r = _gate(tmp_path, WRONG / "fix.patch", BUGGY)
    assert (r["passed"], r["reasons"]) == (False, ["library-side-still-fails"])
    assert r["details"]["driver"]["library_side"] == "still fails"
    assert "the fix is in the driver" in r["details"]["summary"]


def test_the_fault_site_gate_passes_a_library_side_that_is_fixed(tmp_path: Path) -> None:
    r = _gate(tmp_path, RIGHT / "fix.patch", FIXED)
    assert r["reasons"] == []
    assert r["details"]["driver"]["library_side"] == "fixed"


def test_the_fault_site_gate_denies_a_library_side_that_does_not_build(tmp_path: Path) -> None:
    r = _gate(tmp_path, UNBUILDABLE / "fix.patch", FIXED, failed=True)
    assert (r["passed"], r["measurable"], r["reasons"]) == (False, True, ["library-side-not-built"])
    assert r["details"]["driver"]["library_side"] == "did not build"
    assert "nothing shows the fix is in the library" in r["details"]["summary"]


@pytest.mark.parametrize("code", ["library-side-still-fails", "library-side-not-built"])
def test_the_codes_are_declared_not_waivable(code: str) -> None:
    catalogue = tomli.loads((REPO / "policy" / "reasons.toml").read_text())
    (entry,) = [r for r in catalogue["reasons"] if r["code"] == code]
    assert entry["waivable"] is False


def test_a_bug_the_advisory_locates_in_the_entry_file_is_exempt(tmp_path: Path) -> None:
    """cparse-blind-asan-param changes cparse.c (which defines main) and the Makefile: mixed,
    but its advisory locates the bug in cparse.c itself (a single-file program), which the
    driver check exempts: nothing is built."""
    cand = FORK / "trace" / "candidates" / "cparse-blind-asan-param"
    out = tmp_path / "split"
    out.mkdir()
    cfg = {
        "patches": [str(cand / "fix.patch")],
        "tree": str(FORK / "pkgs" / "cparse" / "src"),
        "advisory": str(cand / "advisory.json"),
    }
    write_library_patches(cfg, str(out))
    plan = json.loads((out / PLAN).read_text())
    assert (plan["entries"], plan["others"]) == (["cparse.c"], ["Makefile"])
    assert (plan["exempt"], plan["mixed"]) == (["cparse.c"], False)
    assert (out / UNMIXED).exists()
    write_library_patches({**cfg, "advisory": None}, str(tmp_path))  # without the advisory
    assert json.loads((tmp_path / PLAN).read_text())["mixed"] is True
