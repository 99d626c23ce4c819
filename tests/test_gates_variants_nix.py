"""The variants gate with real builds against the fixture fork (one state for the module).

The symptom-hiding fix (cparse-poc-special-case: `main()` skips lines exactly as long as the
PoC's, `parse_line()` untouched) passes every claim of `trace verify` with only the PoC
reproducer; the variants gate denies it, and the still-failing variant is an ordinary
reproducer in the variant run's output (one derivation per side runs every variant). The correct
fix (cparse-key-overflow) passes. A second run builds nothing: the variants are derivations.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.gatekit import CANDIDATES, outcome, run_candidate

ASAN = {"tool": "AddressSanitizer", "kind": "heap-buffer-overflow"}

pytestmark = pytest.mark.nix


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("variants-state")


def test_a_symptom_hiding_fix_is_denied_by_its_variants(state: Path) -> None:
    result = run_candidate("cparse-poc-special-case", state)
    assert outcome(result, "expectation")["passed"] is True  # the PoC alone lets it through
    gate = outcome(result, "gate-variants")
    assert (gate["passed"], gate["measurable"]) == (False, True)
    assert gate["reasons"] == ["variant-still-fails"]
    details = gate["details"]
    assert details["poc"]["invocations"] == [
        {"target": "bin/cparse", "kind": "program", "args": ["long-key.conf"], "stdin": False}
    ]
    first = details["still_failing"][0]
    assert first["id"] == "v001-length" and "40 -> 41 bytes" in first["description"]
    assert first["post_crash"] == ["AddressSanitizer: heap-buffer-overflow"]
    assert details["pre_fix_crashes"] == details["variants"] == 24
    # one derivation per side ran every variant, each with its own record (in plan order)
    batch = outcome(result, "variant-post")
    assert batch["schema"] == "trace.variant-runs/v1"
    assert [r["index"] for r in batch["runs"]] == list(range(1, 25))
    assert len({r["id"] for r in batch["runs"]}) == 24
    assert not any(s.startswith("variant-post@") for s in result.steps)
    # the variant is a replayable reproducer: the run's output holds its script and data, and
    # its record shows the target's own sanitizer report on the post-fix build
    step = result.steps["variant-post"]
    variant = Path(step.out) / "v" / str(first["index"]) / "variant"
    assert (variant / "repro.sh").read_text().splitlines()[-1] == (
        "\"$TARGET/bin/cparse\" 'long-key.conf'"
    )
    key = (variant / "data" / "long-key.conf").read_bytes().split(b"\n")[1].split(b"=")[0]
    assert key == b"k" * 41
    (record,) = [r["outcome"] for r in batch["runs"] if r["index"] == first["index"]]
    assert record["target_ran"] and record["invocations"][0]["sanitizer"] == ASAN
    pre = outcome(result, "variant-pre")
    assert all(r["outcome"]["invocations"][0]["sanitizer"] == ASAN for r in pre["runs"])
    assert "still crash post-fix (replay: variants/v001-length/" in details["summary"]

    again = run_candidate(
        "cparse-poc-special-case", state
    )  # variants are derivations: nothing rebuilt
    assert {s.status for s in again.steps.values()} <= {"cached", "reused"}


def test_the_correct_fix_passes_its_variants(state: Path) -> None:
    result = run_candidate("cparse-key-overflow", state)
    gate = outcome(result, "gate-variants")
    runs = outcome(result, "variant-post")["runs"]  # each variant's own run, none crashed
    assert len(runs) == 24 and all(r["outcome"]["target_ran"] for r in runs)
    assert not any(r["outcome"]["sanitizer"] for r in runs)
    assert (gate["passed"], gate["reasons"], gate["score"]) == (True, [], 1.0)
    assert gate["details"]["still_fails"] == 0
    assert gate["details"]["pre_fix_crashes"] == 24  # every variant reaches the bug pre-fix


def test_the_wrong_constant_fix_is_also_denied_by_its_variants(state: Path) -> None:
    gate = outcome(run_candidate("cparse-wrong-fix", state), "gate-variants")  # KEY_MAX 16 -> 64
    assert gate["reasons"] == ["variant-still-fails"]
    lengths = sorted(r["description"].rsplit(" ", 2)[-2] for r in gate["details"]["still_failing"])
    assert lengths == ["104", "80"]  # keys past the new 64-byte buffer, none below it


def test_a_poc_on_stdin_is_varied_through_stdin(state: Path, tmp_path: Path) -> None:
    """The harness records the target's stdin (here a file); the variants vary it and feed
    each variant's bytes on stdin again."""
    cand = tmp_path / "cand"
    shutil.copytree(CANDIDATES / "cparse-poc-special-case", cand)
    (cand / "repro.sh").write_text('"$TARGET/bin/cparse" /dev/stdin < long-key.conf\n')
    result = run_candidate(cand / "candidate.toml", state)
    pre = outcome(result, "pre-fix-run@1")["invocations"][0]
    assert pre["stdin"]["complete"] and pre["stdin"]["size"] == 57
    gate = outcome(result, "gate-variants")
    assert gate["reasons"] == ["variant-still-fails"]
    assert gate["details"]["poc"]["invocations"][0]["stdin"] is True
    first = gate["details"]["still_failing"][0]
    assert first["description"].startswith("stdin:0: run of b'k' at 10: 40 -> 41 bytes")
    step = result.steps["variant-post"]
    variant = Path(step.out) / "v" / str(first["index"]) / "variant"
    script = (variant / "repro.sh").read_text().splitlines()[-1]
    assert script == "\"$TARGET/bin/cparse\" '/dev/stdin' < stdin-0.bin"
