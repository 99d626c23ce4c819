"""One derivation per side runs every variant (trace_sandbox/gates/variant_runs.py), each as a
run of its own: its own working directory, process and record, and no sight of the records or
files the other variants wrote, run beside it or before it. The harness runs outside the sandbox
against the tiny fake package of tests.test_verify_gate (the real builds:
tests/test_gates_variants_nix.py)."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.test_verify_gate import HARNESS, run_harness
from trace_sandbox.gates.variant_gate import runs_by_index
from trace_sandbox.gates.variant_runs import SCHEMA, run_dirs, run_side


def _variant(plan: Path, n: int, script: str, data: dict[str, bytes]) -> None:
    d = plan / "v" / str(n)
    (d / "data").mkdir(parents=True)
    (d / "repro.sh").write_text(script)
    for name, content in data.items():
        (d / "data" / name).write_bytes(content)
    meta = {"id": f"v{n:03d}-test", "index": n, "description": f"variant {n}", "files": {}}
    (d / "variant.json").write_text(json.dumps(meta))


def test_each_variant_runs_alone_and_keeps_its_own_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    run_harness(tmp_path, "setup", "true\n")  # makes the fake package at tmp_path/pkg
    plan, out = tmp_path / "plan", tmp_path / "batch-out"
    _variant(plan, 1, '"$TARGET/bin/crash" one.bin\nsleep 3\n', {"one.bin": b"1"})
    _variant(plan, 2, 'sleep 3\n"$TARGET/bin/show" two.bin\n', {"two.bin": b"second\n"})
    # variant 3, run while 1 and 2 are still at work, looks for what they have: their data in
    # its working directory, their temporary directories beside its own, the records in the
    # batch's output
    spy = f'ls\nls "$TMPDIR/.." | wc -l\nls {out}/v >/dev/null 2>&1 || echo no-batch-output\n'
    _variant(plan, 3, spy + '"$TARGET/bin/ok"\n', {"three.bin": b"3"})
    build = Path(tempfile.mkdtemp(prefix="vr-", dir="/tmp"))  # short: the harness's sockets
    request.addfinalizer(lambda: shutil.rmtree(build, ignore_errors=True))
    env = {"harness": str(HARNESS), "target": str(tmp_path / "pkg"), "run": "1"}
    for k, v in {**env, "tools": "/usr", "timeout": "30", "TMPDIR": str(build)}.items():
        monkeypatch.setenv(k, v)

    summary = run_side(str(plan), str(out))

    assert summary["schema"] == SCHEMA and summary["variants"] == 3
    assert summary["symbolized"] is True  # no `symbolize=0` in this environment
    assert json.loads((out / "outcome.json").read_text()) == summary
    one, two, three = (r["outcome"] for r in summary["runs"])
    assert one["invocations"][0]["signal"] == "SIGSEGV"  # variant 1's crash is its own
    assert two["invocations"][0]["stdout_tail"] == "second\n" and not two["target_failed"]
    assert three["stdout_tail"].split() == ["three.bin", "1", "no-batch-output", "fine"]
    assert list(build.iterdir()) == []  # every run's temporary directory is gone
    for n in (1, 2, 3):  # each variant's reproducer and data, as a bundle carries them
        assert (out / "v" / str(n) / "variant" / "repro.sh").is_file()
    assert (out / "v" / "2" / "variant" / "data" / "two.bin").read_bytes() == b"second\n"
    # the gates read the batch's output as one run directory per variant
    assert run_dirs([str(out)]) == [str(out / "v" / str(n)) for n in (1, 2, 3)]
    by_index = runs_by_index([str(out)])
    assert sorted(by_index) == [1, 2, 3]
    assert by_index[1][1] == one and by_index[3][0]["id"] == "v003-test"


def test_an_empty_plan_runs_nothing(tmp_path: Path) -> None:
    (tmp_path / "plan" / "v").mkdir(parents=True)
    summary = run_side(str(tmp_path / "plan"), str(tmp_path / "out"))
    assert (summary["variants"], summary["runs"]) == (0, [])
    assert runs_by_index([str(tmp_path / "out")]) == {}
