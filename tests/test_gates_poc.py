"""The scope gate's `fix-matches-poc-literal`: a fix that compares against the PoC's own
string or exact length (issue 10), and correct fixes that must not be flagged."""

from __future__ import annotations

from pathlib import Path

from trace_sandbox.gates.diff import parse_series
from trace_sandbox.gates.poc import collect, findings
from trace_sandbox.gates.scope import ScopePolicy, evaluate

REPO = Path(__file__).resolve().parent.parent
CANDIDATES = REPO / "tests" / "fixtures" / "fork" / "trace" / "candidates"
KEY = CANDIDATES / "cparse-key-overflow"


def one_line(path: str, line: str) -> str:
    return f"--- a/{path}\n+++ b/{path}\n@@ -1,1 +1,2 @@\n x\n+{line}\n"


def flagged(line: str, path: str = "cparse.c") -> list[str]:
    facts = collect(str(KEY / "repro.sh"), [str(KEY / "long-key.conf")])
    return [m for _, _, m in findings(parse_series([one_line(path, line)]), facts)]


def test_the_pocs_exact_length_or_string_is_flagged() -> None:
    # the PoC line `kkkk…(40)=value` is 46 bytes (47 with its newline); the key is 40
    assert flagged("        if (strlen(line) == 47) continue;") == [
        "tests equality with 47, a length of the reproducer's input"
    ]
    assert flagged("    if (klen != 40) {")
    assert flagged('    if (strcmp(key, "' + "k" * 40 + '") == 0) return 0;')
    assert flagged("    if key == '" + "k" * 40 + "':", "pkg/x.py")
    assert flagged('    if (strstr(line, "kkkkkkkkkkkk")) return 0;')  # part of the PoC


def test_correct_fixes_are_not_flagged() -> None:
    assert flagged("    if (klen >= KEY_MAX) {") == []
    assert flagged("    if (klen >= 16) {") == []  # a bound, not an equality with the PoC
    assert flagged("    if (n == 2) {") == []  # small numbers are no fingerprint
    assert flagged('    fprintf(stderr, "kkkkkkkkkkkk");') == []  # not compared
    for name in ("cparse-key-overflow", "pager-last-page"):
        cand = CANDIDATES / name
        data = [str(p) for p in cand.iterdir() if p.suffix in (".conf", ".py")]
        facts = collect(str(cand / "repro.sh"), data)
        series = parse_series([(cand / "fix.patch").read_text()])
        assert findings(series, facts) == []


def test_the_scope_gate_denies_with_the_catalogued_code() -> None:
    facts = collect(str(KEY / "repro.sh"), [str(KEY / "long-key.conf")])
    rec = evaluate(
        [one_line("cparse.c", "    if (strlen(line) == 46) return 0;")], ScopePolicy(), facts
    )
    assert (rec["passed"], rec["reasons"]) == (False, ["fix-matches-poc-literal"])
    details = rec["details"]
    assert isinstance(details, dict)
    assert "46, a length of the reproducer's input" in details["summary"]
