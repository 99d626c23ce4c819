"""Variants that edit the PoC's numeric fields (issue 25), a good input's own budget, short runs
resized in place, and the judge's `variants.special-cased` (fix-special-cases-poc-value)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trace_sandbox.gates.field_variants import field_edits
from trace_sandbox.gates.variant_gate import evaluate, good_units, patch_constants, signature
from trace_sandbox.gates.variants import GOOD_SHARE, Invocation, generate

REQUEST = bytes.fromhex("10010084000200 2a002b".replace(" ", ""))
GOOD = bytes.fromhex("1001007e0002002a002b")
LEDGER = b"salary 1200\nrent -45\ngroceries 80\n"
CALLS = [
    Invocation("bin/regbus", "program", ("good.bin",)),
    Invocation("bin/regbus", "program", ("poc.bin",)),
]


def contents(edits: list[Any]) -> list[bytes]:
    return [e.data for e in edits]


def test_a_text_number_is_edited_in_place_in_its_own_spelling() -> None:
    edits = field_edits("march.txt", LEDGER, [-45], {-45})
    assert edits[0].data == LEDGER.replace(b"-45", b"-44")  # +1, then -1
    assert edits[1].data == LEDGER.replace(b"-45", b"-46")
    assert (edits[0].neighbour, edits[0].compared, edits[0].value) == ("+1", True, -45)
    assert LEDGER.replace(b"-45", b"0") in contents(edits)
    assert LEDGER.replace(b"-45", b"2147483647") in contents(edits)  # the type's limits
    hexed = field_edits("t", b"flag 0x84\n", [], {0x84})
    assert hexed[0].data == b"flag 0x85\n"


def test_a_binary_field_is_rewritten_in_its_byte_order_and_byte_by_byte() -> None:
    edits = field_edits("poc.bin", REQUEST, [0x84], {0x84})
    first = contents(edits)[:2]
    assert first == [
        REQUEST[:2] + b"\x00\x85" + REQUEST[4:],
        REQUEST[:2] + b"\x00\x83" + REQUEST[4:],
    ]
    assert all(len(d) == len(REQUEST) for d in contents(edits))  # in place, never grown
    assert REQUEST[:2] + b"\xff\xff" + REQUEST[4:] in contents(edits)  # 16-bit unsigned limit
    assert REQUEST[:2] + b"\x80\x00" + REQUEST[4:] in contents(edits)  # signed minimum
    assert REQUEST[:2] + b"\xff\x84" + REQUEST[4:] in contents(edits)  # its high byte 0xff
    assert len(set(contents(edits))) == len(edits)  # each content once


def test_without_a_compared_value_only_neighbours_are_made() -> None:
    edits = field_edits("poc.bin", REQUEST, [], set())
    assert edits and not any(e.compared for e in edits)
    assert {e.neighbour for e in edits} == {"+1", "-1"}


def test_the_compared_field_comes_first_of_all_variants() -> None:
    data = {"good.bin": GOOD, "poc.bin": REQUEST}
    variants, _ = generate(CALLS, data, [], seed=0, budget=8, constants=[0x84])
    assert variants[0].operator == "field" and variants[0].unit == "poc.bin"
    assert variants[0].files["poc.bin"] == REQUEST[:2] + b"\x00\x85" + REQUEST[4:]
    assert variants[0].summary()["field"] == {"value": 132, "neighbour": "+1", "compared": True}
    plain, _ = generate(CALLS, data, [], seed=0, budget=8)
    assert plain[0].operator != "field" or not plain[0].summary()["field"]["compared"]  # type: ignore[index]


def test_a_good_input_has_a_budget_of_its_own() -> None:
    data = {"good.bin": GOOD, "poc.bin": REQUEST}
    variants, _ = generate(CALLS, data, [], seed=0, budget=12, good=frozenset({"good.bin"}))
    units = [v.unit for v in variants]
    assert units.count("poc.bin") == 12  # the PoC's whole budget
    assert units.count("good.bin") == 12 // GOOD_SHARE
    shared, _ = generate(CALLS, data, [], seed=0, budget=12)
    # without `good`, both units share the one budget
    assert len(shared) == 12 and [v.unit for v in shared].count("poc.bin") < 12


def test_a_short_run_is_resized_in_place() -> None:
    call = [Invocation("bin/ledger", "program", ("march.txt",))]
    variants, _ = generate(call, {"march.txt": b"salary 1200\n"}, [], seed=0, budget=3)
    assert [v.files["march.txt"] for v in variants] == [
        b"salary 12000\n",
        b"salary 120\n",
        b"salary 120000\n",
    ]


def test_good_units_are_files_only_clean_invocations_name() -> None:
    rec = {
        "invocations": [
            {"args": ["good.bin"], "exit_code": 0},
            {"args": ["poc.bin"], "exit_code": 1, "sanitizer": {"tool": "A", "kind": "k"}},
            {"args": ["both.bin"], "exit_code": 0},
            {"args": ["both.bin"], "exit_code": 2},
        ]
    }
    assert good_units(rec) == frozenset({"good.bin"})
    # a wrong output: every invocation exits 0, the PoC's input among them
    assert good_units({"invocations": [rec["invocations"][0], rec["invocations"][2]]}) == set()


def test_patch_constants_read_code_and_numeric_strings(tmp_path: Path) -> None:
    p = tmp_path / "fix.patch"
    p.write_text(
        "--- a/l.c\n+++ b/l.c\n@@ -1,1 +1,3 @@\n x = 7;\n"
        '+    if (strcmp(a, "-45") == 0)\n+        if (addr == 0x84) return 2;\n'
    )
    got = patch_constants([str(p)])
    assert {-45, 0x84, 2, 0} <= set(got) and 7 not in got  # added lines only


# --- the judge ---------------------------------------------------------------------------------


def _rec(stdout: str, exit_code: int = 0) -> dict[str, Any]:
    inv = {"target": "bin/ledger", "args": ["march.txt"], "exit_code": exit_code}
    inv["stdout"] = stdout
    return {"schema": "trace.run/v1", "build": "ok", "target_ran": True, "invocations": [inv]}


def _dir(tmp: Path, name: str, meta: dict[str, Any], record: dict[str, Any]) -> str:
    d = tmp / name
    d.mkdir()
    (d / "variant.json").write_text(json.dumps(meta))
    (d / "outcome.json").write_text(json.dumps(record))
    return str(d)


def judged(
    tmp: Path,
    sides: list[tuple[str | None, bool, str, str]],
    poc_pre: str = "balance 1325",
    poc_post: str = "balance 1235",
) -> dict[str, Any]:
    """The gate's record for variants given as (neighbour, compared, post stdout, pre stdout)."""
    (tmp / "plan").mkdir()
    metas, post, pre = [], [], []
    for n, (neighbour, compared, post_out, pre_out) in enumerate(sides, 1):
        meta = {"id": f"v{n:03d}-field", "index": n, "operator": "field", "unit": "march.txt"}
        meta |= {"files": {}, "description": f"march.txt: -45 -> {neighbour}"}
        meta["field"] = {"value": -45, "neighbour": neighbour, "compared": compared}
        metas.append(meta)
        post.append(_dir(tmp, f"post{n}", meta, _rec(post_out)))
        pre.append(_dir(tmp, f"pre{n}", meta, _rec(pre_out)))
    poc = {"target_ran": True, "pre_fix": signature(_rec(poc_pre))}
    plan = {"budget": len(sides), "seed": 0, "poc": poc, "dictionary": [], "variants": metas}
    (tmp / "plan" / "plan.json").write_text(json.dumps(plan))
    cfg = {
        "policy": {"name": "p", "version": "1", "thresholds": {"budget": 2, "seed": 0}},
        "plan": str(tmp / "plan"),
        "expect": "{}",
        "post": post,
        "pre": pre,
        "post_runs": [_dir(tmp, "poc", {}, _rec(poc_post))],
    }
    return evaluate(cfg)


