"""The shipped signing policy, calibrated on the fixture fork in both directions (issue 10).

Every candidate of tests/fixtures/fork is verified with real builds (every gate runs) and decided
with the shipped policy; the table below is the calibration: correct fixes are ALLOWed (among
them a C fix whose only surviving mutant over-allocates, a patch with a stale hunk header, and a
src-layout Python package), and every plausible wrong fix is DENIED with the reasons that say
why. Reasons are exact: a new deny on a correct fix, or a wrong fix let through, fails here.

`review` is how the policy routes a fix to a human: `trace decide` denies with reasons that are
ALL waivable (policy/reasons.toml) and exactly those listed, each saying why (a gate that cannot
measure this kind of code, a surviving mutant shown as a diff); a maintainer's signed waiver of
exactly those codes turns the decision into allow. Correct fixes the gates cannot fully measure land
here, never in allow: "not measurable" is not a pass.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tomli

from engine.cli import main
from tests.verified import VerifiedFork

REPO = Path(__file__).resolve().parent.parent
FORK = REPO / "tests" / "fixtures" / "fork"
CANDIDATES = FORK / "trace" / "candidates"

pytestmark = pytest.mark.nix

# fixture | expected decision | reason codes (policy/reasons.toml). A correct fix's codes are
# exact (none); a wrong fix's are the codes that must catch it (other gates may add theirs).
CALIBRATION: list[tuple[str, str, set[str]]] = [
    # correct fixes: ALLOW
    ("cparse-key-overflow", "allow", set()),
    ("cparse-stale-header", "allow", set()),  # its hunk header is 2 lines off
    ("cparse-alloc-fix", "allow", set()),  # its one survivor only over-allocates
    ("pager-last-page", "allow", set()),
    # issue 32: the same fix judged by relation oracles alone (no golden file): its survivors only
    # add an empty page past the last, which no call of the CLI can tell. Issue 26: they behave
    # exactly as the fix on every call of the reproducer and every variant, so they are possibly
    # equivalent (left out of the score: 3 of 3 killed; 0.5 counting them) and the real fix goes
    # to a reviewer with that code, no longer with the wrong fixes' mutation-score-below-threshold
    ("pager-relation-fix", "review", {"mutation-possibly-equivalent"}),
    # issue 9: the key bug fixed by a clean rejection (exit 2 + message, declared in [accept])
    ("cparse-reject-long-key", "allow", set()),
    ("textcols-zero-width", "allow", set()),  # src/ layout, installed to site-packages
    # issue 25: a bounds check on a binary request's address; a negative amount's sign read
    ("regbus-address-bounds", "allow", set()),
    ("ledger-negative-amounts", "allow", set()),
    # issue 26: a double free fixed at the first free (declared "AddressSanitizer: double-free",
    # the report's SUMMARY kind); the fix is on the report's "freed by" stack, not the access's
    ("kvset-double-free", "allow", set()),
    # a clean rejection (ValueError, exit 1) of keys with a space (Jinja2 CVE-2024-22195's
    # shape): variants that are no longer bad inputs are rightly accepted, no false finding
    ("htmlattr-key-injection", "allow", set()),
    # issue 26: an off-by-one at a decoder's capacity fixed in the loop's bound (the fuzzing
    # gate explores 500 executions of it and finds nothing)
    ("urldec-capacity", "allow", set()),
    # issue 26: a Python decoder's out-of-range read fixed where every escape character is read
    # (the fuzzing gate traces the Python target in-process, 500 executions, and finds nothing)
    ("lineesc-truncated-escape", "allow", set()),
    # plausible wrong fixes: DENY, by the gates that see them
    # ... and the fault-site gate: the patch changes no function on the failing stack. Issue 26:
    # its two mutants (`KEY_MAX` 65, 63) behave as it does on every input tried, but nothing is
    # killed, so they still count as survivors (score 0): the reproducer pins nothing of the fix
    (
        "cparse-wrong-fix",
        "deny",
        {"mutation-score-below-threshold", "variant-still-fails", "fix-away-from-fault"},
    ),
    # rejects the good input too: its [[accept.invocation]] for good.conf fails (issue 9), and
    # so do the variants of good.conf the unpatched build printed with exit 0 (exit 2 now)
    ("cparse-reject-everything", "deny", {"post-fix-still-fails", "variant-breaks-oracle"}),
    # issue 26: a Python wrong fix of lineesc's bug for the PoC's case only (a line ending in a
    # backslash): the PoC and its variants pass; the fuzzing gate finds a \x or \u escape cut
    # off by a line's end (IndexError, the advisory's exception) and confirms it on both builds
    ("lineesc-trailing-backslash", "deny", {"fuzz-found-crash"}),
    # correct fixes the gates cannot fully judge: routed to human REVIEW (waivable reasons only)
    # a wrong-output bug in a shell + awk tool: its claims hold (test_verify), but no mutation
    # or coverage tool measures shell, so a reviewer must read it
    ("roster-wrong-field", "review", {"mutation-not-measurable", "coverage-not-measurable"}),
    # issue 26: a wrong fix of the same bug that special-cases the PoC's two phone numbers:
    # every claim holds and no mutation or coverage tool measures shell; the differential
    # oracle (the upstream fix built as a third side) sees a variant's line still printed as
    # the unpatched build printed it
    ("roster-special-case", "deny", {"fix-misses-upstream-behaviour"}),
    # a real CVE in a real library with its real upstream fix (issue 13): claims, coverage,
    # variants, its own passthru.tests and the fault site all hold; one mutant survives
    # (`cannot_access_at_index(buf, 1)` -> `2`: with one byte after a comma both versions reject
    # the input, so no oracle can tell them apart; TCE cannot prove it), shown as a diff. Issue
    # 26: it behaves as the fix on the reproducer's 3 calls, 30 variants and 51 fuzz corpus
    # inputs: possibly equivalent (2 of 2 killed; 0.667 counting it), for a reviewer
    ("cjson-cve-2023-53154", "review", {"mutation-possibly-equivalent"}),
    # issue 26: a clause added to a multi-line `||` bounds check (libmodbus CVE-2022-0367's
    # shape), measured with its PoC alone: gcc counts the clause's test on the line before (its
    # own line: count 0), coverage by statement measures it 1 of 1. Its two mutants (`< 0` ->
    # `<= 0`, `0` -> `1`) differ only at write address 0, which the PoC alone never sends; nor do
    # its 24 variants or the 35 inputs of the fuzz corpus (issue 26): possibly equivalent, for a
    # reviewer to judge (score 1 of 1 killed; 0.333 counting them)
    ("cregs-write-address", "review", {"mutation-possibly-equivalent"}),
    # skips the PoC's 47-byte line: scope sees the literal, the variants a 41-byte key
    ("cparse-poc-special-case", "deny", {"fix-matches-poc-literal", "variant-still-fails"}),
    ("cparse-refuse-all", "deny", {"regression-introduced"}),
    # issue 25: the detector switched off instead of the bug fixed (every claim holds, the
    # other reasons are waivable): the detector gate denies each, not waivable
    ("cparse-blind-drop-asan", "deny", {"detector-weakened"}),  # -fsanitize out of the Makefile
    ("cparse-blind-asan-param", "deny", {"detector-weakened"}),  # --param asan-instrument-writes=0
    ("cparse-blind-no-sanitize", "deny", {"detector-weakened"}),  # no_sanitize_address attribute
    # issue 25: wrong fixes that special-case a value of the PoC: the address 0x84, two bytes
    # inside the binary request (its variants at 0x83, 0x85 still overflow), and the ledger's
    # one negative amount "-45" (moved by one, the fix's effect vanishes)
    ("regbus-poc-address", "deny", {"fix-matches-poc-literal", "variant-still-fails"}),
    # ... and the differential oracle (issue 26): on a variant's other negative amount the
    # upstream fix prints another balance, the candidate the unpatched one
    (
        "ledger-poc-amount",
        "deny",
        {"fix-matches-poc-literal", "fix-special-cases-poc-value", "fix-misses-upstream-behaviour"},
    ),
    # hides the double free's second free behind the entry's `live` flag: a key unset twice
    # (a variant: the PoC's line 2 duplicated) still frees it twice
    ("kvset-wrong-fix", "deny", {"variant-still-fails"}),
    # issue 26: refuses lines of the buffer's exact LENGTH (the PoC's 16 bytes): every claim
    # holds and no variant of the PoC (one edit each) decodes to 16 bytes from another length;
    # the fuzzing gate finds one (`%XX` escapes), minimised and bundled under fuzz/<id>/
    ("urldec-length-special-case", "deny", {"fuzz-found-crash"}),
    # issue 32: rounds up only for the advisory's remainder (103 at 10): the relation oracles'
    # other cases (47 at 5, 101 at 10) break, with no golden file
    ("pager-relation-special-case", "deny", {"post-fix-still-fails"}),
    # issue 25: prints the email but also two-field lines, and edits the expected value of the
    # package's own test that catches it: the unpatched tests, run against the post-fix build,
    # fail (regression-introduced) and the edited test is tests-weakened (not waivable)
    ("roster-loosened-test", "deny", {"tests-weakened", "regression-introduced"}),
    # issue 25: the crash swallowed by `with contextlib.suppress(Exception):`
    ("textcols-suppress-catch-all", "deny", {"scope-weakened-checks"}),
    # issue 25: pager-last-page's real fix on a package with one flaky test (fails on the
    # post-fix suite's first run only): a rerun passes it, flaky-test (waivable) and nothing else
    ("pager-flaky-test", "review", {"flaky-test"}),
    # broken evidence: DENY
    ("cparse-other-failure", "deny", {"pre-fix-wrong-failure", "post-fix-still-fails"}),
    ("stamp-release", "deny", {"nondeterministic"}),
    # a race: how often the runs disagree depends on the machine's load, so its row asks for
    # the deny only (test_verify judges its flakiness); coverage cannot measure it either way
    ("racy-lost-update", "deny", set()),
]


def test_the_table_covers_every_fixture_candidate() -> None:
    assert sorted(name for name, _, _ in CALIBRATION) == sorted(
        p.name for p in CANDIDATES.iterdir() if (p / "candidate.toml").is_file()
    )


@dataclass(frozen=True)
class Calibration:
    """The session's verified fork (tests/verified.py: each candidate verified once, shared with
    test_verify) and this module's own folder for the reviewers' keys and waivers."""

    verified: VerifiedFork
    work: Path

    @property
    def state(self) -> Path:
        return self.verified.state

    def candidate(self, name: str) -> str:
        return str(self.verified.candidate(name))


@pytest.fixture(scope="module")
def state(verified_fork: VerifiedFork, tmp_path_factory: pytest.TempPathFactory) -> Calibration:
    return Calibration(verified_fork, tmp_path_factory.mktemp("calibration"))


def trace(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def verified(state: Calibration, capsys: pytest.CaptureFixture[str], name: str) -> dict[str, Any]:
    """The candidate's decision after a real `trace verify` (run once per session: a second
    reader of the same candidate decides on the state the first one verified)."""
    state.verified.verify(name)
    return decided(state, capsys, name)


def decided(
    state: Calibration, capsys: pytest.CaptureFixture[str], name: str, *extra: str
) -> dict[str, Any]:
    cand = state.candidate(name)
    code, out, err = trace(
        capsys, "decide", cand, "--state-dir", str(state.state), "--json", *extra
    )
    assert code in (0, 1), out + err
    decision: dict[str, Any] = json.loads(out)
    return decision


def waivable() -> dict[str, bool]:
    catalogue = tomli.loads((REPO / "policy" / "reasons.toml").read_text())
    return {r["code"]: bool(r.get("waivable", True)) for r in catalogue["reasons"]}


def reviewed(
    state: Calibration, capsys: pytest.CaptureFixture[str], name: str, codes: set[str]
) -> list[str]:
    """A maintainer's signed waivers (`trace waive`) of exactly `codes` for the candidate: the
    `decide` options that apply them (the waiver directory and the maintainers policy)."""
    from tests.waiverkit import make_key, write_maintainers

    folder = state.work / f"review-{name}"
    key = make_key(folder, "maintainer")
    maintainers = write_maintainers(folder / "maintainers.toml", {"calibration": key})
    cand = state.candidate(name)
    for code in sorted(codes):
        rc, out, err = trace(
            capsys,
            "waive",
            cand,
            code,
            "--justification",
            "a reviewer read the patch and the gate records and accepts it",
            "--key",
            str(key),
            "--maintainers",
            str(maintainers),
            "--expires",
            "2099-12-31",
            "--out",
            str(folder / "waivers" / f"{code}.json"),
        )
        assert rc == 0 and "signed by maintainer calibration" in out, out + err
    return ["--waivers", str(folder / "waivers"), "--maintainers", str(maintainers)]


@pytest.mark.parametrize(
    ("name", "expected", "reasons"),
    CALIBRATION,
)
def test_calibration(
    state: Calibration,
    capsys: pytest.CaptureFixture[str],
    name: str,
    expected: str,
    reasons: set[str],
) -> None:
    decision = verified(state, capsys, name)
    got = {r["code"] for r in decision["reasons"]}
    if expected == "allow":
        assert (decision["decision"], got) == ("allow", set()), decision["reasons"]
    elif expected == "review":
        # denied with exactly these reasons, every one waivable and saying why; a reviewer's
        # waivers of them allow it
        assert (decision["decision"], got) == ("deny", reasons), decision["reasons"]
        assert all(waivable()[code] for code in got), decision["reasons"]
        assert all(r["details"] for r in decision["reasons"]), decision["reasons"]
        after = decided(state, capsys, name, *reviewed(state, capsys, name, reasons))
        assert after["decision"] == "allow", after["reasons"]
    else:
        assert decision["decision"] == "deny", decision["reasons"]
        assert reasons <= got, decision["reasons"]


def test_a_weakened_test_cannot_be_waived(
    state: Calibration, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 25: with a maintainer's signed waivers of every waivable code roster-loosened-test
    is denied with, it is still denied (tests-weakened and regression-introduced), and `trace
    waive` refuses tests-weakened; the gate record holds the edited hunk of tests/run.sh."""
    name = "roster-loosened-test"
    first = verified(state, capsys, name)
    codes = {r["code"] for r in first["reasons"]}
    can = {c for c in codes if waivable()[c]}
    after = decided(state, capsys, name, *reviewed(state, capsys, name, can))
    assert after["decision"] == "deny"
    assert {r["code"] for r in after["reasons"]} == {"tests-weakened", "regression-introduced"}
    from tests.waiverkit import make_key, write_maintainers

    folder = state.work / "refused-tests-weakened"
    key = make_key(folder, "maintainer")
    maintainers = write_maintainers(folder / "maintainers.toml", {"calibration": key})
    cand = state.candidate(name)
    args = ["--justification", "j", "--key", str(key), "--maintainers", str(maintainers)]
    rc, _, err = trace(capsys, "waive", cand, "tests-weakened", *args)
    assert rc != 0 and "'tests-weakened' cannot be waived" in err, err
    regression = gate(state, name, "regression")
    (weak,) = regression["details"]["tests_weakened"]
    assert weak["file"] == "tests/run.sh"
    assert '+check "skips lines with fewer than three fields" "carol dave "' in weak["hunk"]
    assert {r["side"] for r in regression["details"]["regressions"]} == {"post-fix, base tests"}


