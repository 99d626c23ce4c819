"""Per-step timings (issue 31's timing bar per step): recorded beside the payload in timings.json,
vouched for by the statement's byproducts, never part of the signed claim or of the replay, and
drawn as inline SVG bars on the report.

Bundles are made by test_bundle_verify's helpers (real records and decisions, signed with a real
key) with a timings document passed to the real `assemble`. The builder's end-to-end use (a
real `trace verify --bundle` writing timings.json, and `--replay` agreeing) is in
test_e2e_bundle and test_report_e2e."""

from __future__ import annotations

import functools
import hashlib
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

import tests.test_bundle_verify as tbv
from engine.audit.checks import verify_bundle
from engine.audit.identity import load_identity_policy
from engine.audit.timings import CHECK_NAME
from engine.evidence.bundle import assemble
from engine.evidence.timings import BYPRODUCT, TIMINGS_FILE, step_timings
from engine.otel import StepClock
from engine.report.timings import MIN_BAR, WIDTH, Bar, bars_of, timing_svg
from engine.run import RunResult, StepResult
from tests import browser
from tests.test_report import HOSTILE, records, report, signed

S = 1_000_000_000  # ns


def timings_doc(name: str = "post-fix-run@1") -> dict[str, Any]:
    return {
        "schema": "trace.step-timings/v1",
        "run_seconds": 9.0,
        "steps": [
            {"step": "pre-fix", "status": "cached", "builder": "local", "start": 0.1, "end": 0.1},
            {"step": "post-fix", "status": "built", "builder": "local", "start": 0.5, "end": 6.0},
            {"step": name, "status": "built", "builder": "local", "start": 6.0, "end": 8.5},
            {"step": "broken", "status": "failed", "builder": "local", "start": 1.0, "end": 2.0},
        ],
    }


# -- the record: from the run's clock ---------------------------------------------------------


def _clock(seen: dict[str, dict[str, int]]) -> StepClock:
    clock = StepClock(began=100 * S)
    clock.seen = {sid: {k: 100 * S + v for k, v in states.items()} for sid, states in seen.items()}
    return clock


