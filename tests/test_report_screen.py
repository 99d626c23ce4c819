"""The first screen of a report in real headless Chromium at 1400x900 (issue 31): the decision and
every deny reason lie within the first 900 px of layout (measured by a probe the harness writes
into the test's copy of the page only), the integrity line's three states are drawn in three
distinct colours, no table is wider than the page, `page.html#anchor` draws the anchor, and the
findings page links each row to its report and shows the same three integrity states.

Fixtures (tests/test_report_verdict): allowed (an ASan fix whose record holds a full stack),
denied (a wrong fix a surviving mutant shows), tampered (the allowed bundle with its patch
changed after signing), unsigned (the allowed one without its signature).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine.cli import main
from engine.evidence import PAYLOAD_DIR, SIGNATURE_FILE
from tests import browser
from tests.test_report import (
    denied_page,
    hostile_page,
    records,
    report,
    signed,
    wrong_fix_gates,
)
from tests.test_report_verdict import asan_page, asan_records, unsigned_page

SCREEN = 900
Page = Callable[[Path, pytest.MonkeyPatch], tuple[int, str, Path]]


@pytest.fixture(autouse=True)
def _browser() -> None:
    browser.chromium()  # skip (outside CI only) before building anything


def tampered(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, Path]:
    bundle, identity = signed(tmp, asan_records(monkeypatch))
    patch = bundle / PAYLOAD_DIR / "patches" / "01-fix.patch"
    patch.write_text(patch.read_text().replace("return -1", "return 0"))
    return report(bundle, identity, tmp / "tampered.html")[0], "", tmp / "tampered.html"


FIRST_SCREEN = """
  var d = document.getElementById("verdict-decision"), i = document.getElementById("integrity");
  document.querySelectorAll("details").forEach(function (x) { x.open = true; });
  var width = document.body.clientWidth;
  return {
    decision: d.getAttribute("data-decision"), decision_box: __box(d),
    reasons: __boxes("#verdict-reasons tr[data-reason]"),
    codes: Array.prototype.map.call(document.querySelectorAll("#verdict-reasons tr[data-reason]"),
      function (r) { return r.getAttribute("data-reason"); }),
    integrity: i.getAttribute("data-state"), integrity_box: __box(i),
    integrity_colour: getComputedStyle(i).backgroundColor,
    proven: __boxes("#proven li"), stack: __box(document.getElementById("claim-stack")),
    wide: Array.prototype.filter.call(document.querySelectorAll("table"), function (t) {
      return t.getBoundingClientRect().right > width + 1; }).map(function (t) {
      return t.className + " " + Math.round(t.getBoundingClientRect().right); }),
    page_wider: document.body.scrollWidth > width + 1
  };
