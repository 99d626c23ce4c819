"""End to end with real nix, a Python target (issue 26): lineesc's wrong fix, verified once in
the session's verified fork (the calibration table reads the same verify) and bundled with `trace
bundle --key`. Every claim holds with its PoC and no variant crashes it; the fuzzing gate,
tracing bin/unescape in-process, finds an escape cut off by a line's end, the harness confirms
it on both builds (IndexError), and the signing policy denies with fuzz-found-crash. The bundle
carries the found input as a reproducer and the replay rebuilds its run (the traceback again).
The bundle and replay scaffolding is tests/fuzz_bundle.py's (shared with tests/test_e2e_fuzz.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fuzz_bundle import bundle_denied_by_fuzz
from tests.verified import VerifiedFork

pytestmark = pytest.mark.nix

NAME = "lineesc-trailing-backslash"


def cut_off(line: bytes) -> bool:
    """The line ends inside a \\x or \\u escape (fewer hex digits left than it needs)."""
    for k in range(len(line) - 1):
        if line[k : k + 1] == b"\\" and line[k + 1 : k + 2] in (b"x", b"u"):
            need = 2 if line[k + 1 : k + 2] == b"x" else 4
            if len(line) - (k + 2) < need:
                return True
    return False


def test_the_bundle_holds_the_python_fuzzer_s_input_and_the_replay_reruns_it(
    verified_fork: VerifiedFork, tmp_path: Path
) -> None:
    fb = bundle_denied_by_fuzz(verified_fork, tmp_path, NAME)
    assert fb.gate["details"]["fuzz"]["runner"] == "in-process", fb.gate["details"]["fuzz"]
    assert fb.first["post_crash"] == ["Python: IndexError"]
    assert "\"$TARGET/bin/unescape\" 'good.txt'" in (fb.found / "repro.sh").read_text()
    name = "good.txt" if "good.txt:" in fb.first["description"] else "poc.txt"
    data = fb.data(name)
    assert any(cut_off(x) for x in data.split(b"\n")), data
    ok, detail = fb.records_agree()
    assert ok, detail

    run = fb.replayed_run()  # the found input's run was rebuilt, the traceback too
    invs = run["invocations"]
    assert any(i["exit_code"] == 1 and "IndexError" in i["stderr"] for i in invs), invs