def test_step_timings_bound_a_built_step_by_its_first_dependent_start() -> None:
    steps = {
        "a": StepResult(id="a", key="k", status="cached", built_on="local"),
        "b": StepResult(id="b", key="k", status="built", built_on="local"),
        "c": StepResult(id="c", key="k", status="built", built_on="ssh://builder"),
        "d": StepResult(id="d", key="k", status="failed"),
        "e": StepResult(id="e", key="k", status="reused"),
        "f": StepResult(id="f", key="k", status="built", out="/nix/store/f"),
        "g": StepResult(id="g", key="k", status="built", out="/nix/store/g"),
    }
    clock = _clock(
        {
            "a": {"cached": S // 10},
            "b": {"queued": S, "building": 2 * S, "built": 9 * S, "checked": 10 * S},
            "c": {"queued": S, "building": 5 * S, "built": 9 * S},
            "d": {"queued": S, "building": 2 * S, "failed": 3 * S},
            "e": {"queued": S, "reused": 9 * S},
            "f": {"queued": S, "building": 2 * S, "built": 9 * S},
            "g": {"queued": S, "building": 2 * S, "built": 9 * S},
        }
    )
    needs = {"a": [], "b": ["a"], "c": ["b"], "d": ["a"], "e": [], "f": [], "g": []}
    # f's output was registered in the store at 103 s (whole seconds): it ended by 104 s, long
    # before its result was read at 109 s; g's registration is no tighter than the read
    registered = {"/nix/store/f": 103, "/nix/store/g": 109}
    run = RunResult(graph="g", steps=steps)
    doc = step_timings(run, clock, needs, 111 * S, registered)
    by = {s["step"]: s for s in doc["steps"]}
    assert doc["schema"] == "trace.step-timings/v1" and doc["run_seconds"] == 11.0
    assert (by["a"]["start"], by["a"]["end"], by["a"]["ends"]) == (0.1, 0.1, "instant")
    assert by["a"]["cached"] is True and by["b"]["cached"] is False
    # b's end: c (which needs it) started building at 5 s, before b's result was read at 9 s
    assert (by["b"]["start"], by["b"]["end"], by["b"]["ends"]) == (2.0, 5.0, "bound")
    assert (by["c"]["start"], by["c"]["end"], by["c"]["builder"]) == (5.0, 9.0, "ssh://builder")
    assert (by["d"]["start"], by["d"]["end"], by["d"]["ends"]) == (2.0, 3.0, "failed")
    assert (by["e"]["start"], by["e"]["end"], by["e"]["ends"]) == (9.0, 9.0, "instant")
    assert (by["f"]["start"], by["f"]["end"], by["f"]["ends"]) == (2.0, 4.0, "registered")
    assert (by["g"]["end"], by["g"]["ends"]) == (9.0, "bound")
    assert [s["step"] for s in doc["steps"]] == ["a", "b", "d", "f", "g", "c", "e"]  # by start


# -- the SVG builder --------------------------------------------------------------------------


def _svg(bars: list[Bar], run: float | None = None) -> ET.Element:
    return ET.fromstring(str(timing_svg(bars, run)))  # well-formed XML, or this raises


def _rects(root: ET.Element) -> list[ET.Element]:
    return root.findall(".//{http://www.w3.org/2000/svg}rect") or root.findall(".//rect")


def test_svg_escapes_hostile_step_names() -> None:
    evil = HOSTILE + '" onload="alert(1)'
    bars, dropped = bars_of(timings_doc(evil))
    svg = str(timing_svg(bars))
    assert dropped == 0 and "<script" not in svg and "<img" not in svg
    assert 'onload="alert' not in svg and "&lt;script&gt;" in svg
    root = _svg(bars)
    rows = [g for g in root.iter() if g.get("class", "").startswith("tb-row")]
    assert [g.get("data-step") for g in rows][-1] == evil  # the attribute holds the text, inert
    assert not any(k.startswith("on") for el in root.iter() for k in el.attrib)
    assert root.find(".//script") is None and "style" not in svg


def test_svg_draws_zero_and_huge_durations_inside_the_picture() -> None:
    bars = [
        Bar("zero", "built", "", 0.0, 0.0),
        Bar("cached", "cached", "", 1.0, 1.0),
        Bar("huge", "built", "", 2.0, 1e12),
    ]
    rects = _rects(_svg(bars))
    widths = [float(r.get("width", "0")) for r in rects]
    xs = [float(r.get("x", "0")) for r in rects]
    assert widths[0] == MIN_BAR and widths[1] == MIN_BAR  # still a visible mark
    assert all(x + w <= WIDTH for x, w in zip(xs, widths, strict=True))
    assert "1e+12 s" in str(timing_svg(bars))


def test_unreadable_entries_are_dropped_and_counted_and_bars_sorted_by_start() -> None:
    doc = {
        "steps": [
            {"step": "late", "status": "built", "start": 5, "end": 6},
            {"step": "nan", "status": "built", "start": float("nan"), "end": 1},
            {"step": "inf", "status": "built", "start": 0, "end": float("inf")},
            {"step": "neg", "status": "built", "start": -1, "end": 1},
            {"step": "text", "status": "built", "start": "0", "end": 1},
            {"step": "bool", "status": "built", "start": True, "end": 1},
            "not a step",
            {"step": "early", "status": "built", "start": 1, "end": 0.5},  # end before start
        ]
    }
    bars, dropped = bars_of(doc)
    assert dropped == 6 and [b.step for b in bars] == ["early", "late"]
    assert bars[0].end == bars[0].start  # clamped, never a negative width
    assert bars_of({"steps": "nope"}) == ([], 0) and bars_of(None) == ([], 0)


# -- the bundle: timings.json beside the payload, vouched for, informational -----------------


@pytest.fixture
def timed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A signed allowed bundle whose run recorded timings (a hostile step name among them)."""
    monkeypatch.setattr(tbv, "assemble", functools.partial(assemble, timings=timings_doc(HOSTILE)))
    return signed(tmp_path, records(monkeypatch))


def _verdict(bundle: Path, identity: Path) -> tuple[bool, list[str], str]:
    v = verify_bundle(bundle, load_identity_policy(identity))
    detail = next(c.detail for c in v.checks if c.name == CHECK_NAME)
    return v.passed, v.reasons, detail


def test_timings_sit_beside_the_payload_and_the_statement_vouches_for_them(
    timed: tuple[Path, Path],
) -> None:
    bundle, identity = timed
    data = (bundle / TIMINGS_FILE).read_bytes()
    assert not (bundle / "payload" / TIMINGS_FILE).exists()  # never a payload file
    statement = json.loads((bundle / "statement.json").read_bytes())
    assert TIMINGS_FILE not in {s["name"] for s in statement["subject"]}
    (product,) = [
        p for p in statement["predicate"]["runDetails"]["byproducts"] if p["name"] == BYPRODUCT
    ]
    assert product["digest"]["sha256"] == hashlib.sha256(data).hexdigest()
    passed, reasons, detail = _verdict(bundle, identity)
    assert passed and reasons == [] and detail.startswith("intact:"), (reasons, detail)


def test_a_changed_timings_file_is_flagged_but_the_verdict_stays(
    timed: tuple[Path, Path], tmp_path: Path
) -> None:
    bundle, identity = timed
    rc, before, _ = report(bundle, identity, tmp_path / "before.html")
    doc = json.loads((bundle / TIMINGS_FILE).read_bytes())
    doc["steps"][1]["end"] = 0.2  # a faster build than the run saw
    (bundle / TIMINGS_FILE).write_text(json.dumps(doc))
    passed, reasons, detail = _verdict(bundle, identity)
    assert passed and reasons == [] and detail.startswith("changed:"), (reasons, detail)
    rc2, after, _ = report(bundle, identity, tmp_path / "after.html")
    assert rc == rc2 == 0
    integrity = 'data-state="verified" data-verified="true"'
    assert integrity in before and integrity in after
    assert 'id="step-timings" data-state="intact" data-bars="4"' in before
    assert 'id="step-timings" data-state="changed" data-bars="0"' in after
    assert "tb-row" not in after and "differs from the sha256 the statement names" in after


def test_an_unvouched_or_odd_timings_file_never_fails_the_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle, identity = signed(tmp_path, records(monkeypatch))  # made without timings
    assert _verdict(bundle, identity)[2].startswith("none:")
    (bundle / TIMINGS_FILE).write_text(json.dumps(timings_doc()))  # dropped in afterwards
    passed, reasons, detail = _verdict(bundle, identity)
    assert passed and detail.startswith("unvouched:"), (reasons, detail)
    _, page, _ = report(bundle, identity, tmp_path / "p.html")
    assert 'data-state="unvouched" data-bars="0"' in page and "tb-row" not in page
    (bundle / TIMINGS_FILE).unlink()
    (bundle / TIMINGS_FILE).symlink_to("/etc/passwd")
    passed, _, detail = _verdict(bundle, identity)
    assert passed and detail.startswith("unvouched:")
    (bundle / "other.json").write_text("{}")  # anything else beside the statement still fails
    v = verify_bundle(bundle, load_identity_policy(identity))
    assert not v.passed and "bundle.extra-file" in v.reasons


def test_a_missing_or_replaced_vouched_timings_file(timed: tuple[Path, Path]) -> None:
    bundle, identity = timed
    (bundle / TIMINGS_FILE).unlink()
    passed, _, detail = _verdict(bundle, identity)
    assert passed and detail.startswith("missing:")
    (bundle / TIMINGS_FILE).mkdir()  # not a regular file: not the one the run wrote
    passed, _, detail = _verdict(bundle, identity)
    assert passed and detail.startswith("changed:")


# -- the page in real headless Chromium --------------------------------------------------------

BARS = """
  var rows = document.querySelectorAll("#step-timings svg.timing-steps g.tb-row");
  return {
    state: document.getElementById("step-timings").getAttribute("data-state"),
    rows: Array.prototype.map.call(rows, function (g) {
      var r = g.querySelector("rect").getBoundingClientRect();
      return {step: g.getAttribute("data-step"), kind: g.getAttribute("class"),
        colour: getComputedStyle(g.querySelector("rect")).fill, width: r.width, left: r.left};
    }),
    names: __texts("#step-timings text.tb-name"),
    note: __texts("#step-timings .tb-note"),
    title: document.title
  };
"""


def test_the_report_draws_one_bar_per_step_in_chromium(timed: tuple[Path, Path]) -> None:
    browser.chromium()
    bundle, identity = timed
    page = bundle.parent / "timed.html"
    assert report(bundle, identity, page)[0] == 0
    r = browser.run_page(page, bundle.parent, BARS)
    assert r["errors"] == [] and r["violations"] == [] and r["resources"] == [], r
    assert r["state"] == "intact" and "pwned" not in r["title"]
    steps = [row["step"] for row in r["rows"]]
    assert steps == ["pre-fix", "post-fix", "broken", HOSTILE], steps  # by start
    assert all(row["width"] > 0 for row in r["rows"]), r["rows"]
    colours = {row["kind"].split()[-1]: row["colour"] for row in r["rows"]}
    assert len({colours["tb-built"], colours["tb-cached"], colours["tb-failed"]}) == 3, colours
    # the built bars: post-fix (0.5 s to 6 s) is drawn longer than the 2.5 s last step
    widths = {row["step"]: row["width"] for row in r["rows"]}
    assert widths["post-fix"] > 2 * widths[HOSTILE] > 0
    assert any(n.startswith("<script>") for n in r["names"])  # shown as text
    assert "not part of the signed claim" in " ".join(r["note"])
