"""The variants gate's generator and judge, without builds (trace_sandbox/gates: variants.py,
variant_gate.py), and its policy knobs. The real builds: tests/test_gates_variants_nix.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.errors import PolicyError
from engine.policy.signing_decision import load_signing_rules
from trace_sandbox.gates.variant_gate import crashes, evaluate, write_plan
from trace_sandbox.gates.variants import Invocation, generate, literal_tokens, script_of

REPO = Path(__file__).resolve().parent.parent
SHIPPED = REPO / "policy" / "signing.toml"
POC = b"name=demo\n" + b"k" * 40 + b"=value\n"
CALL = [Invocation("bin/cparse", "program", ("long-key.conf",))]
SOURCE = r"""if (*p == '\\' && p[1] != 'n') { printf("%s -> %s\n", k, v); }"""
POLICY = {"name": "p", "version": "1", "thresholds": {"budget": 12, "seed": 3}}


def test_the_same_poc_gives_the_same_variants_and_the_seed_changes_them() -> None:
    a, _ = generate(CALL, {"long-key.conf": POC}, [SOURCE], seed=1, budget=20)
    b, _ = generate(CALL, {"long-key.conf": POC}, [SOURCE], seed=1, budget=20)
    c, _ = generate(CALL, {"long-key.conf": POC}, [SOURCE], seed=2, budget=20)
    assert [v.summary() for v in a] == [v.summary() for v in b]
    assert [v.summary() for v in a] != [v.summary() for v in c]
    assert len(a) == 20
    contents = [v.files["long-key.conf"] for v in a]
    assert POC not in contents and len(set(contents)) == len(contents)  # never the PoC, no dups


def test_length_changes_come_first_around_the_poc_payload() -> None:
    variants, _ = generate(CALL, {"long-key.conf": POC}, [], seed=0, budget=9)
    assert [v.operator for v in variants] == ["length"] * 9
    keys = [len(v.files["long-key.conf"].split(b"\n")[1].split(b"=")[0]) for v in variants]
    assert keys == [41, 39, 42, 38, 48, 32, 104, 80, 20]


def test_the_dictionary_holds_the_patched_code_s_escape_sequences() -> None:
    tokens = literal_tokens(SOURCE)
    assert b"\\\\" in tokens and b"\\" in tokens  # '\\' as written and as its value
    assert b"\\n" in tokens and b"\n" in tokens and b" -> " in tokens  # format split at %s
    variants, dictionary = generate(CALL, {"long-key.conf": POC}, [SOURCE], seed=0, budget=40)
    assert b"\\n" in dictionary
    runs = [v for v in variants if v.operator == "token-run"]
    assert runs and runs[0].files["long-key.conf"].startswith(b"name=demo\n\\")


def test_variant_scripts_call_the_same_targets_and_quote_arguments() -> None:
    calls = [
        Invocation("bin/cparse", "program", ("<work>/a b.conf", "it's", "$TARGET/share/x")),
        Invocation("bin/other", "program", (), stdin=b"abc"),
    ]
    script = script_of(calls, {(0, 1): "x'y"}, {1})
    lines = script.splitlines()[2:]
    assert lines == [
        "\"$TARGET/bin/cparse\" \"$PWD\"'/a b.conf' 'x'\\''y' \"$TARGET\"'/share/x'",
        '"$TARGET/bin/other" < stdin-1.bin',
    ]
    variants, _ = generate(calls, {}, [], seed=0, budget=30)
    units = {v.unit for v in variants}
    assert units == {"stdin:1", "arg:0:1"}  # stdin and the plain argument; paths are not varied
    assert all("stdin-1.bin" in v.files for v in variants)


def _run(tmp: Path, name: str, meta: dict[str, Any], record: dict[str, Any]) -> str:
    d = tmp / name
    d.mkdir()
    (d / "variant.json").write_text(json.dumps(meta))
    (d / "outcome.json").write_text(json.dumps(record))
    return str(d)


def _record(sanitizer: str | None = None, signal: str | None = None, exit_code: int = 0) -> Any:
    inv: dict[str, Any] = {"target": "bin/cparse", "exit_code": exit_code, "signal": signal}
    if sanitizer:
        tool, kind = sanitizer.split(": ")
        inv["sanitizer"] = {"tool": tool, "kind": kind}
    return {"schema": "trace.run/v1", "build": "ok", "target_ran": True, "invocations": [inv]}


ASAN = "AddressSanitizer: heap-buffer-overflow"
OTHER = "AddressSanitizer: stack-buffer-overflow"


def _one_variant(
    tmp: Path, post: Any, pre: Any, oracles: Any = None, expect: Any = None
) -> dict[str, Any]:
    """The gate's record for a plan of one variant, run post-fix and pre-fix as given."""
    (tmp / "plan").mkdir()
    meta = {"id": "v001-length", "index": 1, "operator": "length", "unit": "f", "files": {}}
    meta["description"] = "f: longer"
    plan = {"budget": 1, "seed": 0, "poc": {"target_ran": True}, "dictionary": []}
    plan["variants"] = [meta]
    (tmp / "plan" / "plan.json").write_text(json.dumps(plan))
    cfg = {
        "policy": POLICY,
        "plan": str(tmp / "plan"),
        "expect": json.dumps(expect or {"sanitizer": ASAN, "exit_code": 1}),
        "post": [_run(tmp, "post", meta, post)],
        "pre": [_run(tmp, "pre", meta, pre)],
        "post_runs": [_run(tmp, "poc", {}, _record())],
    }
    if oracles is not None:
        cfg["oracles"] = json.dumps(oracles)
    return evaluate(cfg)


