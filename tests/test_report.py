"""`trace report`: the page shows what verify-bundle decided, link by link, and escapes the bundle.

The bundles are made by test_bundle_verify's helpers (real records, a real signing decision by
the shipped policy, signed with a real key): an allowed fix, a denied wrong fix (a mutant
survives), a tampered copy of the allowed one, and a hostile one whose advisory, file names and
target output carry markup. The browser checks of the same pages are in test_report_browser.
"""

from __future__ import annotations

import contextlib
import html
import io
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import tests.test_bundle_verify as tbv
from engine.cli import main
from engine.evidence import PAYLOAD_DIR
from engine.evidence.payload import PayloadEntry, json_entry, text_entry
from engine.report.diff import coverage_map, diff_rows
from engine.report.layout import layered
from engine.signing.keys import keygen
from tests.test_bundle_verify import fake, keyless_bundle  # noqa: F401  (fixtures)
from tests.test_policy_signing import applied, gate
from tests.test_policy_signing import gates_doc as base_gates

SURVIVOR_DIFF = (
    "--- a/cparse.c\n+++ b/cparse.c\n@@ -3 +3 @@\n-#define KEY_MAX 64\n+#define KEY_MAX 65\n"
)
HOSTILE = '<script>document.title="pwned"</script><img src=x onerror="alert(1)">'


def wrong_fix_gates() -> dict[str, dict[str, Any]]:
    """The wrong fix's records: no mutant of its one changed constant is killed."""
    docs = base_gates()  # every gate the shipped policy requires, passing
    docs["mutation"] = gate(
        "mutation",
        passed=False,
        score=0.0,
        reasons=["mutation-score-below-threshold"],
        details={
            "policy": applied("mutation"),
            "killed": 0,
            "survived": 1,
            "survivors": [{"id": "m1", "description": "KEY_MAX 64 -> 65", "diff": SURVIVOR_DIFF}],
        },
    )
    return docs


def coverage_gates() -> dict[str, dict[str, Any]]:
    docs = base_gates()
    docs["coverage"] = gate(
        "coverage",
        score=1.0,
        details={
            "policy": applied("coverage"),
            "files": [{"file": "x.c", "covered": [1], "missed": [], "executable": [1]}],
        },
    )
    docs["fault-site"] = gate("fault-site", details={"policy": applied("fault-site")})
    return docs


def records(
    monkeypatch: pytest.MonkeyPatch,
    gates: Callable[[], dict[str, dict[str, Any]]] | None = None,
    extra: list[PayloadEntry] | None = None,
) -> list[PayloadEntry]:
    if gates is not None:
        monkeypatch.setattr(tbv, "gates_doc", gates)
    out = tbv.entries()
    return out + (extra or [])


def signed(tmp: Path, entries: list[PayloadEntry]) -> tuple[Path, Path]:
    """(bundle, identity lock trusting its key)."""
    priv, _, _ = keygen(tmp / "keys" / "k")
    bundle = tbv.key_bundle(tmp / "bundle", priv, entries)
    tbv.write_policy(tmp / "id.json", keys=[{"name": "k", "public_key": "keys/k.pub"}])
    return bundle, tmp / "id.json"


def report(bundle: Path, identity: Path, out: Path) -> tuple[int, str, str]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["report", str(bundle), "--identity", str(identity), "-o", str(out)])
    return rc, out.read_text(encoding="utf-8") if out.exists() else "", buf.getvalue()


def allowed_page(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, Path]:
    bundle, identity = signed(tmp, records(monkeypatch, coverage_gates))
    rc, page, _ = report(bundle, identity, tmp / "allowed.html")
    return rc, page, tmp / "allowed.html"


def denied_page(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, Path]:
    bundle, identity = signed(tmp, records(monkeypatch, wrong_fix_gates))
    rc, page, _ = report(bundle, identity, tmp / "denied.html")
    return rc, page, tmp / "denied.html"


def tampered_page(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, Path]:
    bundle, identity = signed(tmp, records(monkeypatch, coverage_gates))
    patch = bundle / PAYLOAD_DIR / "patches" / "01-fix.patch"
    patch.write_text(patch.read_text().replace("+b", "+c"))
    rc, page, _ = report(bundle, identity, tmp / "tampered.html")
    return rc, page, tmp / "tampered.html"


def hostile_entries(monkeypatch: pytest.MonkeyPatch) -> list[PayloadEntry]:
    entries = records(monkeypatch)

    def advisory(d: Any) -> None:
        d.update(
            summary=HOSTILE,
            details=HOSTILE,
            references=[{"type": "FIX", "url": "javascript:alert(1)"}],
        )

    tbv._replace(entries, "advisory.json", advisory)
    return [
        *entries,
        text_entry(f"reproducer/{HOSTILE[:8]}x.sh", "reproducer", HOSTILE),
        json_entry("upstream.json", "upstream", {"upstream_fix": "javascript:alert(2)"}),
        text_entry("review.md", "review", "</pre></details>" + HOSTILE),
    ]


