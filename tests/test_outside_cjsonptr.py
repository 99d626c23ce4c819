"""An outside campaign (issues 25 and 26): a real CVE, its real fix and wrong fixes that game
an instrument, verified once each with real builds (module fixture).

CVE-2025-57052 in cJSON 1.7.15's JSON pointer code (pkgs/cjsonptr: the upstream files from
Debian's orig tarball, byte for byte, and a small driver): `/rows/1A` names row 27. The real
fix is upstream commit 74e1ff4 (git format-patch, verbatim). Its candidates live in
tests/fixtures/fork/trace/outside/, beside the calibration table's (each costs more than the
table's 30-second budget per row on this machine: 1 to 5 minutes), and are judged here with the
discrimination column's rule: a wrong fix is denied by a failed claim or a non-waivable code,
and its verdict is not the real fix's nor a weaker one.

What the campaign found and fixed: the real fix was denied `variant-still-fails` for a leak
the driver has on its error path, pre-fix and post-fix alike (a truncated document), and the
wrong fix that refuses the PoC's letter by its code (`== 0x41`) was ALLOWed with no reason; a
fix in the driver (the reproducer's own program) instead of the library got the real fix's
verdict (`harness-filter`): now `fix-only-in-driver` (docs/gates.md, "An outside campaign").
"""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tomli

from engine.cli import main
from tests.verified import VerifiedFork

REPO = Path(__file__).resolve().parent.parent
OUTSIDE = "trace/outside"

pytestmark = pytest.mark.nix

REAL = "cjsonptr-cve-2025-57052"


@dataclass
class Verdicts:
    fork: Path
    decisions: dict[str, dict[str, Any]]

    def decide(self, name: str) -> dict[str, Any]:
        """`trace verify` then `trace decide` of one candidate (once per module)."""
        if name not in self.decisions:
            cand = str(self.fork / OUTSIDE / name / "candidate.toml")
            code, out = _trace("verify", cand, "--fork", str(self.fork), "-q")
            assert code in (0, 1), out
            code, out = _trace("decide", cand, "--state-dir", str(self.fork / ".trace"), "--json")
            assert code in (0, 1), out
            self.decisions[name] = json.loads(out)
        return self.decisions[name]