@pytest.mark.parametrize(
    ("post", "pre", "status", "passed"),
    [
        (_record(ASAN, exit_code=1), _record(ASAN, exit_code=1), "still-fails", False),
        (_record(OTHER, exit_code=1), _record(OTHER, exit_code=1), "other-crash", True),
        (_record(OTHER, exit_code=1), _record(), "still-fails", False),  # the fix brought it
        (_record(signal="SIGSEGV"), _record(), "still-fails", False),
        (_record(exit_code=2), _record(ASAN, exit_code=1), "survives", True),  # a clean refusal
    ],
)
def test_what_counts_as_still_failing(
    tmp_path: Path, post: Any, pre: Any, status: str, passed: bool
) -> None:
    record = _one_variant(tmp_path, post, pre)
    assert record["details"]["results"][0]["status"] == status
    assert record["passed"] is passed and record["measurable"] is True
    assert record["reasons"] == ([] if passed else ["variant-still-fails"])
    assert record["details"]["policy"] == POLICY


LEAK = "LeakSanitizer: memory-leak"
# a wrong-output bug: [expect] names no crash kind, only the unpatched build's wrong line
WRONG_ROW = {"invocation": [{"key": "invocation.1", "stdout": 'r27"$'}]}


def _out(record: Any, stdout: str) -> Any:
    record["invocations"][0]["stdout"] = stdout
    return record


@pytest.mark.parametrize(
    ("post", "pre", "status", "passed"),
    [
        # the stranger's cjsonptr case: a truncated document makes both builds leak on the
        # program's error path; the unpatched build showed no wrong row: not the bug
        (_record(LEAK, exit_code=23), _record(LEAK, exit_code=23), "other-crash", True),
        # the unpatched build printed the wrong row on this variant: a crash after the fix is
        # taken for the bug (no kind declared to tell them apart)
        (
            _record(LEAK, exit_code=23),
            _out(_record(LEAK, exit_code=23), '/rows/1A = "r27"\n'),
            "still-fails",
            False,
        ),
        (_record(LEAK, exit_code=23), _record(), "still-fails", False),  # the fix brought it
    ],
)
def test_a_crash_both_builds_share_is_no_wrong_output_bug(
    tmp_path: Path, post: Any, pre: Any, status: str, passed: bool
) -> None:
    """Outside campaign (issue 25): CVE-2025-57052's real fix was denied variant-still-fails for
    a leak its driver has on an error path, pre-fix and post-fix alike, on variants that are no
    bad inputs: a wrong-output bug names no crash kind, and every crash was taken for it."""
    record = _one_variant(tmp_path, post, pre, expect=WRONG_ROW)
    assert record["details"]["results"][0]["status"] == status
    assert record["passed"] is passed
    assert record["reasons"] == ([] if passed else ["variant-still-fails"])


GOLDEN = {"golden": {"file": "want.txt", "sha256": "0" * 64, "text": "x"}}
CLEAN_REJECT = {"invocation": [{"key": "invocation.1", "args": "long", "exit_code": [0, 2]}]}


