"""Issue 26: coverage by statement. A changed clause of a multi-line `||` condition counts as
executed when its condition was evaluated (gcc counts the clause's test on the line before and
leaves the clause's own line at 0: libmodbus' CVE-2022-0367 fix read 0/1 with its PoC); branch
arcs of the changed statements are reported beside line coverage."""

from __future__ import annotations

import json
from pathlib import Path

from trace_sandbox.gates.coverage_gate import evaluate
from trace_sandbox.gates.statements import spans, statement_of

REPO = Path(__file__).resolve().parent.parent
FORK = REPO / "tests" / "fixtures" / "fork"
CAND = FORK / "trace" / "candidates" / "cregs-write-address"
SRC = FORK / "pkgs" / "cregs" / "src" / "cregs.c"

# what gcov -b printed for cregs.c with the fix applied, run on the PoC (requests.txt): line 20,
# the added `mapping_address_write < 0 ||`, count 0; its test is among line 19's branch arcs
GCOV = {
    "executable": [15, 16, 17, 18, 19, 20, 21, 22, 23],
    "executed": [15, 18, 19, 22, 23],
    "branches": {"15": [4, 8], "18": [1, 2], "19": [2, 4], "21": [0, 2]},
}


def test_spans_are_the_outermost_parentheses_across_lines() -> None:
    text = 'if (a ||\n    b(")") ||\n    c) { x(1); }\ncall(/* ( */ 1,\n     2);\none(2);\n'
    assert spans(text) == [(1, 3), (4, 5)]
    assert statement_of(2, spans(text)) == (1, 3) and statement_of(6, spans(text)) is None


def _gate(tmp_path: Path, landing: bool, gcov: dict[str, object] = GCOV) -> dict[str, object]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    cov = tmp_path / "coverage.json"
    doc = {"schema": "trace.coverage/v1", "build": "ok", "tools": ["gcov"]}
    cov.write_text(json.dumps(doc | {"files": {"cregs.c": gcov}}))
    cfg: dict[str, object] = {
        "patches": [str(CAND / "fix.patch")],
        "policy": {"name": "p", "version": "1", "thresholds": {"min_score": 0.8}},
        "coverage": str(cov),
    }
    if landing:  # the patched-source step's output: landing.json beside files/<path>
        out = tmp_path / "patched"
        (out / "files").mkdir(parents=True)
        patched = SRC.read_text().replace(
            "               (mapping_address + nb) > NB_REGISTERS ||\n",
            "               (mapping_address + nb) > NB_REGISTERS ||\n"
            "               mapping_address_write < 0 ||\n",
        )
        (out / "files" / "cregs.c").write_text(patched)
        (out / "landing.json").write_text("{}")
        cfg["landing"] = str(out / "landing.json")
    return evaluate(cfg)


def test_a_clause_of_a_multi_line_condition_counts_as_its_statement(tmp_path: Path) -> None:
    got = _gate(tmp_path, landing=True)
    details = got["details"]
    assert isinstance(details, dict)
    assert (got["score"], got["reasons"]) == (1.0, [])
    (f,) = details["files"]
    assert f["covered"] == [20] and f["statements"] == {"20": [18, 21]}
    # branch arcs of the statement (lines 18-21): 1+2+0 of 2+4+2 taken
    assert details["branches"] == {"taken": 3, "total": 8}
    assert "branch(es) of the changed statements taken" in str(details["summary"])
    # by gcc's line table alone (no patched source to read the statement from): 0 of 1
    alone = _gate(tmp_path / "alone", landing=False)
    assert (alone["score"], alone["reasons"]) == (0.0, ["coverage-below-threshold"])


def test_a_statement_that_never_ran_does_not_count(tmp_path: Path) -> None:
    never = {"executable": GCOV["executable"], "executed": [15, 22, 23]}
    got = _gate(tmp_path, landing=True, gcov=never)
    assert (got["score"], got["reasons"]) == (0.0, ["coverage-below-threshold"])