def test_a_fix_whose_effect_vanishes_next_to_the_poc_value_is_special_cased(
    tmp_path: Path,
) -> None:
    record = judged(tmp_path, [("+1", True, "b 1324", "b 1324"), ("-1", True, "b 1326", "b 1326")])
    assert (record["passed"], record["reasons"]) == (False, ["fix-special-cases-poc-value"])
    assert record["details"]["special_cased"] == [-45]
    assert [r["status"] for r in record["details"]["results"]] == ["special-cased"] * 2
    assert len(record["details"]["still_failing"]) == 2  # bundled as evidence
    assert "vanishes when the PoC's value -45 moves by one" in record["details"]["summary"]


def test_a_real_fix_changes_the_neighbours_too(tmp_path: Path) -> None:
    record = judged(tmp_path, [("+1", True, "b 1236", "b 1324"), ("-1", True, "b 1234", "b 1326")])
    assert (record["passed"], record["reasons"]) == (True, [])


def test_one_neighbour_alone_is_not_enough(tmp_path: Path) -> None:
    record = judged(tmp_path, [("+1", True, "b 1324", "b 1324"), ("-1", True, "b 1234", "b 1326")])
    assert record["passed"] is True


def test_a_value_the_patch_does_not_compare_with_is_not_judged(tmp_path: Path) -> None:
    record = judged(
        tmp_path, [("+1", False, "b 1324", "b 1324"), ("-1", False, "b 1326", "b 1326")]
    )
    assert record["passed"] is True


