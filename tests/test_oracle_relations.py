"""Relation oracles (issue 32): `[[accept.relation]]` / `[[expect.relation]]` relate what groups
of target invocations printed (or read), where no golden output exists. Unit tests of the judge
(trace_sandbox/gates/oracle.py) on hand-made run records, and of the candidate file's strict model;
the paginator fixtures (pager-relation-*) run end to end in the calibration table."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import Any

import pytest

from engine.candidate import load_candidate
from engine.errors import InputError
from trace_sandbox.gates.oracle import input_independent, judge_post, judge_pre

PAGES = {"a": {"args": "^103 10 "}, "b": {"args": "^103 103 1$"}}


def inv(args: str, stdout: str, *, exit_code: int = 0, stdin: bytes | None = None) -> Any:
    rec: dict[str, Any] = {
        "target": "bin/pager",
        "args": args.split(),
        "exit_code": exit_code,
        "stdout": stdout,
        "stderr": "",
        "stdout_sha256": hashlib.sha256(stdout.encode()).hexdigest(),
    }
    if stdin is not None:
        rec["stdin"] = {"complete": True, "b64": base64.b64encode(stdin).decode()}
    return rec


def items(lo: int, hi: int) -> str:
    return "".join(f"{n}\n" for n in range(lo, hi + 1))


def pages(total: int, size: int, count: int) -> list[Any]:
    """`pager total size n` for n = 1..count, as a correct pager prints them; shuffled order."""
    out = [
        inv(f"{total} {size} {n}", items((n - 1) * size + 1, min(n * size, total)))
        for n in range(1, count + 1)
    ]
    return out[::-1]  # the record's order is not page order: the judge sorts naturally


def relation(kind: str = "equal", key: str = "accept.relation.0", **sides: Any) -> Any:
    return {**PAGES, **sides, "relation": kind, "key": key}


def test_pages_in_natural_order_equal_the_whole() -> None:
    invs = [*pages(103, 10, 11), inv("103 103 1", items(1, 103))]
    j = judge_post(invs, {"relation": [relation()]})
    assert j.holds, j.detail


def test_the_off_by_one_breaks_the_relation_and_says_where() -> None:
    # the unpatched pager: 10 pages of 103 items (page 11 never asked for), and the whole
    invs = [*pages(103, 10, 10), inv("103 103 1", items(1, 103))]
    j = judge_post(invs, {"relation": [relation()]})
    assert not j.holds
    (problem,) = j.problems
    assert problem.startswith("accept.relation.0: broken: stdout of [args '^103 10 '] equal")
    assert "expected 103 line(s), got 100" in problem
    pre = judge_pre(invs, {"relation": [relation(key="expect.relation.0")]})
    assert pre.holds, pre.detail


def test_a_relation_that_holds_pre_fix_is_no_bug() -> None:
    invs = [*pages(103, 10, 11), inv("103 103 1", items(1, 103))]
    pre = judge_pre(invs, {"relation": [relation(key="expect.relation.0")]})
    assert not pre.holds
    assert "expect.relation.0: holds" in pre.detail


def test_permutation_prefix_and_a_round_trip_over_stdin() -> None:
    invs = [inv("sort x", "b\na\nc\n"), inv("cat x", "a\nb\nc\n")]
    perm = {"a": {"args": "^sort"}, "b": {"args": "^cat"}, "relation": "permutation", "key": "k"}
    assert judge_post(invs, {"relation": [perm]}).holds
    assert not judge_post(invs, {"relation": [{**perm, "relation": "equal"}]}).holds
    invs = [inv("head 1", "a\n"), inv("cat x", "a\nb\n")]
    prefix = {"a": {"args": "^head"}, "b": {"args": "^cat"}, "relation": "prefix", "key": "k"}
    assert judge_post(invs, {"relation": [prefix]}).holds
    swapped = {**prefix, "a": prefix["b"], "b": prefix["a"]}
    assert not judge_post(invs, {"relation": [swapped]}).holds
    text = b"hello, world\n"
    invs = [inv("encode", "aGVsbG8=", stdin=text), inv("decode", text.decode(), stdin=b"aGVsbG8=")]
    trip = {
        "a": {"args": "^encode", "stream": "stdin"},
        "b": {"args": "^decode"},
        "relation": "equal",
        "key": "accept.relation.0",
    }
    assert judge_post(invs, {"relation": [trip]}).holds
    invs[1] = inv("decode", "hello, world", stdin=b"aGVsbG8=")  # lost the newline
    assert not judge_post(invs, {"relation": [trip]}).holds


def test_a_side_that_selects_nothing_is_unmatched_and_a_cut_stream_is_a_problem() -> None:
    invs = [*pages(103, 10, 11)]
    j = judge_post(invs, {"relation": [relation()]})
    assert j.unmatched == ["accept.relation.0"] and not j.holds
    whole = inv("103 103 1", items(1, 103))
    whole["stdout_sha256"] = "0" * 64  # the record kept a head and a tail only
    j = judge_post([*pages(103, 10, 11), whole], {"relation": [relation()]})
    assert not j.holds and "cannot be checked" in j.detail and "not kept whole" in j.detail


def test_variants_do_not_judge_relations() -> None:
    accept = {"exit_code": [0], "relation": [relation()]}
    assert "relation" not in input_independent(accept)


CANDIDATE = """\
id = "rel"
package = "pager"
patches = ["fix.patch"]
[advisory]
osv = "advisory.json"
[reproducer]
script = "repro.sh"
[[expect.relation]]
a = {{ args = "^103 10 " }}
b = {{ args = "^103 103 1$" }}
relation = "equal"
[[accept.relation]]
{accept}
"""


def write_candidate(tmp: Path, accept: str) -> Path:
    src = Path(__file__).parent / "fixtures/fork/trace/candidates/pager-relation-fix"
    for name in ("fix.patch", "advisory.json", "repro.sh"):
        (tmp / name).write_bytes((src / name).read_bytes())
    (tmp / "candidate.toml").write_text(CANDIDATE.format(accept=accept))
    return tmp / "candidate.toml"


def test_the_candidate_file_carries_relations_to_the_judge(tmp_path: Path) -> None:
    path = write_candidate(
        tmp_path,
        'a = { index = 1, stream = "stdin" }\nb = { target = "pager" }\nrelation = "prefix"',
    )
    oracles = load_candidate(path).oracles()
    assert oracles["expect"]["relation"][0]["key"] == "expect.relation.0"
    (acc,) = oracles["accept"]["relation"]
    assert acc == {
        "a": {"index": 1, "stream": "stdin"},
        "b": {"target": "pager", "stream": "stdout"},
        "relation": "prefix",
        "key": "accept.relation.0",
    }


@pytest.mark.parametrize(
    ("accept", "key"),
    [
        ('a = { stream = "stdout" }\nb = { index = 1 }\nrelation = "equal"', "accept.relation"),
        ('a = { index = 1 }\nb = { index = 2 }\nrelation = "same"', "accept.relation"),
        ('a = { args = "(" }\nb = { index = 2 }\nrelation = "equal"', "accept.relation"),
        ('a = { index = 1 }\nb = { index = 2, stream = "stderr" }\nrelation = "equal"', "b"),
        ('a = { index = 1 }\nrelation = "equal"', "accept.relation"),
    ],
)
def test_a_bad_relation_names_the_file_and_key(tmp_path: Path, accept: str, key: str) -> None:
    path = write_candidate(tmp_path, accept)
    with pytest.raises(InputError) as err:
        load_candidate(path)
    assert str(err.value.file) == str(path) and key in str(err.value.key)