def _with_args(record: Any, *args: str, stdout: str = "") -> Any:
    record["invocations"][0] |= {"args": list(args), "stdout": stdout}
    return record


def _stderr(record: Any, text: str) -> Any:
    record["invocations"][0]["stderr"] = text
    return record


@pytest.mark.parametrize(
    ("accept", "post", "pre", "status"),
    [
        # the fix refuses an input the unpatched build handled (default [accept]: exit 0)
        ({}, _record(exit_code=1), _record(), "breaks-oracle"),
        # both builds refuse it: the input is bad, not the fix
        ({}, _record(exit_code=1), _record(exit_code=1), "survives"),
        # a golden stdout was declared for the PoC's input: it never judges a changed input
        (GOLDEN, _with_args(_record(), stdout="other"), _with_args(_record()), "survives"),
        # invocation 1's own oracle (exit 0 or 2) judges the variant of invocation 1
        (
            CLEAN_REJECT,
            _with_args(_record(exit_code=2), "long"),
            _with_args(_record(), "long"),
            "survives",
        ),
        (
            CLEAN_REJECT,
            _with_args(_record(exit_code=3), "long"),
            _with_args(_record(), "long"),
            "breaks-oracle",
        ),
        # a stderr oracle is input-independent: the pre-fix build met it, the fix broke it
        ({"stderr": "^ok"}, _record(), _stderr(_record(), "ok\n"), "breaks-oracle"),
        ({"stderr": "^ok"}, _record(), _record(), "survives"),
    ],
)
def test_a_variant_that_breaks_a_declared_post_fix_oracle_fails(
    tmp_path: Path, accept: Any, post: Any, pre: Any, status: str
) -> None:
    """Issue 10: a variant fails when the fix makes it break the invocation's declared post-fix
    oracle while the unpatched build met it; only input-independent fields judge a variant."""
    record = _one_variant(tmp_path, post, pre, {"accept": accept})
    (result,) = record["details"]["results"]
    assert result["status"] == status, result
    assert record["measurable"] is True
    if status == "breaks-oracle":
        assert (record["passed"], record["reasons"]) == (False, ["variant-breaks-oracle"])
        assert record["details"]["rules"] == ["variants.breaks-oracle"]
        (item,) = record["details"]["still_failing"]  # bundled as a replayable reproducer
        assert item["id"] == "v001-length" and item["broken"]
        assert "break a declared post-fix oracle" in record["details"]["summary"]
    else:
        assert (record["passed"], record["reasons"]) == (True, [])


def test_newly_unacceptable_matches_invocations_by_call_not_position() -> None:
    from trace_sandbox.gates.oracle import newly_unacceptable

    def inv(args: str, code: int) -> dict[str, Any]:
        return {"target": "bin/cparse", "args": [args], "exit_code": code}

    post = {"invocations": [inv("a.conf", 0), inv("b.conf", 1)]}
    pre = {"invocations": [inv("b.conf", 0), inv("a.conf", 1)]}  # recorded in another order
    (problem,) = newly_unacceptable(post, pre, {})
    assert "b.conf" in problem and "exit code 0, got 1" in problem
    assert newly_unacceptable(pre | {"timed_out": True}, pre, {}) == ["the reproducer timed out"]
    crash = {"invocations": [inv("a.conf", 0) | {"signal": "SIGSEGV"}]}
    assert newly_unacceptable(crash, {"invocations": [inv("a.conf", 0)]}, {})


def test_no_poc_and_a_failing_post_fix_are_not_measurable(tmp_path: Path) -> None:
    (tmp_path / "plan").mkdir()
    plan = {"budget": 1, "seed": 0, "poc": {"target_ran": False}, "dictionary": []}
    plan["variants"] = []
    (tmp_path / "plan" / "plan.json").write_text(json.dumps(plan))
    cfg = {"policy": POLICY, "plan": str(tmp_path / "plan"), "post": [], "pre": []}
    cfg["post_runs"] = [_run(tmp_path, "poc", {}, _record(ASAN, exit_code=1))]
    record = evaluate(cfg)
    assert (record["passed"], record["measurable"]) == (False, False)
    assert record["reasons"] == ["variants-not-measurable"]
    assert record["details"]["rules"] == ["variants.no-poc"]
    plan["poc"] = {"target_ran": True}
    (tmp_path / "plan" / "plan.json").write_text(json.dumps(plan))
    assert evaluate(cfg)["details"]["rules"] == ["variants.none-generated"]


