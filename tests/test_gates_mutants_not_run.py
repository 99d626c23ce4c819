"""The mutants are not run when a post-fix run fails its oracles (issue 30, speed;
trace_sandbox/gates/mutants_not_run.py): the mutation gate's answer is then
`mutation.post-fix-fails` whatever the mutants do. The mutant-runs step takes that decision from
the post-fix runs' records with the gate's own judgement, writes a `not-run` record per mutant,
and the gate's verdict and reason codes are those the mutants' runs gave. Real harness runs
outside Nix (tests/test_gates_mutant_runs.py's fake package); the real builds are the
calibration rows (pager-relation-special-case, cparse-reject-everything, and
tests/test_outside_sqlparse.py's sqlparse-suppress-flatten)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.test_gates_mutant_runs import build, files, setup
from tests.test_gates_records import JUDGE, PTR, policy, run_record
from trace_sandbox.gates import oracle
from trace_sandbox.gates.mutant_variants import run_mutants
from trace_sandbox.gates.mutants_not_run import not_run_why, write_not_run
from trace_sandbox.gates.mutation import evaluate, write_mutants

__all__ = ["build", "setup"]  # the fixtures, shared with test_gates_mutant_runs

FAILS = run_record(1)  # a post-fix run whose target exits 1: not acceptable under no [accept]
PASSES = run_record(0)


def post_runs(tmp: Path, *records: dict[str, Any]) -> list[str]:
    """post-fix-run step outputs (their outcome.json), one per record."""
    dirs = []
    for n, rec in enumerate(records, 1):
        d = tmp / "post-fix-run" / str(n)
        d.mkdir(parents=True)
        (d / "outcome.json").write_text(json.dumps({**rec, "run": n}))
        dirs.append(str(d))
    return dirs


def test_a_post_fix_run_that_fails_its_oracles_runs_no_mutant(
    tmp_path: Path, build: Path, setup: tuple[dict[str, Any], dict[str, str]]
) -> None:
    """m2 crashes on the PoC and m4 on its variant: run, they would leave SIGSEGV records. With
    a post-fix run that fails, none is checked or run, and every record says why."""
    cfg, env = setup
    cfg = {**cfg, "post_runs": post_runs(tmp_path, PASSES, FAILS, PASSES)}
    out = tmp_path / "batch"
    summary = run_mutants(cfg, env, str(out), parallel=2)
    why = summary["not_run"]
    assert why.startswith("not run: 1 of 3 post-fix reproducer run(s) fail their oracles (run 2: ")
    assert "mutation.post-fix-fails whatever the mutants do" in why
    got = files(out)
    for m in cfg["mutants"]:
        n = m["index"]
        assert got[f"{n}/check.json"] == {"status": "not-run", "why": why}
        assert got[f"{n}/outcome.json"] == {
            "schema": "trace.not-run/v1",
            "run": 1,
            "side": "post",
            "target_ran": False,
            "not_run": why,
        }
        assert got[f"{n}/mutant.json"] == json.loads(Path(m["mutant"], "mutant.json").read_text())
    records = ("check.json", "mutant.json", "outcome.json")
    want = [f"{n}/{f}" for n in (1, 2, 3, 4) for f in records] + ["outcome.json"]
    assert sorted(got) == sorted(want)  # no variants/, variants.json nor survivor.json: nothing ran
    assert got["outcome.json"] == summary and summary["mutants"] == 4
    assert list(build.iterdir()) == []  # no run directory was ever made


def test_post_fix_runs_that_pass_leave_every_record_as_it_was(
    tmp_path: Path, setup: tuple[dict[str, Any], dict[str, str]]
) -> None:
    """Every post-fix run passes: the step runs exactly what it ran without the post-fix runs,
    and writes the same records byte for byte."""
    cfg, env = setup
    before = tmp_path / "before"
    run_mutants(cfg, env, str(before), parallel=2)
    after = tmp_path / "after"
    given = {**cfg, "post_runs": post_runs(tmp_path, PASSES, PASSES)}
    run_mutants(given, env, str(after), parallel=2)
    old = {p.relative_to(before): p.read_bytes() for p in before.rglob("*") if p.is_file()}
    new = {p.relative_to(after): p.read_bytes() for p in after.rglob("*") if p.is_file()}
    assert new == old
    assert b"SIGSEGV" in old[Path("2/outcome.json")]  # the mutants did run


@pytest.mark.parametrize(
    "records",
    [
        [PASSES],
        [PASSES, PASSES, PASSES],
        [FAILS],
        [PASSES, FAILS],
        [{**PASSES, "build": "failed", "target_ran": False}],
        [{**PASSES, "timed_out": True}],
        [run_record(None, signal="SIGSEGV"), PASSES],
        [run_record(2)],
    ],
)
def test_the_step_skips_exactly_when_the_gate_says_post_fix_fails(
    tmp_path: Path, records: list[dict[str, Any]]
) -> None:
    """The step's decision (not_run_why) and the gate's rule come from one judgement of the
    same records: no mutant is skipped unless the gate's answer is mutation.post-fix-fails."""
    dirs = post_runs(tmp_path, *records)
    write_mutants({"patches": [str(PTR)]}, str(tmp_path / "mutants"))
    mutants = [
        {"index": n, "mutant": str(tmp_path / "mutants" / str(n))} for n in range(1, 7)
    ]  # cparse-ptr's fix: six mutants
    why = not_run_why(oracle, dirs, {})
    gate_cfg = {"patches": [str(PTR)], "policy": policy(0.7), "judge": JUDGE}
    gate_cfg["post_runs"] = dirs
    if why is None:  # the mutants run: what they do decides (here: all killed)
        gate_cfg["mutant_runs"] = [run_dirs(tmp_path, mutants, run_record(1))]
        assert evaluate(gate_cfg)["details"]["rules"] == []
    else:
        write_not_run(mutants, str(tmp_path / "mr"), why)
        gate_cfg["mutant_runs"] = [str(tmp_path / "mr" / str(m["index"])) for m in mutants]
        assert evaluate(gate_cfg)["details"]["rules"] == ["mutation.post-fix-fails"]