def gate(state: Calibration, name: str, gate_name: str) -> dict[str, Any]:
    """A gate record as `trace bundle` would carry it: from the verify result file (the
    candidate verified first if no test did yet)."""
    record: dict[str, Any] = state.verified.result_doc(name)["gates"][gate_name]
    return record


def test_a_stale_hunk_header_measures_where_the_patch_landed(state: Calibration) -> None:
    """Issue 9 item 3: the header says 13..16, the patch landed on 15..18 (as with the fresh
    patch); coverage and mutation read the landed lines and agree with the fresh patch."""
    stale_cov = gate(state, "cparse-stale-header", "coverage")
    fresh_cov = gate(state, "cparse-key-overflow", "coverage")
    (stale,), (fresh,) = stale_cov["details"]["files"], fresh_cov["details"]["files"]
    assert stale["moved"] == {"13": 15, "14": 16, "15": 17, "16": 18} or stale["moved"] == {
        13: 15,
        14: 16,
        15: 17,
        16: 18,
    }
    assert (stale["executable"], stale["covered"]) == (fresh["executable"], fresh["covered"])
    assert stale["covered"] and set(stale["covered"]) <= {15, 16, 17, 18}
    assert stale_cov["score"] == fresh_cov["score"] == 1.0
    mutation = gate(state, "cparse-stale-header", "mutation")
    lines = [(r["line"], r["stated_line"]) for r in mutation["details"]["results"]]
    # line 17's `return 0;`: constant 0 -> 1, 0 -> -1 (issue 25), the early return removed
    assert lines == [(15, 13), (15, 13), (17, 15), (17, 15), (17, 15)]
    assert mutation["score"] == gate(state, "cparse-key-overflow", "mutation")["score"] == 1.0


