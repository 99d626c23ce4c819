"""`trace decide`: the command line over a written verify result, and once over a real one.

The CLI tests feed a verify result document (the fake of test_policy_signing) through the real
command; the nix test runs the real `trace verify` on the fixture fork and decides on its result.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from engine.cli import main
from tests.test_policy_signing import POLICY, gates_doc, verify_doc

REPO = Path(__file__).resolve().parent.parent
FORK = REPO / "tests" / "fixtures" / "fork"
PAGER = FORK / "trace" / "candidates" / "pager-last-page" / "candidate.toml"
PAGER_ID = "TRACE-2026-0002-pager"


def trace(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """A state dir holding a passing verify result for the pager candidate, plus gate records."""
    doc = verify_doc()
    doc["candidate"] = PAGER_ID
    (tmp_path / "verify").mkdir()
    (tmp_path / "verify" / f"{PAGER_ID}.json").write_text(json.dumps(doc))
    for name, record in gates_doc().items():
        (tmp_path / f"{name}.json").write_text(json.dumps(record))
    return tmp_path


def gate_args(state: Path, *names: str) -> list[str]:
    return [a for n in names for a in ("--gate", str(state / f"{n}.json"))]


def test_decide_allows_and_writes_the_record(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["decide", str(PAGER), "--state-dir", str(state), "--today", "2026-11-29"]
    code, out, _ = trace(capsys, *args, *gate_args(state, "scope", "mutation", "coverage"))
    assert code == 0, out
    assert out.startswith(f"ALLOW  {PAGER_ID}  as of 2026-11-29")
    assert "routing: human-review-required (rule reviewed-fix, trace-routing 1.0.0)" in out
    record = json.loads((state / "decisions" / f"{PAGER_ID}.json").read_text())
    assert record["decision"] == "allow" and record["reasons"] == []
    # the record names exactly the files it read, by digest
    read = {Path(e["path"]).name for e in record["evidence"]}
    assert read == {f"{PAGER_ID}.json", "scope.json", "mutation.json", "coverage.json"}
    assert not list((state / "decisions").glob(".*.tmp"))  # atomic write left no temp file


def test_decide_denies_with_every_reason_and_json(
    state: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    mutation = json.loads((state / "mutation.json").read_text())
    (state / "mutation.json").write_text(json.dumps({**mutation, "score": 0.25}))
    out_file = tmp_path / "decision.json"
    args = ["decide", str(PAGER), "--state-dir", str(state), "--today", "2026-11-29"]
    args += ["--out", str(out_file), *gate_args(state, "scope", "mutation")]
    code, out, _ = trace(capsys, *args)
    assert code == 1
    assert out.startswith("DENY")
    assert "DENY   mutation-score-below-threshold" in out and "score 0.25 < 0.8" in out
    assert "DENY   evidence-missing" in out and "[gate:coverage]" in out

    code, out, _ = trace(capsys, *args, "--json")
    assert code == 1
    doc = json.loads(out)
    assert doc == json.loads(out_file.read_text())
    assert [r["code"] for r in doc["reasons"]] == [
        "evidence-missing",
        "mutation-score-below-threshold",
    ]


def test_decide_with_waivers_lists_them(
    state: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    waivers = tmp_path / "waivers.toml"
    text = (POLICY / "waivers.toml").read_text().replace("example-candidate", PAGER_ID)
    waivers.write_text(text)
    coverage = json.loads((state / "coverage.json").read_text())
    unmeasurable = {**coverage, "measurable": False, "score": None}
    (state / "coverage.json").write_text(json.dumps(unmeasurable))
    args = ["decide", str(PAGER), "--state-dir", str(state), "--waivers", str(waivers)]
    args += gate_args(state, "scope", "mutation", "coverage")
    code, out, _ = trace(capsys, *args, "--today", "2026-12-31")
    assert code == 0, out
    assert "WAIVED coverage-not-measurable" in out
    assert "waiver applied: coverage-not-measurable until 2026-12-31" in out

    code, out, _ = trace(capsys, *args, "--today", "2027-01-01")
    assert code == 1
    assert "DENY   coverage-not-measurable" in out
    assert "waiver expired: coverage-not-measurable" in out


def test_decide_input_errors(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = trace(capsys, "decide", str(PAGER), "--today", "29.11.2026")
    assert code == 2 and "use YYYY-MM-DD" in err

    bad = state / "verify" / f"{PAGER_ID}.json"
    bad.write_text('{"schema": "trace.verify/v1"}')
    code, _, err = trace(capsys, "decide", str(PAGER), "--state-dir", str(state))
    assert code == 2 and "verify result does not match its schema" in err

    waivers = state / "w.toml"
    waivers.write_text(
        '[policy]\nname = "w"\nversion = "1"\nschema = "trace.waivers/v1"\n[[waivers]]\n'
        'candidate = "x"\nreason = "no-such-code"\njustification = "long enough, really."\n'
        'expires = 2027-01-01\napproved_by = "me"\n'
    )
    code, _, err = trace(capsys, "decide", str(PAGER), "--waivers", str(waivers))
    assert code == 2 and f"{waivers}:7, key 'waivers.0.reason'" in err


def test_no_verify_result_is_a_deny_not_an_allow(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = trace(capsys, "decide", str(PAGER), "--state-dir", str(tmp_path))
    assert code == 1
    assert "DENY   evidence-missing" in out and "no verify result" in out


def _signing_only_expectation(tmp_path: Path) -> Path:
    shutil.copy(POLICY / "reasons.toml", tmp_path / "reasons.toml")
    text = (POLICY / "signing.toml").read_text()
    text = text[: text.index("[gates.scope]")]
    (tmp_path / "signing.toml").write_text(text)
    return tmp_path / "signing.toml"


@pytest.mark.nix
def test_decide_on_a_real_verify_result(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Real builds: verify the pager fix, then decide from the result file verify wrote."""
    state = tmp_path / "state"
    code, out, err = trace(capsys, "verify", str(PAGER), "--state-dir", str(state), "-q")
    assert code == 0, out + err
    result = json.loads((state / "verify" / f"{PAGER_ID}.json").read_text())
    assert result["passed"] is True

    # a signing policy that requires only what verify itself produces: allow
    signing = _signing_only_expectation(tmp_path)
    code, out, _ = trace(
        capsys, "decide", str(PAGER), "--state-dir", str(state), "--signing", str(signing)
    )
    assert code == 0, out
    assert out.startswith(f"ALLOW  {PAGER_ID}")

    # the shipped policy requires every gate: those verify did not record are missing -> deny
    code, out, _ = trace(capsys, "decide", str(PAGER), "--state-dir", str(state), "--json")
    doc: dict[str, Any] = json.loads(out)
    extra = result.get("gates") or {}  # gate records verify may carry beside the expectation
    present = {"expectation"} | (
        set(extra) if isinstance(extra, dict) else {g["gate"] for g in extra}
    )
    missing = {f"gate:{g}" for g in ("expectation", "scope", "mutation", "coverage")} - {
        f"gate:{g}" for g in present
    }
    reasons = {r["code"]: r for r in doc["reasons"]}
    if missing:
        assert code == 1 and doc["decision"] == "deny"
        assert set(reasons["evidence-missing"]["sources"]) == missing
    # whatever else: the real runs show the bug before and not after
    assert not {"pre-fix-did-not-fail", "post-fix-still-fails", "flaky"} & set(reasons)