def test_the_plan_is_written_as_ordinary_reproducers(tmp_path: Path) -> None:
    run = tmp_path / "pre-run"
    run.mkdir()
    record = _record(ASAN, exit_code=1)
    record["invocations"][0]["args"] = ["long-key.conf"]
    (run / "outcome.json").write_text(json.dumps(record))
    data = tmp_path / "long-key.conf"
    data.write_bytes(POC)
    patch = tmp_path / "fix.patch"
    patch.write_text("--- a/c.c\n+++ b/c.c\n@@ -1,0 +2 @@\n+ if (c == '\\\\') return 0;\n")
    out = tmp_path / "plan"
    cfg = {"policy": POLICY, "pre_runs": [str(run)], "data": [str(data)], "patches": [str(patch)]}
    write_plan(cfg, str(out))
    plan = json.loads((out / "plan.json").read_text())
    assert (plan["budget"], plan["seed"], len(plan["variants"])) == (12, 3, 12)
    assert "\\\\" in plan["dictionary"]
    first = out / "v" / "1"
    assert (first / "repro.sh").read_text().splitlines()[
        -1
    ] == "\"$TARGET/bin/cparse\" 'long-key.conf'"
    assert (first / "data" / "long-key.conf").read_bytes() != POC
    assert json.loads((first / "variant.json").read_text())["index"] == 1
    assert crashes(record) == [ASAN]


def test_budget_and_seed_belong_to_the_variants_gate(tmp_path: Path) -> None:
    policy, _, _ = load_signing_rules(SHIPPED)
    assert policy.applied("variants")["thresholds"] == {"budget": 24, "seed": 0}
    bad = tmp_path / "signing.toml"
    bad.write_text(
        SHIPPED.read_text().replace("[gates.mutation]\n", "[gates.mutation]\nseed = 1\n")
    )
    with pytest.raises(PolicyError) as exc:
        load_signing_rules(bad)
    assert exc.value.key == "gates.mutation.seed"


# --- issue 26: variants that know which inputs are bad ---------------------------------------

# htmlattr-key-injection's oracles: the key's separator injects an attribute (a wrong output,
# exit 0) before the fix; the fix refuses it (exit 1, ValueError); good keys render as before
INJECTION = {
    "expect": {
        "invocation": [
            {"args": "injected", "exit_code": [0], "stdout": '^<p [^"]*[\\s/>=][^"]*="'},
        ]
    },
    "accept": {
        "invocation": [
            {"args": "injected", "exit_code": [1], "stderr": "ValueError: invalid character"},
            {"args": "good", "exit_code": [0], **GOLDEN},
        ]
    },
}
REFUSED = "ValueError: invalid character in attribute name: 'i d'\n"


def _py(args: str, stdout: str = "", exit_code: int = 0, stderr: str = "") -> Any:
    inv = {"target": "lib/python/htmlattr/__init__.py", "kind": "python", "args": ["r.py", args]}
    inv |= {"exit_code": exit_code, "signal": None, "stdout": stdout, "stderr": stderr}
    return {"schema": "trace.run/v1", "build": "ok", "target_ran": True, "invocations": [inv]}


