"""`trace decide`: the command line over a judged verify result, and once over real builds.

`trace decide` takes its verdict only from the cached builds (`engine.pipeline.build`), never from
a result file. The CLI tests replace that one source with an explicit fake (the verify result
document of test_policy_signing and a run whose outcomes hold its gate records) and run the real
command; the nix test runs the real `trace verify` on the fixture fork and decides on its builds.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from engine.cli import main
from engine.pipeline.values import Judged
from engine.run import RunResult, StepResult
from engine.verify_result import VerifyResult
from tests.test_policy_signing import POLICY, gates_doc, verify_doc
from tests.verified import VerifiedFork
from tests.waiverkit import make_key, write_maintainers

REPO = Path(__file__).resolve().parent.parent
FORK = REPO / "tests" / "fixtures" / "fork"
PAGER = FORK / "trace" / "candidates" / "pager-last-page" / "candidate.toml"
PAGER_ID = "TRACE-2026-0002-pager"


def trace(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def fake_builds(cand: Any, doc: dict[str, Any]) -> Judged:
    """An explicit fake of `verified_cached`: the result as judged, and a run whose gate step
    wrote the result's expectation record and whose post-fix steps were checked deterministic."""
    result = VerifyResult.model_validate(doc)
    steps = {
        sid: StepResult(id=sid, key=f"k-{sid}", status="cached", deterministic=True)
        for sid in ("post-fix", "post-fix-run@1", "post-fix-run@2", "post-fix-run@3")
    }
    assert result.expectation is not None
    outcome = result.expectation.model_dump(mode="json", by_alias=True)
    steps["expectation"] = StepResult(id="expectation", key="k", status="cached", outcome=outcome)
    run = RunResult(graph="trace.toml", steps=steps)
    now = dt.datetime.now(dt.UTC)
    return Judged(cand, None, run, (now, now), result)  # type: ignore[arg-type]


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A passing verify result for the pager candidate as the builds' verdict, plus gate records
    in the state dir."""
    doc = verify_doc()
    doc["candidate"] = PAGER_ID

    def verified_cached(cand: Any, fork: Path, state: Path, **_: Any) -> Any:
        assert cand.spec.id == PAGER_ID and state == tmp_path.resolve()
        return fake_builds(cand, doc)

    monkeypatch.setattr("engine.pipeline.build.verified_cached", verified_cached)
    for name, record in gates_doc().items():
        (tmp_path / f"{name}.json").write_text(json.dumps(record))
    return tmp_path


# every gate the shipped policy requires, as the state fixture writes them
ALL_GATES = tuple(gates_doc())


def gate_args(state: Path, *names: str) -> list[str]:
    return [a for n in names for a in ("--gate", str(state / f"{n}.json"))]


def test_decide_allows_and_writes_the_record(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["decide", str(PAGER), "--state-dir", str(state), "--today", "2026-11-29"]
    args += gate_args(state, *ALL_GATES)
    code, out, _ = trace(capsys, *args)
    assert code == 0, out
    assert out.startswith(f"ALLOW  {PAGER_ID}  as of 2026-11-29")
    assert "routing: human-review-required (rule reviewed-fix, trace-routing 1.0.0)" in out
    record = json.loads((state / "decisions" / f"{PAGER_ID}.json").read_text())
    assert record["decision"] == "allow" and record["reasons"] == []
    # the record names what it read, by digest: the payload files the judged result and the
    # run's gate records become in a bundle, and each --gate file as given
    read = {e["path"] for e in record["evidence"]}
    assert read == {
        "payload/verify-result.json",
        "payload/gates/expectation.json",
        "payload/gates/determinism.json",
        *(str(state / f"{g}.json") for g in ALL_GATES),
    }
    assert not list((state / "decisions").glob(".*.tmp"))  # atomic write left no temp file


def test_decide_denies_with_every_reason_and_json(
    state: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    mutation = json.loads((state / "mutation.json").read_text())
    (state / "mutation.json").write_text(json.dumps({**mutation, "score": 0.25}))
    out_file = tmp_path / "decision.json"
    args = ["decide", str(PAGER), "--state-dir", str(state), "--today", "2026-11-29"]
    args += ["--out", str(out_file), *gate_args(state, "scope", "mutation", "fault-site")]
    code, out, _ = trace(capsys, *args)
    assert code == 1
    assert out.startswith("DENY")
    assert "DENY   mutation-score-below-threshold" in out and "score 0.25 < 0.8" in out
    absent = sorted(set(ALL_GATES) - {"scope", "mutation", "fault-site"})
    assert {"coverage", "regression", "variants"} <= set(absent)
    assert "DENY   evidence-missing" in out
    assert "[" + ", ".join(f"gate:{g}" for g in absent) + "]" in out

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
    """`trace waive` signs a waiver with a maintainer's key; decide applies it until it expires.
    The same waiver as an unsigned TOML entry lifts nothing (a warning names the file)."""
    alice = make_key(tmp_path, "alice")
    maintainers = write_maintainers(tmp_path / "maintainers.toml", {"alice": alice})
    folder = tmp_path / "waivers"
    code, out, err = trace(
        capsys,
        "waive",
        str(PAGER),
        "coverage-not-measurable",
        "--justification",
        "The reviewer traced the changed lines by hand.",
        "--key",
        str(alice),
        "--maintainers",
        str(maintainers),
        "--today",
        "2026-12-01",
        "--expires",
        "2026-12-31",
        "--out",
        str(folder / "cov.json"),
    )
    assert code == 0, err
    assert "signed by maintainer alice" in out
    coverage = json.loads((state / "coverage.json").read_text())
    unmeasurable = {**coverage, "measurable": False, "score": None}
    (state / "coverage.json").write_text(json.dumps(unmeasurable))
    args = ["decide", str(PAGER), "--state-dir", str(state), "--maintainers", str(maintainers)]
    args += gate_args(state, *ALL_GATES)
    code, out, _ = trace(capsys, *args, "--waivers", str(folder), "--today", "2026-12-31")
    assert code == 0, out
    assert "WAIVED coverage-not-measurable" in out
    assert "waiver applied: coverage-not-measurable until 2026-12-31 (signed by alice" in out

    code, out, _ = trace(capsys, *args, "--waivers", str(folder), "--today", "2027-01-01")
    assert code == 1
    assert "DENY   coverage-not-measurable" in out
    assert "waiver expired: coverage-not-measurable" in out

    toml = tmp_path / "waivers.toml"
    toml.write_text((POLICY / "waivers.toml").read_text().replace("example-candidate", PAGER_ID))
    code, out, err = trace(capsys, *args, "--waivers", str(toml), "--today", "2026-12-31")
    assert code == 1 and "DENY   coverage-not-measurable" in out
    assert "waiver IGNORED: waivers.toml: unsigned" in out
    assert f"trace: warning: {toml}: waiver ignored: unsigned" in err


def test_waive_refuses_what_no_waiver_may_lift(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    alice = make_key(tmp_path, "alice")
    base = ["waive", str(PAGER), "--key", str(alice), "--out", str(tmp_path / "w.json")]
    long = ["--justification", "The reviewer traced the changed lines by hand."]
    code, _, err = trace(capsys, *base[:2], "pre-fix-did-not-fail", *base[2:], *long)
    assert code == 2 and "cannot be waived" in err
    code, _, err = trace(capsys, *base[:2], "no-such-code", *base[2:], *long)
    assert code == 2 and "is not a reason code" in err
    code, _, err = trace(capsys, *base[:2], "flaky", *base[2:], "--justification", "ok")
    assert code == 2 and "at least 20 characters" in err
    # trace's own signing key (the signer lock beside the signing policy) never signs one
    policy = tmp_path / "policy"
    policy.mkdir()
    for f in POLICY.glob("*.toml"):
        shutil.copy(f, policy / f.name)
    lock = {"schema": "trace.signing-identity/v1", "version": "1.0.0"}
    lock["keys"] = [{"name": "trace", "public_key": "../alice.key.pub"}]  # type: ignore[assignment]
    (policy / "signing-identity.json").write_text(json.dumps(lock))
    signing = ["--signing", str(policy / "signing.toml")]
    code, _, err = trace(capsys, *base[:2], "flaky", *base[2:], *long, *signing)
    assert code == 2 and "trace's own signing key" in err
    assert not (tmp_path / "w.json").exists()


def test_decide_input_errors(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = trace(capsys, "decide", str(PAGER), "--today", "29.11.2026")
    assert code == 2 and "use YYYY-MM-DD" in err

    bad = state / "bad.json"
    bad.write_text('{"schema": "trace.verify/v1"}')
    args = ["decide", str(PAGER), "--state-dir", str(state), "--result", str(bad)]
    code, _, err = trace(capsys, *args)
    assert code == 2 and "not a verify result (trace.verify/v1)" in err

    # a --result file is only a cross-check of the builds' verdict: one that differs is refused
    forged = verify_doc() | {"candidate": PAGER_ID}
    forged["pre"]["runs"][0]["exit_code"] = 0
    bad.write_text(json.dumps(forged))
    code, _, err = trace(capsys, *args)
    assert code == 2 and "the result file does not match the builds" in err
    assert "pre.runs.0.exit_code" in err
    assert not (state / "decisions").exists()  # no decision recorded

    waivers = state / "w.toml"
    waivers.write_text(
        '[policy]\nname = "w"\nversion = "1"\nschema = "trace.waivers/v1"\n[[waivers]]\n'
        'candidate = "x"\nreason = "no-such-code"\njustification = "long enough, really."\n'
        'expires = 2027-01-01\napproved_by = "me"\n'
    )
    code, _, err = trace(capsys, "decide", str(PAGER), "--waivers", str(waivers))
    assert code == 2 and f"{waivers}:7, key 'waivers.0.reason'" in err


def test_no_builds_is_refused_not_allowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real evidence source (no fake): nothing built in this state dir, so nothing to judge.
    A result file lying around does not change that."""
    doc = verify_doc() | {"candidate": PAGER_ID}
    (tmp_path / "verify").mkdir()
    (tmp_path / "verify" / f"{PAGER_ID}.json").write_text(json.dumps(doc))
    code, out, err = trace(capsys, "decide", str(PAGER), "--state-dir", str(tmp_path))
    assert code == 2 and out == ""
    assert "not verified, or its inputs changed since" in err
    assert "never verified with the state dir" in err and "run `trace verify" in err
    assert not (tmp_path / "decisions").exists()