def run_dirs(tmp: Path, mutants: list[dict[str, Any]], record: dict[str, Any]) -> str:
    """A mutant-runs output whose mutants all ran and left `record`."""
    out = tmp / "ran"
    runs = []
    for m in mutants:
        d = out / str(m["index"])
        d.mkdir(parents=True)
        meta = Path(m["mutant"], "mutant.json").read_text()
        (d / "mutant.json").write_text(meta)
        (d / "outcome.json").write_text(json.dumps(record))
        (d / "check.json").write_text(json.dumps({"status": "run"}))
        runs.append({"index": m["index"]})
    schema = "trace.mutant-runs/v1"
    (out / "outcome.json").write_text(json.dumps({"schema": schema, "runs": runs}))
    return str(out)


def test_the_gate_gives_the_same_verdict_and_shows_not_run_not_zero_killed(
    tmp_path: Path,
) -> None:
    """Against a failing post-fix run the gate's verdict, reasons and score are those the run
    mutants gave (some killed, some survived); its record lists the mutants as not run, its
    counts None, never 0 killed. Not-run records beside post-fix runs that all pass are a
    broken pipeline: an error, never a verdict."""
    write_mutants({"patches": [str(PTR)]}, str(tmp_path / "mutants"))
    mutants = [{"index": n, "mutant": str(tmp_path / "mutants" / str(n))} for n in range(1, 7)]
    failing = post_runs(tmp_path, PASSES, FAILS)
    cfg = {"patches": [str(PTR)], "policy": policy(0.7), "judge": JUDGE, "post_runs": failing}
    ran = evaluate({**cfg, "mutant_runs": [run_dirs(tmp_path, mutants, PASSES)]})
    why = not_run_why(oracle, failing, {})
    assert why is not None
    write_not_run(mutants, str(tmp_path / "mr"), why)
    not_run = evaluate({**cfg, "mutant_runs": mr(tmp_path)})
    keys = ("schema", "gate", "passed", "measurable", "score", "reasons")
    assert {k: not_run[k] for k in keys} == {k: ran[k] for k in keys}
    assert not_run["reasons"] == ["mutation-not-measurable"] and not_run["score"] is None
    d = not_run["details"]
    assert d["rules"] == ran["details"]["rules"] == ["mutation.post-fix-fails"]
    assert [r["status"] for r in d["results"]] == ["not-run"] * 6
    assert (d["killed"], d["survived"], d["did_not_build"]) == (None, None, None)
    assert d["not_run"] == {"mutants": 6, "why": why}
    assert d["summary"].startswith("6 not run (none killed, none survived); the unmutated")
    assert ran["details"]["summary"].startswith("6 survived; the unmutated")
    with pytest.raises(ValueError, match="were not run, yet every post-fix run passes"):
        evaluate(
            {**cfg, "post_runs": post_runs(tmp_path / "ok", PASSES), "mutant_runs": mr(tmp_path)}
        )


def mr(tmp: Path) -> list[str]:
    return [str(tmp / "mr" / str(n)) for n in range(1, 7)]
