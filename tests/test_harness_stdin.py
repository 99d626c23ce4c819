"""The harness records what each target got on stdin (a file or a pipe, whole, up to 64 KiB):
the PoC's input for the variants gate. The target still gets its input unchanged, a target that
never reads its stdin records the same bytes (no timing in the record), and an endless producer
is cut off at the cap without holding the run. The harness runs outside the sandbox against the
tiny fake package of test_verify_gate."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from engine.build_records import RunRecord
from tests.test_verify_gate import run_harness
from trace_sandbox.gates.variant_gate import poc_invocations


def stdin_of(record: dict[str, Any]) -> list[Any]:
    RunRecord.model_validate(record)  # the engine's model takes the new field
    return [i["stdin"] for i in record["invocations"]]


def whole(data: bytes) -> dict[str, Any]:
    import hashlib

    return {
        "complete": True,
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "b64": base64.b64encode(data).decode(),
    }


def test_a_piped_stdin_is_recorded_and_still_reaches_the_target(tmp_path: Path) -> None:
    rec = run_harness(tmp_path, "pipe", "printf 'a=\\\\t\\n' | \"$TARGET/bin/reader\"\n")
    assert stdin_of(rec) == [whole(b"a=\\t\n")]
    assert rec["invocations"][0]["stdout_tail"] == "read-all\n"  # it read to EOF as before
    (poc,) = poc_invocations(rec)
    assert poc.stdin == b"a=\\t\n" and poc.target == "bin/reader"


def test_a_file_on_stdin_is_read_without_moving_its_offset(tmp_path: Path) -> None:
    script = "printf 'hello' > in.txt\n\"$TARGET/bin/reader\" < in.txt\n"
    assert stdin_of(run_harness(tmp_path, "file", script)) == [whole(b"hello")]


def test_a_target_that_never_reads_records_the_same_bytes_every_time(tmp_path: Path) -> None:
    script = "printf 'xyz' | \"$TARGET/bin/ok\"\nprintf 'xyz' | \"$TARGET/bin/ok\"\n"
    first = stdin_of(run_harness(tmp_path, "ignored1", script))
    assert first == [whole(b"xyz"), whole(b"xyz")]
    assert stdin_of(run_harness(tmp_path, "ignored2", script)) == first


def test_no_stdin_and_an_endless_producer(tmp_path: Path) -> None:
    script = '"$TARGET/bin/ok"\nyes | "$TARGET/bin/ok"\n'
    rec = run_harness(tmp_path, "endless", script, timeout=20)
    assert not rec["timed_out"]
    none, endless = stdin_of(rec)
    assert none is None  # the reproducer's own stdin is /dev/null: nothing to record
    assert endless == {"complete": False, "size": None, "sha256": None, "b64": None}
