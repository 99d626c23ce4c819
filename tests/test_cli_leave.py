"""engine/cli `_leave`: a trace process of its own ends without the interpreter's teardown
(os._exit), yet what a normal exit does for the outside still happens: the exit code, every
line written to stdout and stderr (pipes and files), the atexit handlers; with another
non-daemon thread running it exits normally, after that thread."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# A trace process of its own (main() without argv), with an atexit handler.
PROBE = """
import atexit, sys, threading, time
from engine.cli import main

atexit.register(lambda: print("atexit ran"))
if sys.argv[2] == "thread":
    def late():
        time.sleep(0.3)
        print("thread finished")
    threading.Thread(target=late).start()
ok = sys.argv[3] == "ok"
sys.argv = ["trace", "gc", "--state-dir", sys.argv[1]] if ok else ["trace", "run", sys.argv[1]]
main()
print("main returned")  # only when the process did not end in main()
"""


def _probe(tmp_path: Path, thread: str, command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path / "absent"), thread, command],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )


def test_a_trace_process_skips_the_teardown_but_not_what_the_outside_sees(tmp_path: Path) -> None:
    proc = _probe(tmp_path, "no-thread", "ok")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert "atexit ran" in out
    assert "main returned" not in out  # ended in main(): os._exit after the handlers


def test_the_exit_code_and_the_error_reach_the_caller(tmp_path: Path) -> None:
    proc = _probe(tmp_path, "no-thread", "bad")  # `trace run` of a file that does not exist
    assert proc.returncode == 2
    assert "trace: error:" in proc.stderr
    assert "atexit ran" in proc.stdout.splitlines()


def test_output_to_a_file_is_all_there(tmp_path: Path) -> None:
    """stdout a file (block-buffered, not a tty or pipe): the schema, less than one buffer, is
    written only by the flush before os._exit."""
    out = tmp_path / "schema.json"
    with out.open("w") as fh:
        subprocess.run(
            [sys.executable, "-m", "engine.cli", "schema"], stdout=fh, check=True, timeout=120
        )
    text = out.read_text()
    assert json.loads(text)["title"] == "PipelineFile"


def test_with_another_thread_running_the_exit_is_the_normal_one(tmp_path: Path) -> None:
    proc = _probe(tmp_path, "thread", "ok")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    assert "thread finished" in out  # waited for
    assert "atexit ran" in out
    assert "main returned" in out  # main() returned the code for the normal exit
