"""The gates' rules and the reason codes they emit.

A gate record's `reasons` are codes of the one catalogue, policy/reasons.toml (kebab-case,
stable; a test checks every code here is declared there). Each finding also names its finer
`rule` (`<gate>.<rule>`, also stable), so a reviewer sees *which* check was weakened.
RULES: rule -> (reason code, message, what to do).
"""

from __future__ import annotations

RULES: dict[str, tuple[str, str, str]] = {
    # scope / minimality
    "scope.outside-declared-scope": (
        "scope-outside-declared",
        "the patch touches a file outside the candidate's declared scope",
        "drop the change to that file, or widen `scope` in the candidate and say why",
    ),
    "scope.too-many-files": (
        "scope-too-large",
        "the patch touches more files than the policy allows",
        "split the patch or keep it to the files the fix needs",
    ),
    "scope.too-many-hunks": (
        "scope-too-large",
        "the patch has more hunks than the policy allows",
        "keep the fix minimal; move refactoring into its own change",
    ),
    "scope.too-many-lines": (
        "scope-too-large",
        "the patch adds and removes more lines than the policy allows",
        "keep the fix minimal; move refactoring into its own change",
    ),
    "scope.binary-file": (
        "scope-outside-declared",
        "the patch changes a binary file, which no gate can review",
        "ship source changes only",
    ),
    "scope.public-interface-changed": (
        "scope-interface-changed",
        "a public function signature changed (C header prototype or public Python def)",
        "keep the interface stable, or route the change to human review",
    ),
    "scope.weakened.assert-removed": (
        "scope-weakened-checks",
        "the patch removes an assertion",
        "keep the assertion; fix the cause instead of the check",
    ),
    "scope.weakened.bounds-check-removed": (
        "scope-weakened-checks",
        "the patch removes a bounds check (a comparison guarding an access)",
        "keep the check or replace it with a stricter one",
    ),
    "scope.weakened.error-return-removed": (
        "scope-weakened-checks",
        "the patch removes an error return (return -1/NULL, goto err, raise, exit)",
        "keep the error path",
    ),
    "scope.weakened.catch-all-added": (
        "scope-weakened-checks",
        "the patch adds a catch-all handler (bare except, except Exception/BaseException, "
        "contextlib.suppress(Exception), catch (...))",
        "catch the specific error the fix is about",
    ),
    "scope.weakened.error-suppressed": (
        "scope-weakened-checks",
        "the patch suppresses errors (`|| true`, `2>/dev/null`, `set +e`)",
        "let the error surface",
    ),
    "scope.weakened.except-returns-default": (
        "scope-weakened-checks",
        "the patch adds an `except ...: return <default>`: an error becomes an ordinary value",
        "let the error surface, or handle the specific error the fix is about",
    ),
    "scope.weakened.return-code-ignored": (
        "scope-weakened-checks",
        "the patch ignores a return code ((void) cast, check=False, a call whose result was "
        "checked now a bare statement)",
        "handle the result",
    ),
    "scope.weakened.test-disabled": (
        "scope-tests-disabled",
        "the patch skips or disables a test",
        "keep the test running; fix the code, not the test",
    ),
    "scope.weakened.test-deleted": (
        "scope-tests-disabled",
        "the patch deletes a test (a test file or test function)",
        "keep the test",
    ),
    "scope.fix-matches-poc-literal": (
        "fix-matches-poc-literal",
        "the patch compares against a literal lifted from the reproducer or its data (the PoC's "
        "string, its exact length): it may recognise the PoC instead of fixing the bug",
        "fix the faulty code for every input; a reviewer who confirms the comparison is "
        "legitimate may waive this reason for this candidate",
    ),
    # mutation testing
    "mutation.score-below-threshold": (
        "mutation-score-below-threshold",
        "too many mutants of the patch survive the reproducer",
        "strengthen the reproducer (or the patch) until mutants of the fix are killed",
    ),
    # issue 26: survivors judged by every input tried (survivors.py)
    "mutation.survivor-distinguished": (
        "mutation-survivor-distinguished",
        "a surviving mutant behaves unlike the fix on an input trace tried (the reproducer, a "
        "variant, the fuzz corpus), yet no declared oracle calls that behaviour wrong",
        "read the distinguishing input and both behaviours in the record: declare the oracle "
        "that tells the fix's behaviour from the mutant's, or fix the patch",
    ),
    "mutation.possibly-equivalent": (
        "mutation-possibly-equivalent",
        "the score counting every survivor is below the threshold, but the survivors that sink "
        "it behave exactly as the fix on every input tried: possibly equivalent mutants",
        "read each possibly-equivalent survivor's diff and the inputs tried; if no valid input "
        "can tell it from the fix, waive this for this candidate",
    ),
    "mutation.no-mutants": (
        "mutation-not-measurable",
        "no mutant generated: the patch adds no mutable code line (not measurable)",
        "review the patch by hand; the mutation gate cannot judge it",
    ),
    "mutation.none-built": (
        "mutation-not-measurable",
        "no mutant built: every mutant was stillborn (did not apply, compile or import)",
        "check that the post-fix build works; the mutation gate cannot judge it",
    ),
    "mutation.none-judged": (
        "mutation-not-measurable",
        "no mutant could be judged: every built mutant was equivalent to the fix (TCE), "
        "changed no code, or is unobservable (only over-allocates)",
        "review the patch by hand; its mutants say nothing about the reproducer",
    ),
    "mutation.post-fix-fails": (
        "mutation-not-measurable",
        "the unmutated post-fix build does not pass the reproducer, so kills mean nothing",
        "fix the candidate first (see the verify gate)",
    ),
    # diff coverage
    "coverage.below-threshold": (
        "coverage-below-threshold",
        "the reproducer executes too few of the patch's changed lines",
        "extend the reproducer so it reaches the changed code",
    ),
    "coverage.not-measurable": (
        "coverage-not-measurable",
        "the package cannot report coverage for the changed lines (not a pass)",
        "build the package with coverage support, or review coverage by hand",
    ),
    "coverage.file-not-measured": (
        "coverage-not-measurable",
        "a changed file with executable changed lines matched no file the coverage data "
        "reports: its lines are unknown, so the share is not measurable (not a pass)",
        "build that file with coverage (is it compiled/installed and run?), or review it by hand",
    ),
    "coverage.path-not-mapped": (
        "coverage-not-measurable",
        "a changed file could not be matched to any file the build installed, by path or by "
        "content, so its lines are unknown (not a pass)",
        "check where the package installs that file (src/ layout, site-packages, build "
        "directory); the gate record lists the files coverage reported",
    ),
    "coverage.no-executable-lines": (
        "coverage-not-measurable",
        "the patch adds no executable line that coverage could see (not measurable)",
        "review the patch by hand",
    ),
    # variants of the PoC ("PoC+")
    # differential: the candidate against the upstream fix (differential.py)
    "differential.misses-upstream-fix": (
        "fix-misses-upstream-behaviour",
        "on an input where the upstream fix changes what the unpatched build does, the "
        "candidate still does what the unpatched build did",
        "the bug is still there for that input: fix its cause, not the PoC's case",
    ),
    "differential.differs": (
        "differs-from-upstream-fix",
        "on an input the candidate behaves unlike the upstream fix",
        "read the input and both behaviours; align the fix, or waive with a signed reason",
    ),
    "variants.still-fails": (
        "variant-still-fails",
        "a variant of the proof of concept still crashes the post-fix build",
        "fix the faulty code, not the PoC's input: the bundled variant reproduces the crash",
    ),
    "variants.breaks-oracle": (
        "variant-breaks-oracle",
        "a variant of the proof of concept that the unpatched build handled as the declared "
        "post-fix oracle allows (exit code, stderr) breaks that oracle on the post-fix build",
        "keep the package's behaviour on inputs the bug does not reach (the bundled variant "
        "shows one), or have a reviewer confirm the stricter behaviour and waive",
    ),
    "variants.special-cased": (
        "fix-special-cases-poc-value",
        "the patch compares with a value of the proof of concept, and with that value moved by "
        "one (both ways) the post-fix build behaves exactly as the unpatched build, though the "
        "fix changed the PoC's own outcome",
        "fix the faulty code for every value, not the PoC's: the bundled variants show the "
        "neighbouring values the fix leaves as they were",
    ),
    "variants.mishandled": (
        "variant-mishandled",
        "a variant of the proof of concept on which the unpatched build shows the declared bug "
        "(a bad input) is not handled as the PoC's declared post-fix behaviour ([accept]'s "
        "rejection: exit code, stderr; default exit 0)",
        "handle every input the bug reaches, not only the PoC's (the bundled variant shows "
        "one), or have a reviewer confirm that handling and waive",
    ),
    "variants.regressed": (
        "variant-regressed",
        "a variant of the proof of concept that the unpatched build handled well (no failure, "
        "no sign of the bug: a good input) fails on the post-fix build",
        "keep the package's behaviour on inputs the bug does not reach (the bundled variant "
        "shows one), or have a reviewer confirm the stricter behaviour and waive",
    ),
    "variants.no-poc": (
        "variants-not-measurable",
        "the pre-fix run recorded no target invocation, so there is no PoC to vary "
        "(not measurable)",
        "make the reproducer run the package's own program",
    ),
    "variants.none-generated": (
        "variants-not-measurable",
        "the PoC has no input a variant could change (no data file, stdin or argument; "
        "not measurable)",
        "give the reproducer its input as a data file, stdin or an argument",
    ),
    "variants.none-run": (
        "variants-not-measurable",
        "no variant could be run against the post-fix build (not measurable)",
        "check that the post-fix build works",
    ),
    "variants.post-fix-fails": (
        "variants-not-measurable",
        "the post-fix build still fails the PoC itself, so variants mean nothing (not measurable)",
        "fix the candidate first (see the verify gate)",
    ),
    # the fuzzing gate: coverage-guided fuzzing of the post-fix build (fuzz_gate.py)
    "fuzz.found-crash": (
        "fuzz-found-crash",
        "an input the fuzzing gate found (minimised, run again under the verify harness) "
        "crashes the post-fix build with the declared bug's kind, or with a crash the unpatched "
        "build does not show",
        "fix the faulty code for every input, not the PoC's: the bundled input reproduces the "
        "crash (fuzz/<id>/repro.sh)",
    ),
    # the package's own tests, both sides
    "regression.introduced": (
        "regression-introduced",
        "a test of the package's own suite passes pre-fix and fails post-fix",
        "change the patch so the package keeps its behaviour (see details.regressions)",
    ),
    "regression.tests-weakened": (
        "tests-weakened",
        "the patch removes or weakens a test of the package's own suite (a deleted test file, "
        "test or assertion, a loosened comparison, `|| true`, a skip marker, an edited "
        "expected value or golden file)",
        "restore the tests; fix the code so the unpatched tests pass (details.tests_weakened "
        "holds the hunks)",
    ),
    "regression.flaky-test": (
        "flaky-test",
        "a test of the package's own suite failed and then passed when run again",
        "make the test deterministic; a reviewer who reads the named test and its logs may "
        "waive this for this candidate",
    ),
    "regression.no-tests": (
        "regression-not-measurable",
        "the package has no tests trace can run (no checkPhase/doCheck, installCheckPhase/"
        "doInstallCheck or passthru.tests; not measurable)",
        "give the package a test suite, or review its behaviour by hand",
    ),
    "regression.none-pass-pre-fix": (
        "regression-not-measurable",
        "none of the package's tests passes on the unpatched build, so nothing can regress "
        "(not measurable)",
        "repair the package's test suite first",
    ),
}


CODES: tuple[str, ...] = tuple(dict.fromkeys(code for code, _, _ in RULES.values()))


def code_of(rule: str) -> str:
    """The catalogue code a rule reports under (a typo in a rule name fails loudly)."""
    if rule not in RULES:
        raise KeyError(f"unknown gate rule {rule!r}")
    return RULES[rule][0]


def gate_record(
    gate: str,
    rules: list[str],
    *,
    measurable: bool,
    score: float | None,
    details: dict[str, object],
) -> dict[str, object]:
    """THE trace.gate/v1 record of a rule-based gate: passed when no rule fired, its reasons the
    fired rules' catalogue codes (in catalogue order), the rules themselves in details.rules."""
    return {
        "schema": "trace.gate/v1",
        "gate": gate,
        "passed": not rules,
        "measurable": measurable,
        "score": score,
        "reasons": sorted({code_of(r) for r in rules}, key=CODES.index),
        "details": {**details, "rules": list(rules)},
    }