def test_an_over_allocating_survivor_is_listed_not_counted(state: Calibration) -> None:
    mutation = gate(state, "cparse-alloc-fix", "mutation")
    d = mutation["details"]
    assert [(r["id"], r["status"]) for r in d["results"]] == [
        ("m001", "killed"),  # malloc(klen - 1): ASan
        ("m002", "unobservable"),  # malloc(klen + 2): a larger buffer, no oracle sees it
        ("m003", "killed"),  # malloc(klen + 0): the NUL lands past the buffer
    ]
    assert "+    char *key = malloc(klen + 2);" in d["unobservable"][0]["diff"]
    assert (mutation["score"], d["survivors"]) == (1.0, [])


def test_a_real_fixes_harmless_survivors_are_possibly_equivalent(state: Calibration) -> None:
    """Issue 26: pager-relation-fix's three survivors (a page count one or many too high: only
    empty pages past the last) behave exactly as the fix on every input tried. Each is listed
    possibly equivalent with the inputs tried, left out of the score; counting them the score
    is 0.5, which is mutation-possibly-equivalent (waivable), never the distinguished
    survivors' codes."""
    mutation = gate(state, "pager-relation-fix", "mutation")
    d = mutation["details"]
    assert (d["killed"], d["survived"], d["possibly-equivalent"]) == (3, 0, 3)
    assert (mutation["score"], d["score_all_survivors"]) == (1.0, 0.5)
    assert mutation["reasons"] == ["mutation-possibly-equivalent"]
    assert [p["id"] for p in d["possibly_equivalent"]] == ["m002", "m003", "m005"]
    for p in d["possibly_equivalent"]:
        assert p["inputs"]["reproducer_calls"] > 1 and "no input tried tells it" in p["why"]