@pytest.mark.parametrize(
    ("post", "pre", "oracles", "status"),
    [
        # the PoC's key lost its space: no bad input; the fix rightly renders it, as before
        (_py("injected", '<p xy="v">\n'), _py("injected", '<p xy="v">\n'), INJECTION, "survives"),
        # a good key gained a space: a bad input (the unpatched build injects), rightly refused
        # as the PoC is; the old rule judged it by the good call's exit-0 oracle: breaks-oracle
        (
            _py("good", exit_code=1, stderr=REFUSED),
            _py("good", '<p i d="v">\n'),
            INJECTION,
            "survives",
        ),
        # a wrong fix refuses spaces only: a key with '/' is a bad input it lets through
        (
            _py("injected", '<p a/b="v">\n'),
            _py("injected", '<p a/b="v">\n'),
            INJECTION,
            "mishandled",
        ),
        # a bad input refused another way than the PoC's declared rejection
        (_py("injected", exit_code=2), _py("injected", '<p a b="v">\n'), INJECTION, "mishandled"),
        # a good input the fix makes fail, under a top-level rejection (exit 1) that the old
        # rule never applied (the pre-fix side does not meet it either): a new failure
        (
            _py("x", exit_code=1, stderr=REFUSED),
            _py("x", '<p xy="v">\n'),
            {"expect": INJECTION["expect"], "accept": {"exit_code": [1], "stderr": "ValueError"}},
            "regressed",
        ),
        # no valid input on either side (a variant of the script with a syntax error): neither
        (
            _py("injected", exit_code=1, stderr="SyntaxError"),
            _py("injected", exit_code=1, stderr="SyntaxError"),
            INJECTION,
            "survives",
        ),
    ],
)
def test_only_bad_inputs_are_held_to_the_pocs_rejection(
    tmp_path: Path, post: Any, pre: Any, oracles: Any, status: str
) -> None:
    record = _one_variant(tmp_path, post, pre, oracles)
    (result,) = record["details"]["results"]
    assert result["status"] == status, result
    code = {"mishandled": "variant-mishandled", "regressed": "variant-regressed"}.get(status)
    assert record["reasons"] == ([code] if code else [])
    if code:
        (item,) = record["details"]["still_failing"]  # bundled, with what broke
        assert item["broken"]


def test_a_bad_input_is_the_declared_bug_on_the_pre_fix_side() -> None:
    from trace_sandbox.gates.oracle import shows_the_bug

    expect = {"sanitizer": ASAN, "exit_code": [1]}
    asan = _record(ASAN, exit_code=1)["invocations"][0]
    other = _record(OTHER, exit_code=1)["invocations"][0]
    assert shows_the_bug(asan, expect) and not shows_the_bug(other, expect)
    good = _py("injected", '<p xy="v">\n')["invocations"][0]
    bad = _py("injected", '<p a b="v">\n')["invocations"][0]
    assert shows_the_bug(bad, INJECTION["expect"]) and not shows_the_bug(good, INJECTION["expect"])


# --- the sqlparse campaign (CVE-2024-4340): a Python exception is the declared failure --------

# sqlparse-cve-2024-4340's oracles: RecursionError escapes before the fix (exit 1); the fix
# refuses the input with SQLParseError (exit 2, the application's message)
RECURSION = {
    "expect": {"invocation": [{"args": "poc", "exit_code": [1], "stderr": "RecursionError"}]},
    "accept": {"invocation": [{"args": "poc", "exit_code": [2], "stderr": "refused: Maximum"}]},
}
DEEP = "Traceback (most recent call last):\nRecursionError: maximum recursion depth exceeded\n"


@pytest.mark.parametrize(
    ("post", "oracles", "status"),
    [
        # the PoC's depth special-cased: one level less, RecursionError escapes the fix as it
        # did the unpatched build: the declared bug itself, not a bad input handled another way
        (_py("poc", exit_code=1, stderr=DEEP), RECURSION, "still-fails"),
        # refused as the PoC is
        (
            _py("poc", exit_code=2, stderr="sqlcheck: refused: Maximum recursion"),
            RECURSION,
            "survives",
        ),
        # another failure than the declared one: handled another way (waivable)
        (_py("poc", exit_code=1, stderr="KeyError: 'x'\n"), RECURSION, "mishandled"),
        # a rejection the [expect] pattern also matches is the rejection, never the bug
        (
            _py("poc", exit_code=1, stderr="SQLParseError: RecursionError caught\n"),
            {
                "expect": RECURSION["expect"],
                "accept": {"invocation": [{"args": "poc", "exit_code": [1], "stderr": "SQLParse"}]},
            },
            "survives",
        ),
    ],
)
def test_a_python_exception_a_fix_lets_through_on_a_bad_input_still_fails(
    tmp_path: Path, post: Any, oracles: Any, status: str
) -> None:
    pre = _py("poc", exit_code=1, stderr=DEEP)
    record = _one_variant(tmp_path, post, pre, oracles)
    (result,) = record["details"]["results"]
    assert result["status"] == status, result
    code = {"still-fails": "variant-still-fails", "mishandled": "variant-mishandled"}.get(status)
    assert record["reasons"] == ([code] if code else [])
    if status == "still-fails":
        assert (
            result["broken"] == [f"{result['broken'][0]}"] and "as pre-fix" in result["broken"][0]
        )
