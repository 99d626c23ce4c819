"""A second outside campaign (a real PyPI CVE): sqlparse 0.4.4 (pkgs/sqlparse, cut from its PyPI
sdist byte for byte), CVE-2024-4340's real upstream fix and wrong fixes that game an
instrument, verified once each with real builds (one module fixture, as
test_outside_cjsonptr.py; the same discrimination rule: a wrong fix is denied by a failed claim
or a non-waivable code, and its verdict is not the real fix's nor a weaker one).

The bug: a statement nested deeply enough makes `sqlparse.parse` raise RecursionError (a DoS:
callers expect SQLParseError). The upstream fix, commit b4a39d9 (sqlparse/sql.py, verbatim),
catches RecursionError in `TokenList.flatten` and raises SQLParseError.

What the campaign found and fixed (docs/gates.md, "A second outside campaign"): the real fix had
no mutant (its hunk opens inside flatten's docstring: every added line read as string), its
coverage was "below threshold" for lines the tracer could not see (CPython drops a trace
function at the recursion limit), and the wrong fix that refuses the PoC's shape (80 `[` in a
row) was denied by waivable codes only: the variant one level shallower raised RecursionError
post-fix as pre-fix, and a Python exception was never a crash to the variants gate.
"""

from __future__ import annotations

import pytest

from tests.test_outside_cjsonptr import Verdicts, assert_discriminated, codes, hard_codes
from tests.verified import VerifiedFork

pytestmark = pytest.mark.nix

REAL = "sqlparse-cve-2024-4340"


@pytest.fixture(scope="module")
def verdicts(verified_fork: VerifiedFork) -> Verdicts:
    """The session's one verified copy of the fork (tests/verified.py), as
    test_outside_cjsonptr.py's: this module adds its own candidates' verifications only."""
    return Verdicts(verified_fork.fork, {})


def test_the_real_fix_goes_to_a_reviewer_for_the_lines_no_tracer_saw(verdicts: Verdicts) -> None:
    """The handler mutant (`except () as err:`) is killed by the PoC, the negated branch by the
    good file: mutation measured; the `except` lines run after CPython dropped the line tracer
    at the recursion limit: coverage not measurable, not below threshold."""
    real = verdicts.decide(REAL)
    assert (real["decision"], codes(real)) == ("deny", {"coverage-not-measurable"})
    assert not codes(real) & hard_codes()  # a reviewer can waive it: review, not a hard deny


def test_refusing_the_poc_s_shape_still_fails_one_level_shallower(verdicts: Verdicts) -> None:
    """`'[' * 80 in sql` refused: the variant with 79 `[` raises RecursionError post-fix as
    pre-fix, the declared failure itself (variant-still-fails, no longer variant-mishandled)."""
    wrong = verdicts.decide("sqlparse-poc-depth")
    assert {"variant-still-fails", "mutation-score-below-threshold"} <= codes(wrong)
    assert_discriminated(wrong, verdicts.decide(REAL))


def test_every_exception_turned_into_the_advisory_s_error_is_a_catch_all(
    verdicts: Verdicts,
) -> None:
    """`except Exception` at parse(): on the PoC it behaves as the upstream fix."""
    wrong = verdicts.decide("sqlparse-catch-all-entry")
    assert "scope-weakened-checks" in codes(wrong)
    assert_discriminated(wrong, verdicts.decide(REAL))


def test_a_recursion_error_swallowed_in_flatten_fails_the_claim(verdicts: Verdicts) -> None:
    """`contextlib.suppress(RecursionError)` in flatten: the deep statement's tokens are cut off
    silently, so the PoC parses (exit 0) where [accept] declares sqlparse's refusal."""
    wrong = verdicts.decide("sqlparse-suppress-flatten")
    assert "post-fix-still-fails" in codes(wrong)
    assert_discriminated(wrong, verdicts.decide(REAL))


# sqlparse-recursion-limit (parse() raises the recursion limit to 100000) is not judged here: it
# fails its claim too (post-fix-still-fails, and the module's discrimination rule held, run by
# hand in round eleven), but it costs 215 s of the module's 431 s under load (most likely the
# deep statements the raised limit lets parse fully, cubic in the depth): docs/gates.md.
