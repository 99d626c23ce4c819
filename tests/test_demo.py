"""The README's main job (scripts/demo) runs as written: a signed, verified, replayed bundle for the
real fix, and a policy deny for the wrong one."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.nix


def test_scripts_demo_runs_the_main_job(tmp_path: Path) -> None:
    proc = subprocess.run(
        [str(REPO / "scripts" / "demo")],
        capture_output=True,
        text=True,
        env={"TMPDIR": str(tmp_path), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        timeout=900,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "bundle verified" in out
    assert re.search(r"cparse-key-overflow \(\d+ payload files, signed \(key\)\)", out)
    assert "signing policy: DENY" in out and "mutation-score-below-threshold" in out
    (work,) = tmp_path.glob("trace-demo.*")
    assert (work / "cparse-key-overflow" / "statement.sigstore.json").is_file()
    assert not (work / "cparse-wrong-fix" / "statement.sigstore.json").exists()
    # the reviewer's pages, their paths printed last
    page = (work / "cparse-key-overflow.html").read_text()
    assert 'data-verified="true"' in page and "AddressSanitizer" in page
    assert 'data-decision="ALLOW"' in page and 'data-patched="true"' in page  # the fix's frame
    findings = (work / "findings" / "index.html").read_text()
    assert findings.count('class="finding"') == 2 and "mutation-score-below-threshold" in findings
    wrong = (work / "findings" / "TRACE-2026-0001-cparse-wrong-fix.html").read_text()
    assert 'data-verified="false"' in wrong and wrong.count('class="survivor"') >= 1
    assert 'data-state="amber"' in wrong and 'data-reason="mutation-score-below-threshold"' in wrong
    if os.environ.get("TRACE_UPDATE_SCREENSHOTS") == "1":  # the docs' first screens (1400x900)
        from tests import browser

        for page, shot in (
            (work / "findings" / "TRACE-2026-0001-cparse-wrong-fix.html", "report-denied.png"),
            (work / "cparse-key-overflow.html", "report-allowed.png"),
        ):
            browser.screenshot(page, REPO / "docs" / shot, tmp_path, "1400,900")
    assert proc.stdout.rstrip().endswith(f"findings page: {work}/findings/index.html")
