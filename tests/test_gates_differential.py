"""The differential gate (trace_sandbox/gates/differential.py) on hand-made run records: which
differences from the upstream fix are a finding that cannot be waived (the candidate still
behaves as the unpatched build where upstream changed the behaviour), which are waivable, and
that a candidate that behaves as upstream everywhere passes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from trace_sandbox.gates.differential import behaviour, compare, evaluate


def inv(exit_code: int | None = 0, out: str = "", **kw: Any) -> dict[str, Any]:
    import hashlib

    return {
        "args": ["in.txt"],
        "stdout": out,
        "exit_code": exit_code,
        "signal": kw.get("signal"),
        "sanitizer": kw.get("sanitizer"),
        "stdout_sha256": hashlib.sha256(out.encode()).hexdigest(),
        "stdout_tail": out,
    }


def run(*invs: dict[str, Any], timed_out: bool = False) -> dict[str, Any]:
    return {"schema": "trace.run/v1", "invocations": list(invs), "timed_out": timed_out}


OK_RIGHT = inv(0, "total 3\n")
OK_WRONG = inv(0, "total 93\n")
CRASH = inv(None, sanitizer="AddressSanitizer: heap-buffer-overflow")
REJECT = inv(1, "")
REJECT_OTHER_CODE = inv(2, "")


@pytest.mark.parametrize(
    ("pre", "post", "up", "rules"),
    [
        # the candidate behaves as upstream: no finding, whatever the unpatched build did
        (OK_WRONG, OK_RIGHT, OK_RIGHT, []),
        (CRASH, REJECT, REJECT, []),
        # a rejection's exit code is not behaviour (an alternative fix may exit 2, not 1)
        (CRASH, REJECT_OTHER_CODE, REJECT, []),
        # upstream fixed this input; the candidate still prints what the unpatched build did
        (OK_WRONG, OK_WRONG, OK_RIGHT, ["differential.misses-upstream-fix"]),
        # ... or still crashes as it did
        (CRASH, CRASH, REJECT, ["differential.misses-upstream-fix"]),
        # upstream kept the unpatched behaviour (a good input); the candidate changed it
        (OK_RIGHT, REJECT, OK_RIGHT, ["differential.differs"]),
        # both changed it, differently
        (OK_WRONG, inv(0, "total 4\n"), OK_RIGHT, ["differential.differs"]),
    ],
)
def test_one_input_three_sides(
    pre: dict[str, Any], post: dict[str, Any], up: dict[str, Any], rules: list[str]
) -> None:
    found = compare("variant v001", run(pre), run(post), run(up))
    assert [f["rule"] for f in found] == rules
    for f in found:
        assert f["input"] == "variant v001" and f["args"] == ["in.txt"]
        assert {"pre_fix", "post_fix", "upstream_fix"} <= set(f)


def test_an_invocation_the_candidate_never_reached_is_a_difference() -> None:
    """A reproducer that stops after a crash runs fewer invocations on that side."""
    found = compare("the reproducer (run 1)", run(CRASH), run(CRASH), run(REJECT, OK_RIGHT))
    assert [(f["invocation"], f["post_fix"]["class"]) for f in found] == [
        (0, "crash"),
        (1, "not-run"),
    ]


def test_behaviour_classes() -> None:
    assert behaviour(CRASH, False)["class"] == "crash"
    assert behaviour(inv(None, signal="SIGSEGV"), False)["class"] == "crash"
    assert behaviour(inv(None), True)["class"] == "hang"
    assert behaviour(OK_RIGHT, False) == {
        "class": "ok",
        "stdout_sha256": OK_RIGHT["stdout_sha256"],
        "stdout_tail": "total 3\n",
    }
    assert behaviour(REJECT, False)["exit_code"] == 1


def _side(
    root: Path, name: str, poc: dict[str, Any], variants: dict[str, dict[str, Any]]
) -> dict[str, str]:
    runs = root / f"{name}-run"
    runs.mkdir()
    (runs / "outcome.json").write_text(json.dumps(poc))
    batch = root / f"{name}-variants"
    batch.mkdir()
    doc = {
        "runs": [
            {"id": vid, "index": i, "outcome": r} for i, (vid, r) in enumerate(variants.items(), 1)
        ]
    }
    (batch / "outcome.json").write_text(json.dumps(doc))
    return {"run": str(runs), "variants": str(batch)}


def _cfg(root: Path, pre: Any, post: Any, up: Any, named: bool = True) -> dict[str, Any]:
    sides = {
        "pre": _side(root, "pre", *pre),
        "post": _side(root, "post", *post),
        "up": _side(root, "up", *up),
    }
    return {
        "named": named,
        **{f"{k}_runs": [v["run"]] for k, v in sides.items()},
        **{f"{k}_variants": v["variants"] for k, v in sides.items()},
    }


def test_a_value_special_case_is_caught_on_a_variant_the_poc_does_not_show(tmp_path: Path) -> None:
    """The PoC's own input is fixed by both; a variant (another value) is fixed only upstream."""
    cfg = _cfg(
        tmp_path,
        (run(OK_WRONG), {"v001": run(OK_WRONG), "v002": run(OK_RIGHT)}),
        (run(OK_RIGHT), {"v001": run(OK_WRONG), "v002": run(OK_RIGHT)}),
        (run(OK_RIGHT), {"v001": run(inv(0, "total 2\n")), "v002": run(OK_RIGHT)}),
    )
    rec = evaluate(cfg)
    assert rec["gate"] == "differential" and rec["measurable"] is True
    assert rec["passed"] is False and rec["reasons"] == ["fix-misses-upstream-behaviour"]
    details = rec["details"]
    assert isinstance(details, dict)
    assert details["compared"] == 3 and details["misses_upstream_fix"] == 1
    (finding,) = details["findings"]
    assert finding["input"] == "variant v001"
    assert "variant v001" in str(details["summary"])


def test_the_same_behaviour_everywhere_passes(tmp_path: Path) -> None:
    same = (run(OK_RIGHT), {"v001": run(REJECT), "v002": run(OK_RIGHT)})
    cfg = _cfg(tmp_path, (run(CRASH), {"v001": run(CRASH), "v002": run(OK_RIGHT)}), same, same)
    rec = evaluate(cfg)
    assert (rec["passed"], rec["measurable"], rec["reasons"]) == (True, True, [])


def test_without_an_upstream_fix_the_gate_is_not_measurable(tmp_path: Path) -> None:
    rec = evaluate({"named": False})
    assert (rec["passed"], rec["measurable"], rec["reasons"]) == (True, False, [])
    assert "names no upstream fix" in str(rec["details"])


def test_a_line_the_upstream_fix_changed_and_the_candidate_did_not_is_a_miss() -> None:
    """Several records in one output: the candidate fixed the PoC's line only."""
    pre = inv(0, "alice <555-0191>\nbob <555-0102>\n")
    post = inv(0, "alice <555-0191>\nbob <bob@x>\n")  # special-cased bob's phone only
    up = inv(0, "alice <alice@x>\nbob <bob@x>\n")
    (f,) = compare("variant v003", run(pre), run(post), run(up))
    assert f["rule"] == "differential.misses-upstream-fix"
    # the same outputs with another number of lines: only a difference
    longer = inv(0, "alice <alice@x>\nbob <bob@x>\ncarol\n")
    (g,) = compare("variant v004", run(pre), run(post), run(longer))
    assert g["rule"] == "differential.differs"
