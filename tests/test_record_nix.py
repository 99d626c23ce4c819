"""`trace record` end to end with real builds (issue 32): the fixture's crashing cparse call
(cparse-key-overflow's PoC, long-key.conf) is recorded from a copy of the fixture fork and
minimised (every trial a cached step: a second record builds nothing); the written candidate,
with the real fix, is verified and ALLOWed by the signing policy (`trace decide`, as the
calibration table decides), and with cparse-wrong-fix's patch (KEY_MAX enlarged) it is DENIED;
bad input (an unknown package, a program the package does not install, a call that does not
fail) exits 2 with a hint and leaves no state behind."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tomli

from engine.cli import main

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "fixtures" / "fork"
KEY_OVERFLOW = FIXTURE / "trace" / "candidates" / "cparse-key-overflow"
WRONG_FIX = FIXTURE / "trace" / "candidates" / "cparse-wrong-fix" / "fix.patch"
GOOD = FIXTURE / "trace" / "candidates" / "cparse-reject-long-key" / "good.conf"

pytestmark = pytest.mark.nix


def copy_fork(where: Path) -> Path:
    fork = where / "fork"
    shutil.copytree(FIXTURE, fork, ignore=shutil.ignore_patterns(".trace", "result*"))
    return fork


@dataclass
class Recorded:
    fork: Path
    state: Path
    folder: Path
    out: str


def trace(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    got = capsys.readouterr()
    return code, got.out, got.err


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    base = tmp_path_factory.mktemp("record")
    fork, state = copy_fork(base), base / "state"
    shutil.copy(KEY_OVERFLOW / "long-key.conf", base / "long-key.conf")
    folder = fork / "trace" / "candidates" / "recorded-key-overflow"
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(base)  # the PoC is named relative to the working directory, as a user would
        out = io.StringIO()  # a module fixture has no capsys
        with contextlib.redirect_stdout(out):
            code = main(["record", "--fork", str(fork), "--state-dir", str(state),
                         "--package", "cparse", "--minimise", "--id", "recorded-key-overflow",
                         "--advisory", str(KEY_OVERFLOW / "advisory.json"),
                         "--patch", str(KEY_OVERFLOW / "fix.patch"),
                         "--", "cparse", "long-key.conf"])  # fmt: skip
    assert code == 0, out.getvalue()
    return Recorded(fork, state, folder, out.getvalue())


def test_the_recorded_call_is_minimised_to_the_keys_overflow_and_stated_in_expect(
    recorded: Recorded,
) -> None:
    spec = tomli.loads((recorded.folder / "candidate.toml").read_text())
    assert spec["expect"] == {"sanitizer": "AddressSanitizer: heap-buffer-overflow",
                              "exit_code": 1, "stderr": r"\bin parse_line\b"}  # fmt: skip
    assert spec["reproducer"]["data"] == ["long-key.conf"]
    # 57 bytes (a name line and a 40-byte key) -> a 16-byte key and its '=': one byte less of
    # either no longer overflows the 16-byte buffer
    assert (recorded.folder / "long-key.conf").read_bytes() == b"k" * 16 + b"="
    assert (recorded.folder / "repro.sh").read_text().splitlines()[-1] == (
        '"$TARGET/bin/cparse" long-key.conf'
    )
    record = json.loads((recorded.folder / "record.json").read_text())
    assert record["recorded"]["bytes"] == 57 and record["written"]["bytes"] == 17
    assert record["failure"]["function"] == "parse_line"
    assert record["minimisation"]["trials"] > 10
    [run] = record["run"]["invocations"]  # the recorded (unminimised) call, as the harness saw it
    assert run["args"] == ["long-key.conf"] and "WRITE of size 40" in run["stderr"]
    assert "recorded bin/cparse: AddressSanitizer: heap-buffer-overflow" in recorded.out


def test_a_second_record_is_answered_from_the_cache(
    recorded: Recorded, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(recorded.state.parent)
    again = recorded.fork / "trace" / "candidates" / "again"
    code, out, err = trace(capsys, "record", "--fork", str(recorded.fork), "--state-dir",
                           str(recorded.state), "--package", "cparse", "--minimise", "--out",
                           str(again), "--", "cparse", "long-key.conf")  # fmt: skip
    assert code == 0, out + err
    assert ", 0 built now" in out, out
    assert (again / "long-key.conf").read_bytes() == (
        recorded.folder / "long-key.conf"
    ).read_bytes()


def decided(recorded: Recorded, capsys: pytest.CaptureFixture[str], cand: Path) -> dict[str, Any]:
    code, out, err = trace(capsys, "verify", str(cand), "--state-dir", str(recorded.state), "-q")
    assert code == 0, out + err  # every claim holds: pre-fix overflows, post-fix exits 0
    code, out, err = trace(capsys, "decide", str(cand), "--state-dir", str(recorded.state),
                           "--json")  # fmt: skip
    assert out.strip(), err
    decision: dict[str, Any] = json.loads(out)
    assert code == (0 if decision["decision"] == "allow" else 1), err
    return decision


def test_the_recorded_candidate_with_the_real_fix_is_allowed(
    recorded: Recorded, capsys: pytest.CaptureFixture[str]
) -> None:
    decision = decided(recorded, capsys, recorded.folder / "candidate.toml")
    assert (decision["decision"], decision["reasons"]) == ("allow", [])


def test_the_recorded_candidate_with_a_wrong_fix_is_denied(
    recorded: Recorded, capsys: pytest.CaptureFixture[str]
) -> None:
    """KEY_MAX 16 -> 64: the minimised 16-byte key no longer overflows, so every claim holds;
    the gates see the rest (its mutants survive, a longer key still overflows, the patch is off
    the failing stack: the calibration row of cparse-wrong-fix)."""
    wrong = recorded.folder.parent / "recorded-wrong-fix"
    shutil.copytree(recorded.folder, wrong)
    shutil.copy(WRONG_FIX, wrong / "fix.patch")
    text = (wrong / "candidate.toml").read_text()
    (wrong / "candidate.toml").write_text(text.replace('"recorded-key-overflow"', '"wrong"'))
    decision = decided(recorded, capsys, wrong / "candidate.toml")
    codes = {r["code"] for r in decision["reasons"]}
    assert decision["decision"] == "deny"
    assert {"mutation-score-below-threshold", "variant-still-fails", "fix-away-from-fault"} <= codes


@pytest.mark.parametrize(
    ("package", "command", "message", "hint"),
    [
        ("nosuch", ["cparse", "long-key.conf"], "has no attribute 'nosuch'", "--package cparse"),
        ("cparse", ["nosuch", "long-key.conf"], "has no program bin/nosuch",
         "its programs: cparse"),
        ("cparse", ["cparse", "good.conf"], "did not fail under the harness (exit 0",
         "record a call that fails"),
    ],
)  # fmt: skip
def test_bad_input_exits_2_with_a_hint_and_leaves_no_state(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    package: str,
    command: list[str],
    message: str,
    hint: str,
) -> None:
    fork, state = copy_fork(tmp_path), tmp_path / "state"
    shutil.copy(KEY_OVERFLOW / "long-key.conf", tmp_path)
    shutil.copy(GOOD, tmp_path)
    monkeypatch.chdir(tmp_path)
    code, out, err = trace(capsys, "record", "--fork", str(fork), "--state-dir", str(state),
                           "--package", package, "--", *command)  # fmt: skip
    assert code == 2, out + err
    assert message in err and hint in err, err
    assert not state.exists() and not (fork / ".trace").exists()
    assert sorted(p.name for p in (fork / "trace" / "candidates").iterdir()) == sorted(
        p.name for p in (FIXTURE / "trace" / "candidates").iterdir()
    )
