"""The model-drafted example of docs/agents.md (once the README's), executed verbatim: its `sh`
block (the loopback fake model server, scout, route, draft with the upstream mirror, decide,
bundle, verify-bundle, findings, then a replayed draft with the server gone) runs with bash -e
from this checkout, the venv's `trace` and `python` first on PATH and TMPDIR in the test's temp
dir. Real Nix builds."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.nix


def readme_block() -> str:
    text = (REPO / "docs" / "agents.md").read_text()
    after = text.split("Against the loopback fake server", 1)[1]
    found = re.search(r"```sh\n(.*?)```", after, re.S)
    assert found, "docs/agents.md has no sh block after the fake server"
    return found.group(1)


def test_the_readme_example_runs_verbatim(tmp_path: Path) -> None:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["TMPDIR"] = str(tmp_path)
    env.pop("FAKE_MODEL_KEY", None)
    proc = subprocess.Popen(
        ["bash", "-e", "-c", readme_block()],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=1500)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, out[-4000:]
    assert "eligible      TRACE-2026-0001 cparse" in out
    first, again = out.split("trace draft TRACE-2026-0001-cparse (cparse): allow")[1:3]
    assert (
        "accuracy vs upstream: model passes, upstream passes; identical post-fix trees; "
        "behaviour: the candidate behaves as the upstream fix" in first
    ), first
    assert "(anthropic, asked): ok" in first and "(openai, asked): ok" in first
    assert re.search(r"review review: approve by \S+ \(cross-family\)", first)
    assert "ALLOW" in out and "asked" not in again and again.count("replayed") == 3
    [workdir] = [p for p in tmp_path.iterdir() if p.is_dir() and (p / "findings").is_dir()]
    assert "identical post-fix trees" in (workdir / "findings" / "index.html").read_text()
