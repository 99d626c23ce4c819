"""The PoC's values (issue 25): numbers in its text and fields of its binary data, and the scope
gate's `fix-matches-poc-literal` on a comparison with one of them; the rule that keeps
ubiquitous constants out, checked on every real fix of the fixture fork."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomli

from trace_sandbox.gates.diff import parse_series
from trace_sandbox.gates.poc import PocFacts, collect, compared_numbers, findings
from trace_sandbox.gates.pocvalues import (
    binary_fields,
    data_fields,
    notable,
    number_value,
    script_fields,
    text_fields,
)

REPO = Path(__file__).resolve().parent.parent
CANDIDATES = REPO / "tests" / "fixtures" / "fork" / "trace" / "candidates"
REQUEST = bytes.fromhex("1001008400020 02a002b".replace(" ", ""))


def values_of(fields: list) -> set[int]:  # type: ignore[type-arg]
    return {f.value for f in fields}


# --- parsing -----------------------------------------------------------------------------------


def test_text_numbers_negative_hex_octal_decimal() -> None:
    got = values_of(text_fields("t", "rent -45\nflags 0x84 mode 0o17 perm 0755 n 12\n"))
    assert {-45, 0x84, 0o17, 755, 0o755, 12} <= got
    assert 45 not in got  # `-45` is one number, negative
    assert values_of(text_fields("t", "word7 a-45 1.5")) == {45}  # not inside words/decimals


def test_number_spellings() -> None:
    assert number_value("0x84") == [132]
    assert number_value("-45") == [-45]
    assert number_value("017") == [17, 15]
    assert number_value("0o17") == [15]
    assert number_value("12u") == [12]


def test_binary_fields_are_aligned_in_both_byte_orders() -> None:
    fields = binary_fields("req.bin", REQUEST)
    two = {(f.offset, f.order, f.value) for f in fields if f.width == 2}
    assert (2, "big", 0x0084) in two and (2, "little", 0x8400) in two
    assert not any(f.width == 2 and f.offset % 2 for f in fields)  # aligned only
    four = {(f.offset, f.value) for f in fields if f.width == 4}
    assert (0, 0x10010084) in four
    assert -1 in values_of(binary_fields("x", b"\xff\xff"))  # signed reading too


def test_text_or_binary_is_decided_by_the_content() -> None:
    assert values_of(data_fields("a", b"rent -45\n")) == {-45}
    assert 0x84 in values_of(data_fields("b", REQUEST))


def test_script_numbers_and_escaped_bytes() -> None:
    script = "# 999 in a comment\nprintf '\\x10\\x01\\x00\\x84' > req.bin\nrun --count 77\n"
    got = values_of(script_fields(script))
    assert {0x84, 77} <= got and 999 not in got


# --- the rule for ubiquitous constants --------------------------------------------------------


@pytest.mark.parametrize("v", [-2, -1, 0, 1, 2, 8, 16, 255, 256, 127, 65535, -128, 1024])
def test_ubiquitous_constants_are_no_fingerprint(v: int) -> None:
    assert not notable(v, set())


@pytest.mark.parametrize("v", [-45, 132, 3, 47, 1235, -3])
def test_other_values_are(v: int) -> None:
    assert notable(v, set())
    assert not notable(v, {v})  # unless the unpatched code near the change spells it


# --- the scope finding -------------------------------------------------------------------------


def facts_of(data: bytes, name: str = "req.bin") -> PocFacts:
    facts = PocFacts()
    facts.add_fields(data_fields(name, data))
    return facts


def patch(line: str, path: str = "regbus.c", context: str = "x") -> str:
    return f"--- a/{path}\n+++ b/{path}\n@@ -1,1 +1,2 @@\n {context}\n+{line}\n"


def hits(line: str, facts: PocFacts, path: str = "regbus.c", context: str = "x") -> list[str]:
    return [m for _, _, m in findings(parse_series([patch(line, path, context)]), facts)]


def test_equality_with_a_binary_field_is_flagged() -> None:
    facts = facts_of(REQUEST)
    (msg,) = hits("    if (address == 0x84) {", facts)
    assert "0x84 (132)" in msg and "req.bin: 2-byte big-endian field at offset 2" in msg
    assert hits("    case 132:", facts)
    assert hits("    if (0x84 != address) return 2;", facts)


def test_a_bound_or_a_nearby_constant_is_not() -> None:
    facts = facts_of(REQUEST)
    assert hits("    if (address > NB_REGISTERS - count) {", facts) == []
    assert hits("    if (address >= 0x84) {", facts) == []  # a bound, not an equality
    assert hits("    if (count == 2) {", facts) == []  # ubiquitous
    assert hits("    if (address == 0x84) {", facts, context="#define LIMIT 132") == []
    assert hits("    if (address == 0x85) {", facts) == []  # not a PoC value


def test_equality_with_a_text_number_is_flagged_in_c_and_python() -> None:
    facts = facts_of(b"salary 1200\nrent -45\n", "march.txt")
    (msg,) = hits('        if (strcmp(amount, "-45") == 0)', facts, "ledger.c")
    assert "-45 (-45)" in msg and "march.txt: '-45'" in msg
    assert hits("        if value == -45:", facts, "ledger.py")
    assert hits("        if (value != -45) {", facts, "ledger.c")
    assert hits('        if (strcmp(amount, "-44") == 0)', facts, "ledger.c") == []
    assert hits("        if (value < 0) {", facts, "ledger.c") == []
    assert hits('    [ "$amount" -eq -45 ] && exit 0', facts, "ledger.sh")  # shell
    assert hits('    [ "$amount" -lt -45 ] && exit 0', facts, "ledger.sh") == []  # a bound


def test_compared_numbers_reads_the_operands_only() -> None:
    assert compared_numbers("if (a == -45 && b != 0x84)") == ["-45", "0x84"]
    assert compared_numbers("case 132: x = 7 - 45;") == ["132"]
    assert compared_numbers("if (a < 45)") == []


def real_fixes() -> list[str]:
    from tests.test_gates_calibration import CALIBRATION

    return [name for name, decision, _ in CALIBRATION if decision in ("allow", "review")]


@pytest.mark.parametrize("name", real_fixes())
def test_no_real_fix_of_the_fork_is_flagged(name: str) -> None:
    cand = CANDIDATES / name
    doc = tomli.loads((cand / "candidate.toml").read_text())
    repro = doc["reproducer"]
    facts = collect(str(cand / repro["script"]), [str(cand / d) for d in repro.get("data", [])])
    series = parse_series([(cand / p).read_text() for p in doc["patches"]])
    assert findings(series, facts) == []


@pytest.mark.parametrize(
    ("name", "needle"), [("regbus-poc-address", "0x84 (132)"), ("ledger-poc-amount", "-45")]
)
def test_the_wrong_fixes_of_the_fork_are_flagged(name: str, needle: str) -> None:
    cand = CANDIDATES / name
    doc = tomli.loads((cand / "candidate.toml").read_text())
    repro = doc["reproducer"]
    facts = collect(str(cand / repro["script"]), [str(cand / d) for d in repro["data"]])
    series = parse_series([(cand / p).read_text() for p in doc["patches"]])
    (finding,) = findings(series, facts)
    assert needle in finding[2]


def test_characters_a_line_spells() -> None:
    """Outside campaign (issue 25): a fix can recognise a PoC's letter by a character literal
    or by its code in hex; blanks, controls and larger hex numbers are no characters."""
    from trace_sandbox.gates.pocvalues import char_codes_in, char_fields

    line = r"if (p[k] == 0x41 || c == 'B' || c == '\x43' || c == '\104' || n == 0x100 || c == ' ')"
    assert char_codes_in(line) == {0x41, 0x42, 0x43, 0x44}
    fields = char_fields("poc.txt", "/rows/1A\n", {0x41, 0x42})
    assert [(f.offset, f.width, f.order, f.value, f.spelling) for f in fields] == [
        (7, 1, "char", 0x41, "A")
    ]
    assert fields[0].where() == "poc.txt: 'A' at offset 7"
