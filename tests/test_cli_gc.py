"""engine/cli `_short_lived_gc`: a trace process of its own freezes what it loaded and collects
at (50,000, 20, 20) (docs/performance.md, "The collector of a short process"); a caller's
`main([...])` (a test, a library user) keeps its collector as it was."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

from engine import cli

# main() without argv ends the process (engine.cli._leave); the atexit handler reports
PROBE = (
    "import atexit, gc, sys; from engine.cli import main; "
    "atexit.register(lambda: print(gc.get_threshold(), gc.get_freeze_count() > 0)); "
    "sys.argv = ['trace', 'gc', '--state-dir', sys.argv[1]]; main()"
)


def test_a_trace_process_tunes_its_collector(tmp_path: Path) -> None:
    absent = str(tmp_path / "no-state")  # `trace gc` of a state dir that does not exist
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, absent],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.stdout.splitlines()[-1] == "(50000, 20, 20) True", proc.stdout


def test_main_called_with_arguments_keeps_the_callers_collector(tmp_path: Path) -> None:
    before = gc.get_threshold(), gc.get_freeze_count()
    assert cli.main(["gc", "--state-dir", str(tmp_path / "no-state")]) == 0
    assert (gc.get_threshold(), gc.get_freeze_count()) == before