"""

CASES: dict[str, tuple[Page, str, str, list[str]]] = {
    "allowed": (asan_page, "ALLOW", "verified", []),
    "denied": (denied_page, "REVIEW", "amber", ["mutation-score-below-threshold"]),
    "tampered": (tampered, "UNTRUSTED", "red", []),
    "unsigned": (unsigned_page, "ALLOW", "amber", []),
    "hostile": (hostile_page, "ALLOW", "verified", []),  # markup in every field: still text
}


@pytest.fixture(scope="module")
def screens() -> dict[str, dict[str, Any]]:
    """What each case's first screen measured, kept for the module: a page is built and drawn
    in Chromium once, whichever test reads it first (issue 30: the suite's time)."""
    return {}


def first_screen(
    name: str, tmp: Path, monkeypatch: pytest.MonkeyPatch, seen: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    if name in seen:
        return seen[name]
    make = CASES[name][0]
    _, _, page = make(tmp, monkeypatch)
    r = browser.run_page(page, tmp, FIRST_SCREEN, size="1400,900", shot=tmp / f"{name}.png")
    assert r["errors"] == [] and r["violations"] == [] and r["resources"] == [], r
    seen[name] = r
    return r


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_first_screen_shows_the_decision_and_its_reasons(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, screens: dict[str, dict[str, Any]]
) -> None:
    _, decision, state, codes = CASES[name]
    r = first_screen(name, tmp_path, monkeypatch, screens)
    assert r["decision"] == decision and r["integrity"] == state
    assert r["codes"] == codes
    assert r["decision_box"]["bottom"] <= SCREEN, r["decision_box"]
    assert all(row["bottom"] <= SCREEN for row in r["reasons"]), r["reasons"]
    assert r["integrity_box"]["bottom"] <= SCREEN
    # what was proven: the pre-fix and post-fix sentences and every gate's, on the first screen
    assert r["proven"] and all(p["bottom"] <= SCREEN for p in r["proven"]), r["proven"]
    assert r["stack"]["bottom"] <= SCREEN
    assert r["wide"] == [] and not r["page_wider"], r["wide"]


def test_the_three_integrity_states_are_drawn_distinctly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, screens: dict[str, dict[str, Any]]
) -> None:
    colours = {}
    for name in ("allowed", "denied", "tampered", "unsigned"):
        r = first_screen(name, tmp_path / name, monkeypatch, screens)
        colours[name] = (r["integrity"], r["integrity_colour"])
        monkeypatch.undo()
    assert colours["denied"] == colours["unsigned"]  # one meaning: intact, not vouched for
    assert len({colours[n] for n in ("allowed", "denied", "tampered")}) == 3, colours
    assert len({c for _, c in colours.values()}) == 3, colours


def test_an_anchor_draws_its_section(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, page = asan_page(tmp_path, monkeypatch)
    r = browser.run_page(
        page,
        tmp_path,
        'return {top: document.getElementById("gates").getBoundingClientRect().top};',
        fragment="gates",
        shot=tmp_path / "anchor.png",
    )
    assert 0 <= r["top"] <= 40, r  # scrolled to the anchor
    assert browser.drawn(tmp_path / "anchor.png") > 50  # not blank


FINDINGS = """
  var rows = document.querySelectorAll("#findings tbody tr");
  return {
    rows: Array.prototype.map.call(rows, function (tr) {
      var s = tr.querySelector(".integrity");
      return {
        candidate: tr.querySelector("td a").getAttribute("href"),
        report: tr.querySelector("a.report-link").getAttribute("href"),
        state: s.getAttribute("data-state"), colour: getComputedStyle(s).backgroundColor
      };
    })
  };
"""


def test_findings_rows_link_their_reports_in_three_integrity_states(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    allowed, identity = signed(tmp_path / "a", asan_records(monkeypatch))
    denied, _ = signed(tmp_path / "d", records(monkeypatch, wrong_fix_gates))
    broken = tmp_path / "t" / "bundle"
    shutil.copytree(allowed, broken)
    (broken / PAYLOAD_DIR / "advisory.json").write_text("{}")
    unsigned = tmp_path / "u" / "bundle"
    shutil.copytree(allowed, unsigned)
    (unsigned / SIGNATURE_FILE).unlink()
    out = tmp_path / "findings"
    keys = ["--key", str(tmp_path / "d" / "keys" / "k.pub")]
    bundles = [str(b) for b in (allowed, denied, broken, unsigned)]
    assert (
        main(["report", "--findings", str(out), *bundles, "--identity", str(identity), *keys]) == 1
    )
    r = browser.run_page(out / "index.html", tmp_path, FINDINGS)
    assert r["errors"] == [] and r["violations"] == [] and r["resources"] == [], r
    rows = r["rows"]
    assert len(rows) == 4
    assert all(
        row["candidate"] == row["report"] and (out / row["report"]).is_file() for row in rows
    )
    states = sorted(row["state"] for row in rows)
    assert states == ["amber", "amber", "red", "verified"], rows
    colour = {row["state"]: row["colour"] for row in rows}
    assert len(set(colour.values())) == 3, rows
    for row in rows:  # the report a row links to shows the row's state
        assert f'data-state="{row["state"]}"' in (out / row["report"]).read_text()
    browser.screenshot(out / "index.html", tmp_path / "findings.png", tmp_path, "1400,600")
