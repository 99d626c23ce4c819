"""The top of `trace report` (issue 31): the decision, its reasons with meaning and fix, what was
proven, and integrity as a separate line of three states; full stacks from the run records with
the patched function marked; "not run" grey; numbering, control characters and machine paths.

The bundles are test_report's (real records, a real signing decision by the shipped policy,
signed with a real key), plus an ASan one here: its pre-fix runs carry a 16-frame stack in the
record while their 2,000-character stderr tail (as the harness keeps it) shows only the last
frames, with a NUL and an escape sequence in it. The browser checks are test_report_screen.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import tests.test_bundle_verify as tbv
from engine.audit.checks import BundleVerdict
from engine.audit.signature import Check
from engine.evidence import PAYLOAD_DIR, SIGNATURE_FILE
from engine.evidence.payload import text_entry
from engine.report.jinja_env import unmachine, visible
from engine.report.verdict import integrity
from tests.test_report import denied_page, records, report, signed

BASE_DOC = tbv.consistent_verify_doc
FUNCTIONS = ["__asan_memcpy", "copy_key", "parse_key", "parse_line", "parse_file", "main"]
FUNCTIONS += [f"helper_{i}" for i in range(10)]
FIX = (
    "--- a/src/cparse.c\n+++ b/src/cparse.c\n"
    "@@ -40,3 +40,4 @@ static int parse_key(const char *k, size_t n)\n"
    " {\n-  char buf[64];\n+  char buf[64];\n+  if (n >= sizeof buf) return -1;\n"
)
TAIL = (
    "...cut...\n    #14 0x4011 in helper_8 src/util.c:9\n    #15 0x4012 in helper_9 src/util.c:10\n"
)
TAIL += "odd bytes: \x00 and \x1b[31mred\x1b[0m\n"


def frames() -> list[dict[str, Any]]:
    out = []
    for i, fn in enumerate(FUNCTIONS):
        file = "compiler-rt/asan.cpp" if fn.startswith("__asan") else "src/cparse.c"
        line = 41 if fn == "parse_key" else 100 + 10 * i  # parse_key: inside the hunk
        out.append({"function": fn, "file": file, "line": line, "source": "sanitizer"})
    return out


def asan_doc() -> dict[str, Any]:
    doc = BASE_DOC()
    for r in doc["pre"]["runs"]:
        inv = r["invocations"][0]
        inv["sanitizer"] = {"tool": "AddressSanitizer", "kind": "stack-buffer-overflow"}
        inv["frames"] = frames()
        inv["stderr_tail"] = TAIL
        r["sanitizer"] = inv["sanitizer"]
    doc["candidate_file"] = "/tmp/machine-x/fork/trace/candidates/c1/candidate.toml"
    doc["graph"] = "/tmp/machine-x/fork/trace.toml"
    return doc


def asan_records(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    monkeypatch.setattr(tbv, "consistent_verify_doc", asan_doc)
    entries = [e for e in records(monkeypatch) if e.path != "patches/01-fix.patch"]
    return [*entries, text_entry("patches/01-fix.patch", "patch", FIX)]


def asan_page(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, Path]:
    bundle, identity = signed(tmp, asan_records(monkeypatch))
    rc, page, _ = report(bundle, identity, tmp / "asan.html")
    return rc, page, tmp / "asan.html"


def unsigned_page(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, Path]:
    """An allowed fix left unsigned on purpose (its signature removed)."""
    bundle, identity = signed(tmp, asan_records(monkeypatch))
    (bundle / SIGNATURE_FILE).unlink()
    rc, page, _ = report(bundle, identity, tmp / "unsigned.html")
    return rc, page, tmp / "unsigned.html"


def unknown_key_page(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, Path]:
    """Signed by a key the identity lock does not list."""
    bundle, _ = signed(tmp / "a", asan_records(monkeypatch))
    _, other = signed(tmp / "b", asan_records(monkeypatch))
    rc, page, _ = report(bundle, other, tmp / "unknown.html")
    return rc, page, tmp / "unknown.html"


def top(page: str) -> str:
    """The verdict section: what the first screen shows."""
    return page[page.index('<section id="verdict"') : page.index("</section>")]


def state(page: str) -> str:
    m = re.search(r'id="integrity" class="[^"]*" data-state="(\w+)"', page)
    assert m, page[:3000]
    return m.group(1)


def test_asan_bundle_verifies_and_the_top_says_what_was_proven(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rc, page, _ = asan_page(tmp_path, monkeypatch)
    assert rc == 0, page[:3000]
    head = top(page)
    assert 'data-decision="ALLOW"' in head and state(page) == "verified"
    assert (
        "bin/cparse failed with AddressSanitizer stack-buffer-overflow in "
        "copy_key (src/cparse.c:110), in 3 of 3 runs"
    ) in head
    assert "bin/cparse: exit 0 in 3 of 3 runs" in head
    assert "score 0.9 against min_score 0.8" in head  # mutation, against the shipped threshold
    assert 'id="claim-stack"' in head and head.count('class="cs-link') == 8


def test_the_full_stack_comes_from_the_record_with_the_patched_function_marked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, page, _ = asan_page(tmp_path, monkeypatch)
    runs = page[page.index('data-section="runs"') : page.index('data-section="gates"')]
    table = runs[runs.index('<table class="frames') :]
    table = table[: table.index("</table>")]
    assert "16 frames" in table and "from the stderr tail" not in table
    assert re.findall(r"<tr[^>]*><td>(\d+)</td>", table) == [str(i) for i in range(16)]
    assert "src/cparse.c:41" in table and "src/cparse.c:250" in table  # file:line
    patched = re.findall(
        r'<tr class="patched" data-patched="true"><td>\d+</td><td class="mono">(\w+)', table
    )
    assert patched == ["parse_key"]
    picture = runs[runs.index('<svg class="fault-site"') : runs.index("</svg>")]
    assert picture.count('data-patched="true"') == 1 and "&#9664; patched" in picture


def test_control_characters_are_shown_and_no_machine_path_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, page, _ = asan_page(tmp_path, monkeypatch)
    assert "\x00" not in page and "\x1b" not in page
    assert "odd bytes: ␀ and ␛[31mred␛[0m" in page
    assert "/tmp/machine-x" not in page and str(tmp_path) not in page
    assert "&lt;fork&gt;/trace/candidates/c1/candidate.toml" in page


def test_denied_is_amber_not_red_and_names_its_reasons_on_top(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rc, page, _ = denied_page(tmp_path, monkeypatch)
    assert rc == 1
    head = top(page)
    assert state(page) == "amber" and "decision.denied" in head
    # mutation-score-below-threshold is waivable in the shipped catalogue: a review
    assert 'data-decision="REVIEW"' in head
    row = re.search(r'<tr data-reason="mutation-score-below-threshold">(.*?)</tr>', head, re.S)
    assert row and "waivable" in row.group(1) and "Too few mutants" in row.group(1)
    assert "Strengthen the reproducer" in row.group(1) and "score 0 &lt; 0.8" in row.group(1)
    assert "THIS BUNDLE DOES NOT VERIFY" not in page


def test_three_integrity_states_are_distinct(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, ok, _ = asan_page(tmp_path / "ok", monkeypatch)
    _, unsigned, _ = unsigned_page(tmp_path / "u", monkeypatch)
    _, unknown, _ = unknown_key_page(tmp_path / "k", monkeypatch)
    assert [state(ok), state(unsigned), state(unknown)] == ["verified", "amber", "red"]
    assert 'data-decision="ALLOW"' in top(unsigned) and "bundle.unsigned" in top(unsigned)
    # a bundle that is not intact decides nothing, whatever its decision file says
    assert 'data-decision="UNTRUSTED"' in top(unknown) and "signature.unknown-key" in top(unknown)
    assert "NOT proven" in top(unknown)


def verdict(reasons: list[str]) -> BundleVerdict:
    checks = [Check(name=r, ok=False, reason=r) for r in reasons]
    return BundleVerdict(bundle="b", passed=not reasons, mode="key", reasons=reasons, checks=checks)


def test_integrity_never_paints_two_meanings_alike() -> None:
    assert integrity(verdict([])).state == "verified"
    assert integrity(verdict(["bundle.unsigned"])).state == "amber"
    assert integrity(verdict(["decision.denied", "bundle.unsigned"])).state == "amber"
    assert integrity(verdict(["decision.denied", "subject.digest-mismatch"])).state == "red"
    assert integrity(verdict(["signature.unknown-key"])).state == "red"
    failed_without_reason = BundleVerdict(
        bundle="b", passed=False, mode="none", reasons=[], checks=[]
    )
    assert integrity(failed_without_reason).state == "red"


def test_a_check_that_was_not_run_is_grey_and_numbering_matches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle, identity = signed(tmp_path, asan_records(monkeypatch))
    patch = bundle / PAYLOAD_DIR / "patches" / "01-fix.patch"
    patch.write_text(patch.read_text() + "+  extra;\n")
    rc, page, _ = report(bundle, identity, tmp_path / "t.html")
    assert rc == 1 and state(page) == "red"
    row = re.search(
        r'<tr class="(\w+)" data-check="records agree" data-state="(\w+)">'
        r"<td>records agree</td><td>(.*?)</td>",
        page,
    )
    assert row and row.group(1) == row.group(2) == "notrun" and "not run" in row.group(3)
    assert "&#10003;" not in row.group(3)
    toc = re.findall(r'<li value="(\d+)"><a href="#([\w-]+)">', page)
    numbered = re.findall(
        r'<section id="([\w-]+)"[^>]*>\s*<header><h2 id="h-[\w-]+">'
        r'<span class="step-no">(\d+)\.</span>',
        page,
    )
    # the contents and the headings: the same numbers for the same anchors, in page order
    assert toc == [(n, i) for i, n in numbered]
    assert [int(n) for n, _ in toc] == list(range(1, len(toc) + 1)) and len(toc) == 13


def test_visible_and_unmachine() -> None:
    assert visible("a\x00b\x1b[1m\x7f\u202e\n\t") == "a␀b␛[1m␡⟨U+202E⟩\n\t"
    root = "/home/ci/fork"
    assert unmachine("/home/ci/fork/trace.toml", root) == "<fork>/trace.toml"
    assert unmachine("at /tmp/pytest-1/x/y/z.c:12, ok") == "at <machine>/…/z.c:12, ok"
    assert unmachine("/nix/store/abc-cparse/bin/cparse") == "/nix/store/abc-cparse/bin/cparse"


def loaded(signing: dict[str, Any], reasons: list[str]) -> Any:
    from engine.report.load import Link, LoadedBundle

    link = Link(path="decisions/signing.json", status="verified", doc=signing)
    return LoadedBundle(directory="b", verdict=verdict(reasons), links={link.path: link})


def test_the_decision_word_from_the_signing_decision_and_the_catalogue() -> None:
    from engine.report.verdict import build_verdict

    waivable = {"code": "mutation-score-below-threshold"}
    never = {"code": "pre-fix-did-not-fail"}  # waivable = false in the catalogue
    deny = ["decision.denied"]
    assert build_verdict(loaded({"decision": "allow"}, [])).decision == "ALLOW"
    assert build_verdict(loaded({"decision": "deny", "reasons": [waivable]}, deny)).decision == (
        "REVIEW"
    )
    mixed = build_verdict(loaded({"decision": "deny", "reasons": [waivable, never]}, deny))
    assert mixed.decision == "DENY" and [r.waivable for r in mixed.reasons] == [True, False]
    assert build_verdict(loaded({}, [])).decision == "NONE"
    forged = build_verdict(loaded({"decision": "allow"}, ["subject.digest-mismatch"]))
    assert forged.decision == "UNTRUSTED" and "says ALLOW" in forged.headline
    waived = build_verdict(loaded({"decision": "allow", "waived": [waivable]}, []))
    assert [r.code for r in waived.waived] == ["mutation-score-below-threshold"]
