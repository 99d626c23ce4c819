"""End to end with real nix: urldec's length special case, verified once in the session's
verified fork (the calibration table reads the same verify) and bundled with `trace bundle --key`.
Every claim holds with its PoC and no variant of the PoC crashes it; the fuzzing gate finds an
input of another length that decodes to the buffer's 16 bytes, and the signing policy denies it
with fuzz-found-crash. The bundle carries that input as a reproducer (fuzz/<id>/repro.sh +
data, byte for byte as the gate recorded), a forged input file is caught offline, and the replay
rebuilds the found input's run against the post-fix build (the crash again). The bundle and
replay scaffolding is tests/fuzz_bundle.py's (shared with tests/test_e2e_fuzz_python.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fuzz_bundle import bundle_denied_by_fuzz
from tests.verified import VerifiedFork

pytestmark = pytest.mark.nix

NAME = "urldec-length-special-case"


def decoded_length(line: bytes) -> int:
    hexd = b"0123456789abcdefABCDEF"
    line = line.split(b"\0")[0]
    n = i = 0
    while i < len(line):
        escape = line[i : i + 1] == b"%" and len(line) > i + 2
        if escape and line[i + 1] in hexd and line[i + 2] in hexd:
            i += 2
        n += 1
        i += 1
    return n


def test_the_bundle_holds_the_fuzzer_s_crashing_input_and_the_replay_reruns_it(
    verified_fork: VerifiedFork, tmp_path: Path
) -> None:
    fb = bundle_denied_by_fuzz(verified_fork, tmp_path, NAME)
    assert (fb.found / "repro.sh").read_text().splitlines()[
        -1
    ] == "\"$TARGET/bin/urldec\" 'poc.txt'"
    data = fb.data("poc.txt")
    assert any(len(x) != 16 and decoded_length(x) == 16 for x in data.split(b"\n")), data
    ok, detail = fb.records_agree()
    assert ok, detail

    crash = fb.replayed_run()  # the found input's run was rebuilt, the crash too
    assert crash["sanitizer"]["kind"] == "heap-buffer-overflow"

    (fb.found / "data" / "poc.txt").write_bytes(b"AAAAAAAAAAAAAAAA\n")
    ok, detail = fb.records_agree()
    assert not ok
    assert f"fuzz/{fb.first['id']}/data/poc.txt differs" in detail