def hostile_page(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, Path]:
    bundle, identity = signed(tmp, hostile_entries(monkeypatch))
    rc, page, _ = report(bundle, identity, tmp / "hostile.html")
    return rc, page, tmp / "hostile.html"


def test_allowed_bundle_page_says_it_verifies_link_by_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rc, page, _ = allowed_page(tmp_path, monkeypatch)
    assert rc == 0
    assert 'data-decision="ALLOW"' in page and 'id="integrity" class="integrity i-verified"' in page
    assert "NOT INTACT" not in page
    # every link's digest shown and verified; no link in any other state
    statuses = re.findall(r'data-link="[^"]*" data-status="(\w+)"', page)
    assert statuses and set(statuses) == {"verified"}
    statement = json.loads((tmp_path / "bundle" / "statement.json").read_text())
    advisory = next(s for s in statement["subject"] if s["name"] == "advisory.json")
    assert advisory["digest"]["sha256"] in page
    # the claim stack, in the order a reviewer audits it
    order = [
        "advisory",
        "upstream",
        "patch",
        "review",
        "runs",
        "gates",
        "decision",
        "replay",
        "signature",
    ]
    found = [page.index(f'data-section="{s}"') for s in order]
    assert found == sorted(found)
    assert "ALLOW" in page and "signing decision re-run" in page
    # coverage drawn on the diff: the one added line of x.c is covered
    assert 'data-coverage="covered"' in page
    # the signer: key mode with its hint
    assert "key hint" in page and re.search(r"mode</th><td>key", page)


def test_denied_wrong_fix_shows_reasons_and_the_surviving_mutant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rc, page, _ = denied_page(tmp_path, monkeypatch)
    assert rc == 1
    assert 'data-decision="REVIEW"' in page and 'data-state="amber"' in page
    assert "decision.denied" in page
    assert 'data-reason="mutation-score-below-threshold"' in page
    # the reason's message and fix from the catalogue, as the decision carries them
    assert "mutation" in page and "DENY" in page
    assert "KEY_MAX 64 -&gt; 65" in page and "#define KEY_MAX 65" in page


def test_tampered_bundle_names_the_changed_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rc, page, _ = tampered_page(tmp_path, monkeypatch)
    assert rc == 1
    assert 'data-decision="UNTRUSTED"' in page and "subject.digest-mismatch" in page
    assert 'id="integrity" class="integrity i-red"' in page
    assert re.search(r'data-link="patches/01-fix.patch" data-status="changed"', page)
    # the other links still verify on their own
    assert re.search(r'data-link="advisory.json" data-status="verified"', page)
    assert 'data-section="patch" data-ok="false"' in page
    assert 'data-section="advisory" data-ok="true"' in page


def test_hostile_bundle_is_escaped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rc, page, _ = hostile_page(tmp_path, monkeypatch)
    assert rc == 0, page[:2000]
    assert "<script>document" not in page and "<img src=x" not in page
    assert "&lt;script&gt;document.title=&#34;pwned&#34;&lt;/script&gt;" in page
    assert 'href="javascript:' not in page and "javascript:alert(1)" in page
    assert (
        "&#10007; not grounded</span>: the advisory's FIX references are javascript:alert(1)"
        in page
    )
    # exactly one script element: the page's own
    assert page.count("<script") == 1
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page)
    assert csp, page[:500]
    policy = html.unescape(csp.group(1))
    assert "default-src 'none'" in policy and "script-src 'sha256-" in policy


def test_report_refuses_to_write_inside_the_bundle_and_a_missing_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle, identity = signed(tmp_path, records(monkeypatch))
    rc = main(["report", str(bundle), "--identity", str(identity), "-o", str(bundle / "r.html")])
    assert rc == 2 and not (bundle / "r.html").exists()
    assert "inside the bundle" in capsys.readouterr().err
    rc = main(["report", str(tmp_path / "nope"), "-o", str(tmp_path / "x.html")])
    assert rc == 2 and not (tmp_path / "x.html").exists()
    assert "not a bundle directory" in capsys.readouterr().err


def test_diff_rows_number_lines_and_mark_coverage() -> None:
    text = "--- a/x.c\n+++ b/x.c\n@@ -10,2 +10,3 @@\n-old\n+new1\n+new2\n+new3\n"
    record = {"details": {"files": [{"file": "x.c", "covered": [10], "missed": [11]}]}}
    rows = diff_rows(text, coverage_map(record))
    added = [(r.new, r.coverage) for r in rows if r.kind == "add"]
    assert added == [(10, "covered"), (11, "missed"), (12, "")]
    assert [r.old for r in rows if r.kind == "del"] == [10]
    assert coverage_map({"details": {"files": "junk"}}) == {}


def test_layout_layers_by_generation_and_survives_a_forged_cycle() -> None:
    nodes = {n: (n, "built") for n in ("a", "b", "c", "d")}
    lay = layered(nodes, [("a", "b"), ("b", "c"), ("a", "d"), ("zz", "a")])
    x = {n.id: n.x for n in lay.nodes}
    assert x["a"] < x["b"] < x["c"] and x["b"] == x["d"]
    assert lay.layers == 3 and len(lay.edges) == 3
    cyc = layered(nodes, [("a", "b"), ("b", "a")])
    assert len(cyc.nodes) == 4