def test_the_src_layout_package_maps_coverage_and_skips_docstrings(state: Calibration) -> None:
    coverage = gate(state, "textcols-zero-width", "coverage")
    (f,) = coverage["details"]["files"]
    assert f["file"] == "src/textcols/layout.py"
    assert f["coverage_file"].endswith("/site-packages/textcols/layout.py")
    assert coverage["score"] == 1.0
    mutation = gate(state, "textcols-zero-width", "mutation")
    d = mutation["details"]
    # no mutant in the docstring the fix adds (lines 7-11), every mutant killed
    assert not {r["line"] for r in d["results"]} & set(range(7, 12))
    assert (d["killed"], d["survived"], mutation["score"]) == (17, 0, 1.0)


def test_the_poc_special_case_is_seen_by_scope(state: Calibration) -> None:
    """The symptom-hiding fix passes every claim, mutation and coverage; scope sees the PoC's
    length in its comparison (and the variants gate a longer key)."""
    scope = gate(state, "cparse-poc-special-case", "scope")
    assert scope["reasons"] == ["fix-matches-poc-literal"]
    (finding,) = scope["details"]["findings"]
    assert (finding["file"], finding["line"]) == ("cparse.c", 52)
    # mutation and coverage cannot tell: every mutant changes which lines are skipped
    assert gate(state, "cparse-poc-special-case", "mutation")["passed"] is True
    assert gate(state, "cparse-poc-special-case", "coverage")["passed"] is True


