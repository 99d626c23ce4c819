"""The diff-scoped mutant generator: exact mutants, deterministic ids, patches that apply."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from trace_sandbox.gates.mutate import generate, line_edits

ROOT = Path(__file__).parent / "fixtures"
CANDIDATES = ROOT / "fork" / "trace" / "candidates"


def descriptions(text: str, lang: str) -> list[str]:
    return [f"{e.operator}: {e.mutated.strip()}" for e in line_edits(text, lang)]  # type: ignore[arg-type]


def test_c_line_every_operator_in_order() -> None:
    assert descriptions("    if (i < n) x = a + 2;", "c") == [
        "relational: if (i <= n) x = a + 2;",
        "arithmetic: if (i < n) x = a - 2;",
        "constant: if (i < n) x = a + 3;",
        "constant: if (i < n) x = a + 1;",
        "negate: if (!(i < n)) x = a + 2;",
        "delete: ;",
    ]
    assert descriptions("    return -1;", "c") == [
        "constant: return -2;",
        "constant: return -0;",
        "return: return 0;",
    ]


def test_python_line_operators() -> None:
    assert descriptions("        if start >= len(items):", "python") == [
        "relational: if start > len(items):",
        "negate: if not (start >= len(items)):",
    ]
    assert descriptions("    end = start + size", "python") == [
        "arithmetic: end = start - size",
        "delete: pass",
    ]
    assert descriptions("    return True", "python") == ["return: return False"]


@pytest.mark.parametrize(
    ("text", "lang"),
    [
        ('    const char *s = "a < b + 1";', "c"),  # strings are not code
        ("    // if (a < b) return 1;", "c"),  # nor comments
        ("#include <stdio.h>", "c"),
        ("    char *p = buf;", "c"),  # a declaration: no product, not deletable
        ('    fprintf(stderr, "n=%d\\n", n + 1);', "c"),  # diagnostics are left alone
        ("    logger.warning('n=%d', n + 1)", "python"),
        ("import os", "python"),
        ("def f(a, b=1):", "python"),
        ("    x = a ** 2 if False else -x", "sh"),  # not a mutated language
    ],
)
def test_lines_without_mutants(text: str, lang: str) -> None:
    assert descriptions(text, lang) == []


def test_fixture_fixes_have_exactly_these_mutants() -> None:
    def ids(name: str) -> list[tuple[str, int, str]]:
        text = (CANDIDATES / name / "fix.patch").read_text()
        return [(m.id, m.line, m.description) for m in generate([text])]

    assert ids("cparse-wrong-fix") == [
        ("m001", 7, "constant 64 -> 65"),
        ("m002", 7, "constant 64 -> 63"),
    ]
    assert ids("cparse-key-overflow") == [
        ("m001", 15, "relational '>=' -> '>'"),
        ("m002", 15, "negate if condition"),
        ("m003", 17, "constant 0 -> 1"),
        ("m004", 17, "constant 0 -> -1"),  # issue 25: a constant's boundary below zero
        ("m005", 17, "remove early return"),  # the guard's return: falls through to the overflow
    ]
    assert [d for _, _, d in ids("pager-last-page")] == [
        "arithmetic '+' -> '-'",
        "arithmetic '-' -> '+'",
        "arithmetic '//' -> '*'",
        "constant 1 -> 2",
        "constant 1 -> 0",
        "return (total + size - 1) // size -> return None",
    ]


def test_generation_is_deterministic_and_patches_differ_in_one_line() -> None:
    text = (ROOT / "gates" / "cparse-ptr" / "fix.patch").read_text()
    first, second = generate([text]), generate([text])
    assert first == second
    assert [m.id for m in first] == ["m001", "m002", "m003", "m004", "m005", "m006"]
    for m in first:
        (mutated,) = m.patches
        changed = [
            (a, b) for a, b in zip(text.split("\n"), mutated.split("\n"), strict=True) if a != b
        ]
        assert changed == [("+" + m.original, "+" + m.mutated)]
        assert m.review_diff().splitlines()[3:] == [f"-{m.original}", f"+{m.mutated}"]


def test_series_mutants_replace_only_their_own_patch() -> None:
    a = (ROOT / "gates" / "cparse-fix.patch").read_text()
    b = (ROOT / "gates" / "pager-fix.patch").read_text()
    mutants = generate([a, b])
    assert [m.patch_index for m in mutants] == [0] * 6 + [1] * 6
    assert all(m.patches[1 - m.patch_index] == (b, a)[m.patch_index] for m in mutants)


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch is not installed")
def test_every_mutant_applies_to_the_unpatched_source(tmp_path: Path) -> None:
    text = (CANDIDATES / "cparse-key-overflow" / "fix.patch").read_text()
    src = ROOT / "fork" / "pkgs" / "cparse" / "src"
    for m in generate([text]):
        work = tmp_path / m.id
        shutil.copytree(src, work)
        subprocess.run(["patch", "-p1", "-s"], input=m.patches[0], text=True, cwd=work, check=True)
        lines = (work / "cparse.c").read_text().splitlines()
        assert lines[m.line - 1] == m.mutated


def test_trace_mutants_lists_what_the_gate_builds(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from engine.cli import main

    cand = CANDIDATES / "cparse-wrong-fix" / "candidate.toml"
    assert main(["mutants", str(cand), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(m["id"], m["description"]) for m in listed] == [
        ("m001", "constant 64 -> 65"),
        ("m002", "constant 64 -> 63"),
    ]
    assert main(["mutants", str(cand)]) == 0
    assert "2 mutant(s) of TRACE-2026-0001-cparse-wrong-fix\n" in capsys.readouterr().out
    alloc = CANDIDATES / "cparse-alloc-fix" / "candidate.toml"
    assert main(["mutants", str(alloc)]) == 0
    assert "(m002 only enlarges an allocation: unobservable if it survives)" in (
        capsys.readouterr().out
    )


def _mutants(path: str, old: list[str], new: list[str]) -> list[tuple[str, str, str | None]]:
    """Mutants of a one-hunk patch that adds `new` after the context `old`."""
    body = "".join(f" {ln}\n" for ln in old) + "".join(f"+{ln}\n" for ln in new)
    head = f"--- a/{path}\n+++ b/{path}\n@@ -1,{len(old)} +1,{len(old) + len(new)} @@\n"
    return [(m.operator, m.mutated.strip(), m.effect) for m in generate([head + body])]


def test_docstring_and_block_comment_lines_are_never_mutated() -> None:
    # issue 10: four of a real fix's ten mutants replaced docstring lines with `pass`
    py = _mutants(
        "pkg/x.py",
        ["def f(a):"],
        [
            '    """Return a + 1 when a < 2.',
            "    The rest - of the doc, x = 3",
            '    """',
            "    return a",
        ],
    )
    assert py == [("return", "return None", None)]
    c = _mutants(
        "x.c", ["int f(int a) {"], ["    /* a < 2", "       b = a + 1; */", "    return a;"]
    )
    assert c == [("return", "return 0;", None)]


