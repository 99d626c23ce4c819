"""The report and findings pages in real headless Chromium (tests/browser.py): what a reviewer
sees (the banner, claim rows, reason codes, a surviving mutant), that sorting and filtering work
without a server, that nothing is fetched and no script error happens, and that hostile bundle
content stays text. Screenshots go to the test's temp dir (the README's come from the real builds
of test_report_e2e, test_report_fork and test_demo, with TRACE_UPDATE_SCREENSHOTS=1).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from engine.cli import main
from tests import browser
from tests.test_report import (
    allowed_page,
    denied_page,
    hostile_page,
    records,
    signed,
    tampered_page,
    wrong_fix_gates,
)

DOCS = Path(__file__).resolve().parent.parent / "docs"
README_SHOTS: set[str] = (
    set()
)  # the README's come from real builds (test_report_e2e, _fork, test_demo)


@pytest.fixture(autouse=True)
def _browser() -> None:
    browser.chromium()  # skip (outside CI only) before building anything


def clean(result: dict[str, Any]) -> None:
    """No script error, no console error, no CSP violation, nothing fetched."""
    assert result["errors"] == [], result
    assert result["console"] == [], result
    assert result["violations"] == [], result
    assert result["resources"] == [], result


def shot(page: Path, tmp: Path, name: str, size: str = "1280,2400") -> Path:
    return browser.screenshot(page, tmp / f"{name}.png", tmp, size)


BANNER = """
  var b = document.getElementById("verdict");
  return {
    banner_visible: __visible("#verdict-decision"),
    banner_verified: document.getElementById("integrity").getAttribute("data-verified"),
    decision: document.getElementById("verdict-decision").getAttribute("data-decision"),
    banner_text: b.textContent,
    title: document.title,
    claims: __texts("table.claims tbody tr td:first-child"),
    reasons: __texts("section#decision tr[data-reason] td.reason-code"),
    survivors: __texts(".survivor"),
    bad_links: __texts("tr[data-status='changed'] td:first-child"),
    sections_bad: Array.prototype.map.call(
      document.querySelectorAll("section[data-state='bad'], section[data-state='amber']"),
      function (s) { return s.getAttribute("data-section"); }),
    graph_nodes: document.querySelectorAll("svg.graph g.node").length,
    review: __texts("#review pre"),
    advisory_summary: __texts("#advisory table.kv tr:nth-child(3) td"),
    img: document.querySelectorAll("main img").length,
    js_links: document.querySelectorAll("a[href^='javascript']").length
  };