def _trace(*args: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue() + (err.getvalue() if code not in (0, 1) else "")


@pytest.fixture(scope="module")
def verdicts(verified_fork: VerifiedFork) -> Verdicts:
    """The session's one verified copy of the fork (tests/verified.py; the outside candidates
    are in it too): its load caches and state directory are shared with the calibration table,
    and this module only adds its own candidates' verifications and decisions."""
    return Verdicts(verified_fork.fork, {})


def codes(decision: dict[str, Any]) -> set[str]:
    return {r["code"] for r in decision["reasons"]}


def hard_codes() -> set[str]:
    catalogue = tomli.loads((REPO / "policy" / "reasons.toml").read_text())
    return {r["code"] for r in catalogue["reasons"] if not r.get("waivable", True)}


def assert_discriminated(wrong: dict[str, Any], real: dict[str, Any]) -> None:
    assert wrong["decision"] == "deny", wrong["reasons"]
    assert codes(wrong) & hard_codes(), f"denied only by waivable codes: {sorted(codes(wrong))}"
    assert not (wrong["decision"] == real["decision"] and codes(wrong) <= codes(real))


def test_the_real_fix_goes_to_a_reviewer_for_its_possibly_equivalent_mutants(
    verdicts: Verdicts,
) -> None:
    """No false variant-still-fails: the truncated documents make both builds leak on the
    driver's error path; that crash is neither the bug nor the fix's."""
    real = verdicts.decide(REAL)
    assert (real["decision"], codes(real)) == ("deny", {"mutation-possibly-equivalent"})
    assert not codes(real) & hard_codes()  # a reviewer can waive it: review, not a hard deny


def test_the_poc_s_letter_refused_by_its_code_is_a_special_case(verdicts: Verdicts) -> None:
    """`pointer[position] == 0x41`: the variants edit the letter (`1B`, `1@`); on both the fix
    does nothing (fix-special-cases-poc-value) and differs from the upstream fix."""
    wrong = verdicts.decide("cjsonptr-poc-char-code")
    assert {"fix-special-cases-poc-value", "fix-misses-upstream-behaviour"} <= codes(wrong)
    assert_discriminated(wrong, verdicts.decide(REAL))


def test_test_data_edited_to_hide_a_regression_is_tests_weakened(verdicts: Verdicts) -> None:
    """The leading-zero check dropped and tests/cases.txt (a data file the test script reads)
    edited to expect `/limits/01` = 1: the base tests fail post-fix, the edit is found."""
    wrong = verdicts.decide("cjsonptr-test-data")
    assert {"tests-weakened", "regression-introduced"} <= codes(wrong)
    assert_discriminated(wrong, verdicts.decide(REAL))


def test_a_fix_in_the_driver_instead_of_the_library_is_denied(verdicts: Verdicts) -> None:
    """`pointer.c` (the program the reproducer runs) refuses `1A` before the lookup; the
    library's decode_array_index_from_pointer, which the advisory names, is left buggy. Every
    input trace runs goes through the driver, so the behavioural gates cannot tell it from the
    upstream fix; the fault-site gate's driver check can: the patch changes only the entry
    program, so the library side is the unpatched tree, which misbehaved on the PoC."""
    wrong = verdicts.decide("cjsonptr-harness-filter")
    assert "fix-only-in-driver" in codes(wrong)
    assert_discriminated(wrong, verdicts.decide(REAL))


def test_a_driver_filter_beside_an_ineffective_library_check_is_denied(verdicts: Verdicts) -> None:
    """The driver filter of harness-filter plus a check in decode_array_index_from_pointer that
    `1A` passes (it starts with a digit): the patch changes the entry program AND the library,
    so fix-only-in-driver does not apply; its library side (built without pointer.c's section)
    still prints row 27 for `/rows/1A`: library-side-still-fails."""
    wrong = verdicts.decide("cjsonptr-driver-and-check")
    assert "library-side-still-fails" in codes(wrong)
    driver = fault_site(verdicts, "CVE-2025-57052-cjsonptr-driver-and-check")
    assert driver["details"]["driver"]["library_side"] == "still fails"
    assert "fix-only-in-driver" not in codes(wrong)
    assert_discriminated(wrong, verdicts.decide(REAL))


def test_a_driver_filter_beside_a_library_half_that_cannot_build_alone_is_denied(
    verdicts: Verdicts,
) -> None:
    """The driver filter plus a library check gated on a global the patch defines in the driver
    (pointer.c): the library side (built without pointer.c's section) does not link, so it can
    show nothing; it used to claim nothing, and the driver filter passed for the fix. Now a
    mixed patch whose library half does not build alone is library-side-not-built."""
    wrong = verdicts.decide("cjsonptr-driver-and-unbuildable-library")
    assert "library-side-not-built" in codes(wrong)
    driver = fault_site(verdicts, "CVE-2025-57052-cjsonptr-driver-and-unbuildable-library")
    assert (driver["passed"], driver["details"]["driver"]["library_side"]) == (
        False,
        "did not build",
    )
    assert not {"fix-only-in-driver", "library-side-still-fails"} & codes(wrong)
    assert_discriminated(wrong, verdicts.decide(REAL))


def test_the_real_fix_beside_a_harmless_driver_change_is_not_denied_by_its_library_side(
    verdicts: Verdicts,
) -> None:
    """The upstream fix plus a usage message in the driver: the library side (the upstream fix
    alone) was built and run and no longer misbehaves on the PoC, so the fault-site gate passes.
    Its one reason is the coverage gate's waivable coverage-below-threshold: the reproducer
    never runs the usage message's lines (true, and a reviewer's call), so it is no harder a
    deny than the real fix's review."""
    mixed = verdicts.decide("cjsonptr-library-and-message")
    driver = fault_site(verdicts, "CVE-2025-57052-cjsonptr-library-and-message")
    assert (driver["passed"], driver["reasons"]) == (True, [])
    assert driver["details"]["driver"]["library_side"] == "fixed"
    assert not codes(mixed) & hard_codes()
    assert codes(mixed) == {"coverage-below-threshold"}


def verify_result(verdicts: Verdicts, candidate_id: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(
        (verdicts.fork / ".trace" / "verify" / f"{candidate_id}.json").read_text()
    )
    return doc


def fault_site(verdicts: Verdicts, candidate_id: str) -> dict[str, Any]:
    """The fault-site gate's record of a verified candidate (its verify result)."""
    record: dict[str, Any] = verify_result(verdicts, candidate_id)["gates"]["fault-site"]
    return record


def test_only_a_mixed_patch_builds_its_library_side(verdicts: Verdicts) -> None:
    """The library-side step of a patch that is not mixed (the real fix: the library only; the
    driver filter: the entry file only) copies the pre-fix build (`reused`: nothing compiled)
    and its run starts no reproducer (a not-run record); a mixed patch's is its own build, run
    by the harness."""
    for name, cid, built in (
        (REAL, "CVE-2025-57052-cjsonptr", False),
        ("cjsonptr-harness-filter", "CVE-2025-57052-cjsonptr-harness-filter", False),
        ("cjsonptr-driver-and-check", "CVE-2025-57052-cjsonptr-driver-and-check", True),
    ):
        verdicts.decide(name)
        steps = verify_result(verdicts, cid)["steps"]
        out = Path(steps["library-side"]["out"])
        assert (out / "reused").exists() is not built, name
        if not built:
            assert (out / "reused").read_text().strip() == steps["pre-fix"]["out"]
        ran = json.loads((Path(steps["library-side-run@1"]["out"]) / "outcome.json").read_text())
        assert ran["schema"] == ("trace.run/v1" if built else "trace.not-run/v1"), name