def test_boundary_operators_drop_clauses_and_early_returns() -> None:
    got = _mutants(
        "x.c",
        ["int f(const char *s, int n) {"],
        ["    if (n > 0 && s[0] == 'x')", "        return 1;"],
    )
    ops = [(op, text) for op, text, _ in got]
    assert ("relational", "if (n >= 0 && s[0] == 'x')") in ops
    assert ("clause", "if (s[0] == 'x')") in ops
    assert ("clause", "if (n > 0)") in ops
    assert ("early-return", ";") in ops
    py = [(op, t) for op, t, _ in _mutants("m.py", ["def f(a, b):"], ["    if a and b or a > 2:"])]
    assert [t for op, t in py if op == "clause"] == [
        "if b or a > 2:",
        "if a or a > 2:",
        "if a and b:",
    ]


def test_only_raising_an_allocation_size_is_marked_over_allocates() -> None:
    got = _mutants("x.c", ["void f(size_t n) {"], ["    char *k = malloc(n + 1);"])
    assert got == [
        ("arithmetic", "char *k = malloc(n - 1);", None),
        ("constant", "char *k = malloc(n + 2);", "over-allocates"),
        ("constant", "char *k = malloc(n + 0);", None),
    ]
    # the same constant outside an allocation is an ordinary mutant
    assert {e for _, _, e in _mutants("x.c", ["void f(int n) {"], ["    g(n + 1);"])} == {None}


# --- issue 25: constants that can reveal a boundary --------------------------------------------


def constants(text: str, lang: str = "c") -> list[str]:
    return [e.mutated.strip() for e in line_edits(text, lang) if e.operator == "constant"]  # type: ignore[arg-type]


def test_a_hex_literal_is_mutated_in_its_own_base() -> None:
    assert constants("    if (address == 0x84) {") == [
        "if (address == 0x85) {",
        "if (address == 0x83) {",
    ]
    assert constants("    if (m & 0XFF) {") == ["if (m & 0X100) {", "if (m & 0XFE) {"]


def test_an_octal_literal_is_mutated_in_its_own_base() -> None:
    assert constants("    mode = 017;") == ["mode = 020;", "mode = 016;"]  # never `018`
    assert constants("        mode = 0o17", "python") == ["mode = 0o20", "mode = 0o16"]
    assert constants("        flags = 0b10", "python") == ["flags = 0b11", "flags = 0b1"]


def test_zero_becomes_minus_one_a_sign_boundary() -> None:
    assert constants("    if (value < 0) {") == ["if (value < 1) {", "if (value < -1) {"]
    assert constants("        if value < 0:", "python") == ["if value < 1:", "if value < -1:"]
    # a negative literal moves both ways; nothing below -1 is spelled from a 0
    assert constants("    if (x == -45) {") == ["if (x == -46) {", "if (x == -44) {"]


def test_relational_operators_have_their_boundary_pairs() -> None:
    rel = {
        op: [
            e.description
            for e in line_edits(f"    if (a {op} b) {{", "c")
            if e.operator == "relational"
        ]
        for op in ("<", "<=", ">", ">=")
    }
    assert rel == {
        "<": ["relational '<' -> '<='"],
        "<=": ["relational '<=' -> '<'"],
        ">": ["relational '>' -> '>='"],
        ">=": ["relational '>=' -> '>'"],
    }


def test_a_negative_or_hex_constant_in_an_allocation_is_judged_by_value() -> None:
    effects = {
        e.mutated.strip(): e.effect
        for e in line_edits("    char *k = malloc(0x10);", "c")
        if e.operator == "constant"
    }
    assert effects == {"char *k = malloc(0x11);": "over-allocates", "char *k = malloc(0xf);": None}