def test_trace_graph_svg_and_html(capsys: pytest.CaptureFixture[str]) -> None:
    repo = Path(__file__).resolve().parent.parent
    assert main(["graph", str(repo / "graphs" / "example.toml"), "--format", "svg"]) == 0
    svg = capsys.readouterr().out
    assert svg.startswith("<?xml") and 'xmlns="http://www.w3.org/2000/svg"' in svg
    steps = re.findall(r'data-step="([^"]+)"', svg)
    assert sorted(steps) == ["count", "greet", "report"]
    assert svg.count('class="edge"') == 2
    assert main(["graph", str(repo / "graphs" / "example.toml"), "--format", "html"]) == 0
    page = capsys.readouterr().out
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page
    assert "default-src 'none'" in html.unescape(page) and "<script" not in page


def test_accuracy_record_is_shown_when_the_bundle_has_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    accuracy = {
        "schema": "trace.accuracy/v1",
        "summary": "model passes, upstream passes; line overlap 0.5",
        "human_fix": "a1b2c3d",
        "diff": "--- upstream\n+++ model\n@@ -1 +1 @@\n-if (n > 15)\n+if (n >= 16)\n",
    }
    entries = records(monkeypatch, extra=[json_entry("agent/accuracy.json", "accuracy", accuracy)])
    bundle, identity = signed(tmp_path, entries)
    rc, page, _ = report(bundle, identity, tmp_path / "acc.html")
    assert rc == 0
    assert 'data-section="accuracy"' in page and "a1b2c3d" in page
    assert '<p id="accuracy-summary"><strong>model passes, upstream passes' in page
    assert "+if (n &gt;= 16)" in page
    from engine.report.findings import write_findings
    from tests.test_bundle_verify import load_identity_policy, verify_bundle

    policy = load_identity_policy(identity)
    index = write_findings(tmp_path / "f", [bundle], lambda b: verify_bundle(b, policy))
    assert "model passes, upstream passes; line overlap 0.5" in index.read_text()


GARBAGE: dict[str, str] = {
    "verify-result.json": json.dumps(
        {
            "claims": 5,
            "pre": {"runs": [{"invocations": [{"args": 5, "sanitizer": "x"}], "sanitizer": 1}]},
            "post": "x",
            "steps": {"a": 5, "b": {"status": ["x"]}},
        }
    ),
    "decisions/signing.json": json.dumps({"reasons": 7, "decision": ["x"], "policy": None}),
    "decisions/routing.json": "[1, 2]",
    "advisory.json": json.dumps({"aliases": 3, "references": "x", "severity": {"a": [1, None]}}),
    "replay.json": json.dumps({"steps": {"s": {"needs": "abc"}, "t": {"needs": ["s", 4]}}}),
    "gates/deep.json": "[" * 50_000 + "]" * 50_000,
    "gates/scope.json": json.dumps(
        {"gate": 3, "details": {"survivors": [{"diff": 5}], "files": 1}}
    ),
    "patches/01-fix.patch": "@@ -x +y @@\n+\x00\n",
}


def test_a_forged_bundle_of_wrong_shapes_still_renders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records of the wrong types, a JSON nested past Python's recursion limit, a broken diff:
    the page is written and says the bundle does not verify, naming the changed files."""
    bundle, identity = signed(tmp_path, records(monkeypatch))
    for rel, text in GARBAGE.items():
        (bundle / PAYLOAD_DIR / rel).write_text(text)
    rc, page, _ = report(bundle, identity, tmp_path / "garbage.html")
    assert rc == 1 and "NOT INTACT" in page
    changed = set(re.findall(r'data-link="([^"]+)" data-status="(?:changed|unlisted)"', page))
    assert set(GARBAGE) <= changed


def test_keyless_bundle_shows_the_signer_and_its_rekor_entry(
    keyless_bundle: tuple[Path, Path],  # noqa: F811
    tmp_path: Path,
) -> None:
    bundle, trust = keyless_bundle
    tbv.write_policy(tmp_path / "id.json")
    out = tmp_path / "keyless.html"
    identity = ["--identity", str(tmp_path / "id.json"), "--trust-config", str(trust)]
    rc = main(["report", str(bundle), *identity, "-o", str(out)])
    page = html.unescape(out.read_text())
    assert rc == 0 and 'data-state="verified"' in page
    signature = page[page.index('data-section="signature"') : page.index('id="step-graph"')]
    assert tbv.SIGNER in signature and tbv.TEST_ISSUER in signature
    assert "present (Fulcio)" in signature and "Transparency log (Rekor) entries" in signature
    log = json.loads((bundle / "statement.sigstore.json").read_text())
    entry = log["verificationMaterial"]["tlogEntries"][0]
    assert f"<td>{entry['logIndex']}</td>" in signature
    assert "certificate, SCT, transparency log" in signature and "signer identity" in signature
