"""The Python line tracer lost at the recursion limit (the sqlparse campaign, CVE-2024-4340).

CPython drops a trace function whose own call fails, and at the recursion limit the tracer's
call is the first to fail: the lines a process runs afterwards, such as the `except
RecursionError` handler the upstream fix adds, are never recorded. The coverage run notes the
loss (`tracer_lost`) and the gate reports the missed lines as unknown (`coverage.tracer-lost`,
not measurable), not as lines the reproducer did not run (`coverage-below-threshold`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from trace_sandbox.gates.coverage import PY_TRACER, tracer_lost
from trace_sandbox.gates.coverage_gate import evaluate as coverage_gate

PATCH = "--- a/m.py\n+++ b/m.py\n@@ -1,0 +2,3 @@\n+    x = 1\n+    y = 2\n+    z = 3\n"
DEEP = """import sys
def f(n):
    return f(n + 1)
sys.setrecursionlimit(80)
try:
    f(0)
except RecursionError:
    handled = True
print("handled")
"""


def _traced(tmp: Path, script: str) -> Path:
    """`script` run in a python3 with the coverage hook installed, its TMPDIR returned."""
    pkg = tmp / "pkg"
    pkg.mkdir()
    (pkg / "main.py").write_text(script)
    hook = f"import os, sys, json\n_PKG = {str(pkg)!r}\n" + PY_TRACER.format()
    run = f"exec({hook!r}); exec(compile(open({str(pkg / 'main.py')!r}).read(), "
    run += f"{str(pkg / 'main.py')!r}, 'exec'))"
    done = subprocess.run(
        [sys.executable, "-c", run], env={"TMPDIR": str(tmp)}, capture_output=True, text=True
    )
    assert done.returncode == 0 and done.stdout == "handled\n", done.stderr
    return tmp


def test_a_run_that_hits_the_recursion_limit_loses_the_tracer(tmp_path: Path) -> None:
    tmp = _traced(tmp_path, DEEP)
    assert tracer_lost(str(tmp))
    dump = json.loads(next((tmp / "trace-coverage").glob("py-*.json")).read_text())
    assert not {8, 9} & set(dump["main.py"])  # the handler and print ran, unrecorded


def test_a_run_within_the_limit_keeps_it(tmp_path: Path) -> None:
    tmp = _traced(tmp_path, DEEP.replace("f(0)", "f.__name__"))
    assert not tracer_lost(str(tmp))
    dump = json.loads(next((tmp / "trace-coverage").glob("py-*.json")).read_text())
    assert 9 in dump["main.py"]


def _gate(tmp: Path, executed: list[int], lost: bool) -> dict[str, Any]:
    patch = tmp / "fix.patch"
    patch.write_text(PATCH)
    cov = tmp / "coverage.json"
    files = {"m.py": {"executable": [2, 3, 4], "executed": executed}}
    body = {"schema": "trace.coverage/v1", "build": "ok", "tools": ["python-settrace"]}
    cov.write_text(json.dumps(body | {"files": files, "tracer_lost": lost}))
    pol = {"name": "trace-signing", "version": "1.6.0", "thresholds": {"min_score": 0.8}}
    return coverage_gate({"patches": [str(patch)], "policy": pol, "coverage": str(cov)})


def test_lines_missed_after_the_tracer_was_lost_are_unknown_not_unrun(tmp_path: Path) -> None:
    lost = _gate(tmp_path, [2], lost=True)
    assert (lost["passed"], lost["measurable"], lost["score"]) == (False, False, None)
    assert lost["reasons"] == ["coverage-not-measurable"]
    assert lost["details"]["rules"] == ["coverage.tracer-lost"]
    kept = _gate(tmp_path, [2], lost=False)
    assert (kept["score"], kept["reasons"]) == (0.333333, ["coverage-below-threshold"])


def test_a_lost_tracer_does_not_blur_lines_it_saw(tmp_path: Path) -> None:
    """Every changed line recorded before the loss: the share is measured, and passes."""
    rec = _gate(tmp_path, [2, 3, 4], lost=True)
    assert (rec["passed"], rec["score"], rec["reasons"]) == (True, 1.0, [])
