"""`trace fork --report DIR` on a git copy of the fixture fork (real nix): a findings page with
one row per candidate, each linking to its bundle's report, checked in real headless Chromium."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
from pathlib import Path

import pytest

from engine.cli import main
from engine.signing.keys import keygen
from tests import browser
from tests.test_flake_fork import git

pytestmark = pytest.mark.nix
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "fork"
DOCS = Path(__file__).resolve().parent.parent / "docs"

ACTIONS = """
  var out = {
    rows: __texts("#findings tbody tr td:first-child"),
    decisions: __texts("#findings tbody tr td:nth-child(4)"),
    links: Array.prototype.map.call(document.querySelectorAll("#findings a.report-link"),
      function (a) { return a.getAttribute("href"); })
  };
  __type("#filter-decision", "deny");
  out.denied = __shown("#findings tbody tr td:first-child");
  return out;
"""


def test_fork_report_writes_the_findings_page(tmp_path: Path) -> None:
    browser.chromium()
    root = tmp_path / "fork"
    shutil.copytree(FIXTURE, root, ignore=shutil.ignore_patterns(".trace", "result*"))
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "fixture")
    key, _, _ = keygen(tmp_path / "keys" / "signer.key")
    out = tmp_path / "findings"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        names = ["pager-last-page", "cparse-other-failure"]
        rc = main(
            ["fork", "--fork", str(root), *names, "-q", "--key", str(key), "--report", str(out)]
        )
    assert rc == 1, buf.getvalue()  # the other-failure candidate is denied
    assert f"findings: {out / 'index.html'}" in buf.getvalue()
    r = browser.run_page(out / "index.html", tmp_path, ACTIONS)
    assert r["errors"] == [] and r["violations"] == [] and r["resources"] == [], r
    assert len(r["rows"]) == 2 and len(r["links"]) == 2
    assert sorted(d.split()[-1] for d in r["decisions"]) == ["allow", "deny"]
    assert len(r["denied"]) == 1 and "other" in r["denied"][0]
    pages = {h: (out / h).read_text() for h in r["links"]}
    pager = next(p for h, p in pages.items() if "pager" in h)
    assert 'data-verified="true"' in pager  # signed with the run's key, checked against it
    other = next(p for h, p in pages.items() if "pager" not in h)
    assert 'data-decision="DENY"' in other and "pre-fix-wrong-failure" in other
    assert 'id="integrity" class="integrity i-amber"' in other  # denied, not tampered
    png = browser.screenshot(out / "index.html", tmp_path / "findings.png", tmp_path, "1280,520")
    if os.environ.get("TRACE_UPDATE_SCREENSHOTS") == "1":
        shutil.copy(png, DOCS / "report-findings.png")
