"""The report of a real bundle (test_e2e_bundle's world: the pager fix of the fixture fork, built
with real nix and signed with a real key) in real headless Chromium: the page verifies, shows
the claims the builds decided, the target's own invocations side by side, and the step graph
with the edges the replay record keeps."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from engine.cli import main
from tests import browser
from tests.test_e2e_bundle import World, world  # noqa: F401  (the module's real-build fixture)

pytestmark = pytest.mark.nix
DOCS = Path(__file__).resolve().parent.parent / "docs"

ACTIONS = """
  return {
    banner_visible: __visible("#verdict-decision"),
    decision: document.getElementById("verdict-decision").getAttribute("data-decision"),
    verified: document.getElementById("integrity").getAttribute("data-state"),
    proven: __texts("#proven li"),
    first_screen: [__box(document.getElementById("verdict-decision")).bottom,
      __box(document.getElementById("integrity")).bottom].concat(
      __boxes("#proven li").map(function (b) { return b.bottom; })),
    wide: (function () {
      document.querySelectorAll("details").forEach(function (x) { x.open = true; });
      var w = document.body.clientWidth;
      return Array.prototype.filter.call(document.querySelectorAll("table"), function (t) {
        return t.getBoundingClientRect().right > w + 1; }).length; })(),
    claims: __texts("table.claims tbody tr td:first-child"),
    holds: __texts("table.claims tbody tr td:nth-child(2)"),
    sides: __texts(".side.run h4"),
    invocations: document.querySelectorAll(".side.run .invocation").length,
    nodes: Array.prototype.map.call(document.querySelectorAll("svg.graph g.node"),
      function (g) { return g.getAttribute("data-step") + ":" + g.getAttribute("data-status"); }),
    edges: document.querySelectorAll("svg.graph path.edge").length,
    signature: __texts("#signature-state"),
    grounding: __texts("#upstream-grounding"),
    timing_state: document.getElementById("step-timings").getAttribute("data-state"),
    bars: Array.prototype.map.call(document.querySelectorAll("#step-timings g.tb-row"),
      function (g) { return g.getAttribute("data-step") + ":" + g.getAttribute("data-status")
        + ":" + Math.round(g.querySelector("rect").getBoundingClientRect().width); })
  };
"""


def test_report_of_a_real_signed_bundle(world: World, tmp_path: Path) -> None:  # noqa: F811
    assert world.rc == 0, world.out
    page = tmp_path / "pager.html"
    rc = main(["report", str(world.signed), "--identity", str(world.identity), "-o", str(page)])
    assert rc == 0
    r = browser.run_page(page, tmp_path, ACTIONS)
    assert r["errors"] == [] and r["violations"] == [] and r["resources"] == [], r
    assert r["banner_visible"] and r["decision"] == "ALLOW" and r["verified"] == "verified"
    assert any(p.startswith("✓pre-fix holds") for p in r["proven"]), r["proven"]
    assert max(r["first_screen"]) <= 900 and r["wide"] == 0, r  # 1400x900, nothing too wide
    assert r["claims"][:2] == ["pre-fix-fails-as-expected", "post-fix-survives"]
    assert all("holds" in h for h in r["holds"])
    assert "pre-fix run 1" in r["sides"] and "post-fix run 1" in r["sides"]
    assert r["invocations"] >= 2  # the target's own runs, both sides
    steps = dict(n.split(":", 1) for n in r["nodes"])
    assert {"pre-fix", "post-fix", "pre-fix-run@1", "post-fix-run@1"} <= set(steps)
    assert r["edges"] > 0  # needs recorded in the replay record
    assert "key" in " ".join(r["signature"])
    assert r["grounding"][0].startswith("✓ grounded")  # the advisory's own FIX reference
    # one timing bar per step of the run (issue 31), each drawn
    bars = [b.split(":") for b in r["bars"]]
    assert r["timing_state"] == "intact" and {b[0] for b in bars} == set(steps), r["bars"]
    assert all(int(b[2]) > 0 for b in bars), bars
    out = browser.screenshot(page, tmp_path / "report-real.png", tmp_path, "1400,900")
    if os.environ.get("TRACE_UPDATE_SCREENSHOTS") == "1":
        shutil.copy(out, DOCS / "report-allowed.png")