def test_a_fix_that_did_not_change_the_poc_s_outcome_is_not_judged(tmp_path: Path) -> None:
    record = judged(
        tmp_path,
        [("+1", True, "b 1324", "b 1324"), ("-1", True, "b 1326", "b 1326")],
        poc_post="balance 1325",
    )
    assert record["passed"] is True


# Outside campaign (issue 25): CVE-2025-57052's wrong fix `pointer[position] == 0x41` refuses
# the PoC's one letter (`/rows/1A`) by its code; no variant touched the letter, and it was signed.
POINTERS = b"/rows/12\n/rows/1A\n"


def test_a_letter_the_patch_spells_is_a_field_of_a_text_poc() -> None:
    edits = field_edits("poc.txt", POINTERS, [0x41], {0x41}, frozenset({0x41}))
    assert [e.data for e in edits[:2]] == [b"/rows/12\n/rows/1B\n", b"/rows/12\n/rows/1@\n"]
    assert (edits[0].neighbour, edits[0].compared, edits[0].value) == ("+1", True, 0x41)
    assert all(len(e.data) == len(POINTERS) for e in edits if e.compared)  # edited in place
    # without the patch spelling it as a character, the letter is no field (numbers only)
    assert not any(e.compared for e in field_edits("poc.txt", POINTERS, [0x41], {0x41}))


def test_the_letter_variant_comes_first_of_all_variants() -> None:
    calls = [Invocation("bin/cjson-pointer", "program", ("doc.json", "poc.txt"))]
    data = {"doc.json": b'{"rows":["r0"]}\n', "poc.txt": POINTERS}
    variants, _ = generate(calls, data, [], seed=0, budget=4, constants=[65], chars=frozenset({65}))
    assert variants[0].unit == "poc.txt" and variants[0].files["poc.txt"] == b"/rows/12\n/rows/1B\n"
    assert variants[0].summary()["field"] == {"value": 65, "neighbour": "+1", "compared": True}


def _patch(tmp_path: Path, hunk: str) -> str:
    p = tmp_path / "fix.patch"
    p.write_text("--- a/u.c\n+++ b/u.c\n@@ -1,2 +1,3 @@\n" + hunk)
    return str(p)


def test_patch_chars_are_letters_and_digits_the_code_around_does_not_spell(
    tmp_path: Path,
) -> None:
    from trace_sandbox.gates.variant_gate import patch_chars

    letter = _patch(tmp_path, " for (;;) {\n+    if (p[k] == 0x41 || p[k] == 'q') return 0;\n }\n")
    assert patch_chars([letter]) == {0x41, ord("q")}
    # the real fix's `'0'`/`'9'` are on the line it replaces; `'='` is punctuation
    digits = _patch(
        tmp_path,
        "-    while (p[k] >= '0' && p[0] <= '9')\n"
        "+    while (p[k] >= '0' && p[k] <= '9')\n"
        " {\n+    if (c == '=') break;\n",
    )
    assert patch_chars([digits]) == frozenset()