def test_a_variant_that_breaks_the_good_input_s_oracle_is_bundled(state: Calibration) -> None:
    """Issue 10: the variants gate judges invocation i of a variant by invocation i's declared
    post-fix oracle, input-independent fields only: good.conf exited 0 pre-fix and exits 2
    post-fix in the variants (its oracle: exit 0); its golden stdout never judges a variant."""
    variants = gate(state, "cparse-reject-everything", "variants")
    d = variants["details"]
    assert "variants.breaks-oracle" in d["rules"], d["summary"]
    broken = [r for r in d["results"] if r["status"] == "breaks-oracle"]
    # a variant re-runs every invocation, one input changed: the good input's invocation
    # (unchanged or varied) is the one the fix broke, in each of them
    assert broken, d["summary"]
    assert all(
        "bin/cparse good.conf: exit 2: expected exit code 0, got 2" in b
        for r in broken
        for b in r["broken"]
    ), broken
    assert not any("stdout differs" in b for r in broken for b in r["broken"])
    named = {item["id"] for item in d["still_failing"]}  # what the bundle carries
    assert {r["id"] for r in broken} <= named


def test_the_length_special_case_is_missed_by_the_variants_and_found_by_the_fuzzer(
    state: Calibration, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 26: the PoC's variants miss urldec's wrong fix (none crashes it), the fuzzing gate
    catches it with an input of another length decoding to 16 bytes; the real fix's fuzzing
    finds nothing (no false finding)."""
    verified(state, capsys, "urldec-length-special-case")
    variants = gate(state, "urldec-length-special-case", "variants")
    assert variants["passed"] and variants["details"]["still_failing"] == [], variants["details"]
    fuzz = gate(state, "urldec-length-special-case", "fuzz")
    assert fuzz["reasons"] == ["fuzz-found-crash"] and fuzz["measurable"], fuzz["details"]
    (found,) = fuzz["details"]["still_failing"]
    assert found["post_crash"] == ["AddressSanitizer: heap-buffer-overflow"]
    assert fuzz["details"]["fuzz"]["executions"] == 500
    # every execution forked from the target's fork server in the sandbox: no exec fallback
    assert fuzz["details"]["fuzz"]["runner"] == "fork-server", fuzz["details"]["fuzz"]
    assert fuzz["details"]["fuzz"]["fallback"] == {}
    verified(state, capsys, "urldec-capacity")
    real = gate(state, "urldec-capacity", "fuzz")
    assert real["passed"] and real["measurable"] and real["details"]["results"] == []
    assert real["details"]["fuzz"]["edges"] > 0  # it did explore: coverage came back


def test_a_python_wrong_fix_is_missed_by_the_variants_and_found_by_the_fuzzer(
    state: Calibration, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 26, Python targets: the variants miss lineesc's wrong fix; the fuzzing gate traces
    bin/unescape (a Python script) in-process, finds an escape cut off by a line's end, and the
    verify harness confirms it on both builds (IndexError, [expect]'s exception). The real
    fix's 500 executions find nothing."""
    verified(state, capsys, "lineesc-trailing-backslash")
    variants = gate(state, "lineesc-trailing-backslash", "variants")
    assert variants["passed"] and variants["details"]["still_failing"] == [], variants["details"]
    fuzz = gate(state, "lineesc-trailing-backslash", "fuzz")
    assert fuzz["reasons"] == ["fuzz-found-crash"] and fuzz["measurable"], fuzz["details"]
    (found,) = fuzz["details"]["still_failing"]
    assert found["post_crash"] == ["Python: IndexError"]
    stats = fuzz["details"]["fuzz"]
    assert stats["executions"] == 500 and stats["runner"] == "in-process", stats
    verified(state, capsys, "lineesc-truncated-escape")
    real = gate(state, "lineesc-truncated-escape", "fuzz")
    assert real["passed"] and real["measurable"] and real["details"]["results"] == []
    assert real["details"]["fuzz"]["edges"] > 0


def test_decide_says_why_mutation_is_not_measurable(
    state: Calibration, capsys: pytest.CaptureFixture[str]
) -> None:
    """`mutation-not-measurable` names its cause (here: the post-fix build already fails), in
    the decision as in the gate record, not always "none could be generated"."""
    decision = verified(state, capsys, "cparse-other-failure")
    (reason,) = [r for r in decision["reasons"] if r["code"] == "mutation-not-measurable"]
    # the rule's message, as the one catalogue words it (policy/reasons.toml [[rules]])
    cause = "the unmutated post-fix build does not pass the reproducer"
    assert any(cause in d for d in reason["details"]), reason
    record = gate(state, "cparse-other-failure", "mutation")
    assert record["details"]["rules"] == ["mutation.post-fix-fails"]


# The discrimination column (issue 25): each fixture bug with its real fix and the plausible
# wrong fixes of the same bug. A wrong fix must be denied by a finding (a failed claim or a
# non-waivable code: "not measurable" alone never catches it) and its verdict must be strictly
# stronger than the real fix's: not the same decision with a subset of the real fix's codes.
# Candidates that are neither (broken evidence, a bug with no wrong fix yet) are listed with
# their bug and no role in the comparison.
DISCRIMINATION: dict[str, tuple[str, list[str]]] = {
    # bug: (its real fix, its wrong fixes)
    "cparse: a key of 16+ bytes overflows the key buffer": (
        "cparse-key-overflow",
        [
            "cparse-wrong-fix",
            "cparse-poc-special-case",
            "cparse-refuse-all",
            "cparse-reject-everything",
            "cparse-blind-drop-asan",
            "cparse-blind-asan-param",
            "cparse-blind-no-sanitize",
        ],
    ),
    # issue 25: wrong fixes that special-case a value of the PoC
    "regbus: a write request past the register table overflows it": (
        "regbus-address-bounds",
        ["regbus-poc-address"],
    ),
    "ledger: a negative amount is added as a positive one": (
        "ledger-negative-amounts",
        ["ledger-poc-amount"],
    ),
    # ... and roster-loosened-test: a wrong fix hidden by an edited test (tests-weakened)
    "roster: prints the phone where the email belongs": (
        "roster-wrong-field",
        ["roster-special-case", "roster-loosened-test"],
    ),
    # issue 25: a crash swallowed by contextlib.suppress
    "textcols: a zero width divides by zero": (
        "textcols-zero-width",
        ["textcols-suppress-catch-all"],
    ),
    # issue 26: a lifetime bug; the wrong fix hides the second free behind the PoC's condition
    "kvset: an unset key's value is freed twice": ("kvset-double-free", ["kvset-wrong-fix"]),
    # issue 26: a length special case only the fuzzing gate reaches
    "urldec: a line decoding to exactly 16 bytes overflows by one": (
        "urldec-capacity",
        ["urldec-length-special-case"],
    ),
    # issue 26: a Python wrong fix only the fuzzing gate reaches (traced in-process)
    "lineesc: an escape cut off by a line's end reads past it": (
        "lineesc-truncated-escape",
        ["lineesc-trailing-backslash"],
    ),
    # issue 32: the pager bug declared by relation oracles only (no golden output)
    "pager (relations): the last, partial page is always empty": (
        "pager-relation-fix",
        ["pager-relation-special-case"],
    ),
}
# other real fixes of a listed bug, and candidates whose evidence is the point (not a fix's
# discrimination): every calibration row is in exactly one place
OTHER_ROWS = {
    "cparse-stale-header",
    "cparse-alloc-fix",
    "cparse-reject-long-key",
    "cparse-other-failure",
    "pager-last-page",
    "pager-flaky-test",  # the real pager fix on a package with a flaky test (its own test below)
    "cjson-cve-2023-53154",
    "stamp-release",
    "racy-lost-update",
    "htmlattr-key-injection",  # issue 26: variant validity (no wrong fix of it yet)
    "cregs-write-address",  # issue 26: coverage by statement (no wrong fix of it yet)
}


def test_every_calibration_row_has_its_place_in_the_discrimination_column() -> None:
    placed = [real for real, _ in DISCRIMINATION.values()]
    placed += [w for _, wrongs in DISCRIMINATION.values() for w in wrongs]
    placed += sorted(OTHER_ROWS)
    assert sorted(placed) == sorted(name for name, _, _ in CALIBRATION)


def test_a_flaky_test_adds_only_flaky_test_to_the_real_fix_s_verdict(
    state: Calibration, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 25: the same real fix, on the package with one flaky test, is not a hard deny: its
    reasons are the real fix's plus flaky-test (waivable), naming the test."""
    real = verified(state, capsys, "pager-last-page")
    flaky = verified(state, capsys, "pager-flaky-test")
    codes = {r["code"] for r in flaky["reasons"]}
    assert codes == {r["code"] for r in real["reasons"]} | {"flaky-test"}
    (reason,) = [r for r in flaky["reasons"] if r["code"] == "flaky-test"]
    assert any("pages 10000 items within 50 ms" in d for d in reason["details"]), reason
    assert gate(state, "pager-flaky-test", "regression")["details"]["regressions"] == []


def weaker_or_equal(wrong: dict[str, Any], real: dict[str, Any]) -> bool:
    codes = {r["code"] for r in wrong["reasons"]}
    return wrong["decision"] == real["decision"] and codes <= {r["code"] for r in real["reasons"]}


@pytest.mark.parametrize("bug", sorted(DISCRIMINATION))
def test_no_wrong_fix_gets_the_real_fix_s_verdict_or_a_weaker_one(
    state: Calibration, capsys: pytest.CaptureFixture[str], bug: str
) -> None:
    real_name, wrongs = DISCRIMINATION[bug]
    real = verified(state, capsys, real_name)
    hard = {code for code, can_waive in waivable().items() if not can_waive}
    for name in wrongs:
        wrong = verified(state, capsys, name)
        codes = {r["code"] for r in wrong["reasons"]}
        assert wrong["decision"] == "deny", (name, wrong["reasons"])
        assert codes & hard, f"{name} is denied only by waivable codes: {sorted(codes)}"
        assert not weaker_or_equal(wrong, real), (name, sorted(codes), real["reasons"])