"""


def test_allowed_fix_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, page = allowed_page(tmp_path, monkeypatch)
    r = browser.run_page(page, tmp_path, BANNER)
    clean(r)
    assert r["banner_visible"] and r["banner_verified"] == "true" and r["decision"] == "ALLOW"
    assert "Intact: signed (key)" in r["banner_text"]
    assert r["claims"] == [
        "pre-fix-fails-as-expected",
        "post-fix-survives",
        "runs-agree",
        "deterministic",
    ]
    assert r["sections_bad"] == [] and r["bad_links"] == []
    assert r["graph_nodes"] > 0
    assert r["scripts"] == 2  # the harness and the page's own
    shot(page, tmp_path, "report-allowed")


def test_denied_wrong_fix_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, page = denied_page(tmp_path, monkeypatch)
    r = browser.run_page(page, tmp_path, BANNER)
    clean(r)
    assert r["banner_visible"] and r["banner_verified"] == "false" and r["decision"] == "REVIEW"
    assert "Intact but not vouched for" in r["banner_text"]
    assert "decision.denied" in r["banner_text"]
    assert r["reasons"] == ["mutation-score-below-threshold"]
    assert len(r["survivors"]) == 1 and "#define KEY_MAX 65" in r["survivors"][0]
    assert "decision" in r["sections_bad"]
    shot(page, tmp_path, "report-denied")


def test_tampered_page_banner_and_the_changed_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, page = tampered_page(tmp_path, monkeypatch)
    r = browser.run_page(page, tmp_path, BANNER)
    clean(r)
    assert r["banner_visible"] and r["banner_verified"] == "false" and r["decision"] == "UNTRUSTED"
    assert "subject.digest-mismatch" in r["banner_text"]
    assert r["bad_links"] == ["patches/01-fix.patch"]
    assert "patch" in r["sections_bad"] and "advisory" not in r["sections_bad"]
    shot(page, tmp_path, "report-tampered", "1280,1400")


def test_hostile_bundle_shows_markup_as_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, page = hostile_page(tmp_path, monkeypatch)
    r = browser.run_page(page, tmp_path, BANNER)
    clean(r)
    assert r["title"].startswith("trace report")  # not "pwned"
    assert r["scripts"] == 2 and r["img"] == 0 and r["js_links"] == 0
    assert r["advisory_summary"] == [
        '<script>document.title="pwned"</script><img src=x onerror="alert(1)">'
    ]
    assert r["review"] and r["review"][0].startswith("</pre></details><script>")


def findings_dir(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Three bundles: an allowed fix, a denied wrong fix, and a tampered copy of the first."""
    allowed, identity = signed(tmp / "a", records(monkeypatch))
    denied, _ = signed(tmp / "d", records(monkeypatch, wrong_fix_gates))
    tampered = tmp / "t" / "bundle"
    shutil.copytree(allowed, tampered)
    (tampered / "payload" / "advisory.json").write_text("{}")
    out = tmp / "findings"
    keys = ["--key", str(tmp / "d" / "keys" / "k.pub")]  # the lock trusts a's key only
    bundles = [str(allowed), str(denied), str(tampered)]
    rc = main(["report", "--findings", str(out), *bundles, "--identity", str(identity), *keys])
    assert rc == 1  # two of the three do not verify
    return out / "index.html"


SORT_FILTER = """
  function cands() { return __shown("#findings tbody tr td:first-child"); }
  var out = {initial: cands(), rows: document.querySelectorAll("#findings tbody tr").length};
  document.querySelector("button[data-sort='decision']").click();
  out.by_decision_asc = __shown("#findings tbody tr td:nth-child(4)");
  document.querySelector("button[data-sort='decision']").click();
  out.by_decision_desc = __shown("#findings tbody tr td:nth-child(4)");
  out.aria = document.querySelector("th[data-key='decision']").getAttribute("aria-sort");
  __type("#filter-decision", "deny");
  out.deny_only = cands();
  __type("#filter-decision", "");
  __type("#filter-text", "mutation-score");
  out.text_filter = cands();
  out.count = document.getElementById("shown-count").textContent;
  __type("#filter-text", "");
  __type("#filter-signed", "no");
  out.unsigned = cands().length;
  __type("#filter-signed", "");
  out.links = Array.prototype.map.call(document.querySelectorAll("#findings a.report-link"),
    function (a) { return a.getAttribute("href"); });
  out.not_verifying = __shown("#findings td:nth-child(8) .integrity:not(.i-verified)").length;
  return out;
"""


def test_findings_page_sorts_and_filters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    index = findings_dir(tmp_path, monkeypatch)
    r = browser.run_page(index, tmp_path, SORT_FILTER)
    clean(r)
    assert r["rows"] == 3
    assert r["by_decision_asc"][0].endswith("allow") and r["by_decision_asc"][-1].endswith("deny")
    assert r["by_decision_desc"][0].endswith("deny") and r["aria"] == "descending"
    assert len(r["deny_only"]) == 1
    assert len(r["text_filter"]) == 1 and r["count"] == "1 shown"
    assert r["unsigned"] == 0  # all three carry a signature (one over tampered files)
    assert len(r["links"]) == 3 and all((index.parent / h).is_file() for h in r["links"])
    assert r["not_verifying"] == 2
    shot(index, tmp_path, "findings-unit", "1280,700")


def test_report_prints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Readable printed: Chromium prints the page (its print CSS hides the filter controls and
    the table of contents, and lets long output run on) to several PDF pages."""
    _, _, page = denied_page(tmp_path, monkeypatch)
    assert browser.print_pdf(page, tmp_path / "denied.pdf", tmp_path) >= 2