def _signing_only_expectation(tmp_path: Path) -> Path:
    shutil.copy(POLICY / "reasons.toml", tmp_path / "reasons.toml")
    text = (POLICY / "signing.toml").read_text()
    text = text[: text.index("\n[gates.scope]\n") + 1]  # the table, not a comment
    (tmp_path / "signing.toml").write_text(text)
    return tmp_path / "signing.toml"


@pytest.mark.nix
def test_decide_on_a_real_verify_result(
    verified_fork: VerifiedFork, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Real builds: verify the pager fix (the session's one verify of it, tests/verified.py),
    then decide from those builds (in the index)."""
    name = "pager-last-page"
    assert verified_fork.verify(name) == 0, verified_fork.outputs.get(name)
    state, pager = verified_fork.state, str(verified_fork.candidate(name))
    result = json.loads((state / "verify" / f"{PAGER_ID}.json").read_text())
    assert result["passed"] is True

    # the shipped policy: every gate ran under it, the pager fix passes them all: allow
    code, out, _ = trace(capsys, "decide", pager, "--state-dir", str(state), "--json")
    doc: dict[str, Any] = json.loads(out)
    assert code == 0 and doc["decision"] == "allow", doc["reasons"]

    # the same policy name and version without the gates' thresholds is not the policy the gates
    # applied: the graph is loaded with the deciding policy, so the gate steps (their thresholds
    # are in their keys) were never verified under it, and decide refuses to judge them
    signing = _signing_only_expectation(tmp_path)
    args = ["--state-dir", str(state), "--signing", str(signing), "--json"]
    code, out, err = trace(capsys, "decide", pager, *args)
    assert code == 2 and out == "", out
    assert "verified under another signing policy" in err, err
    # gate-regression too: [gates.regression] reruns is one of its thresholds
    listed = err.split("(", 1)[-1]
    for step in ("gate-coverage", "gate-fault-site", "gate-mutation", "gate-regression"):
        assert step in listed, err
    # the fuzzing gate's steps carry its budget ([gates.fuzz] executions, seed) in their keys
    assert "gate-fuzz" in listed and "fuzz-plan" in listed, err
    assert "(same name and version, other thresholds)" in err
