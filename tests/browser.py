"""Real headless Chromium (Debian's `chromium`) for the page tests, without a driver library.

`run_page` copies a page, puts a small harness script at the very top of its <head> (before the
page's own Content Security Policy, so the harness itself is not governed by it), and has
Chromium load it from file:// with `--dump-dom`. The harness records every script error,
console.error, CSP violation and loaded resource, runs the test's actions after `load` (clicks,
typing into a filter), and writes what it saw as JSON into the DOM, which --dump-dom returns.
`screenshot` takes a PNG of a page as a reviewer's browser draws it.

Skips only when chromium is absent and CI is not set; under CI it fails (scripts/setup installs
chromium).
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

DEADLINE = 120.0
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-extensions",
    "--hide-scrollbars",
    "--mute-audio",
]
RESULT = re.compile(r'<pre id="harness-result">(.*?)</pre>', re.DOTALL)

HARNESS = """<script id="harness">
"use strict";
window.__h = {errors: [], console: [], violations: []};
window.addEventListener("error", function (e) { __h.errors.push(String(e.message)); });
document.addEventListener("securitypolicyviolation", function (e) {
  __h.violations.push(e.violatedDirective + " " + e.blockedURI);
});
(function () {
  var orig = console.error;
  console.error = function () {
    __h.console.push(Array.prototype.join.call(arguments, " "));
    return orig.apply(console, arguments);
  };
})();
function __visible(sel) {
  var el = document.querySelector(sel);
  if (!el) return false;
  var s = getComputedStyle(el), r = el.getBoundingClientRect();
  return s.display !== "none" && s.visibility !== "hidden" && r.width > 0 && r.height > 0;
}
function __texts(sel) {
  return Array.prototype.map.call(document.querySelectorAll(sel), function (e) {
    return e.textContent.trim();
  });
}
function __shown(sel) {
  return Array.prototype.filter.call(document.querySelectorAll(sel), function (e) {
    return e.offsetParent !== null;
  }).map(function (e) { return e.textContent.trim(); });
}
function __box(el) {
  // layout position from the top of the page (the body is the page's scroller on screen)
  var r = el.getBoundingClientRect(), y = window.scrollY + document.body.scrollTop;
  return {top: r.top + y, bottom: r.bottom + y, left: r.left, right: r.right};
}
function __boxes(sel) {
  return Array.prototype.map.call(document.querySelectorAll(sel), function (e) {
    var b = __box(e); b.text = e.textContent.trim(); return b;
  });
}
function __type(sel, value) {
  var el = document.querySelector(sel);
  el.value = value;
  el.dispatchEvent(new Event("input", {bubbles: true}));
  el.dispatchEvent(new Event("change", {bubbles: true}));
}
window.addEventListener("load", function () {
  var out = {};
  try { out = (function () { %(actions)s })() || {}; }
  catch (e) { __h.errors.push("harness: " + e.message); }
  out.errors = __h.errors; out.console = __h.console; out.violations = __h.violations;
  out.resources = performance.getEntriesByType("resource").map(function (r) { return r.name; });
  out.scripts = document.scripts.length;
  var pre = document.createElement("pre");
  pre.id = "harness-result";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def chromium() -> str:
    """The chromium binary, or skip (only outside CI) with the reason."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    if os.environ.get("CI"):
        pytest.fail("chromium is not installed, and CI is set: run scripts/setup")
    pytest.skip("chromium is not installed (scripts/setup installs Debian's chromium)")


def _run(args: list[str], tmp: Path) -> subprocess.CompletedProcess[str]:
    profile = tmp / f"profile-{len(list(tmp.glob('profile-*')))}"
    return subprocess.run(
        [chromium(), *FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def run_page(
    page: Path,
    tmp: Path,
    actions: str = "return {};",
    size: str = "1400,900",
    fragment: str = "",
    shot: Path | None = None,
) -> dict[str, Any]:
    """Load `page` (at `#fragment` when given) in a `size` window in Chromium with the harness;
    `actions`: a JS function body returning an object (it may use __visible, __texts, __shown,
    __type, __box, __boxes). Returns that object plus errors, console, violations, resources,
    scripts. With `shot`, the same Chromium run also saves a PNG of the window there (after the
    actions ran: one browser start instead of two, issue 30)."""
    text = page.read_text(encoding="utf-8")
    head = text.index("<head>") + len("<head>")
    probe = tmp / f"probe-{page.name}"
    probe.write_text(text[:head] + HARNESS.replace("%(actions)s", actions) + text[head:])
    uri = probe.as_uri() + (f"#{fragment}" if fragment else "")
    args = [f"--window-size={size}", "--virtual-time-budget=5000", "--dump-dom", uri]
    if shot is not None:
        args.insert(0, f"--screenshot={shot}")
    proc = _run(args, tmp)
    m = RESULT.search(proc.stdout)
    assert m, f"no harness result from chromium (rc {proc.returncode}): {proc.stderr[-2000:]}"
    if shot is not None:
        assert shot.is_file() and shot.stat().st_size > 1000, proc.stderr[-2000:]
    result: dict[str, Any] = json.loads(html.unescape(m.group(1)))
    return result


def screenshot(
    page: Path, out: Path, tmp: Path, size: str = "1280,2400", fragment: str = ""
) -> Path:
    uri = page.as_uri() + (f"#{fragment}" if fragment else "")
    proc = _run([f"--window-size={size}", f"--screenshot={out}", uri], tmp)
    assert out.is_file() and out.stat().st_size > 1000, proc.stderr[-2000:]
    return out


def drawn(png: Path) -> int:
    """How many distinct byte values the PNG's image data holds: a blank page draws a handful
    (white rows and filter bytes), a drawn one hundreds. Stdlib only: no imaging library."""
    import struct
    import zlib

    data, pos, idat = png.read_bytes(), 8, b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        if data[pos + 4 : pos + 8] == b"IDAT":
            idat += data[pos + 8 : pos + 8 + length]
        pos += 12 + length
    return len(set(zlib.decompress(idat)))


def print_pdf(page: Path, out: Path, tmp: Path) -> int:
    """Print `page` as Chromium prints it (print CSS applied); returns the PDF's page count."""
    proc = _run(["--no-pdf-header-footer", f"--print-to-pdf={out}", page.as_uri()], tmp)
    assert out.is_file(), proc.stderr[-2000:]
    data = out.read_bytes()
    assert data.startswith(b"%PDF")
    return len(re.findall(rb"/Type\s*/Page[^s]", data))
