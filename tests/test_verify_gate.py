"""Unit tests of the verify rules with explicit fake records and step results (no nix)."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from engine.candidate import load_candidate
from engine.graph import load_graph
from engine.run import RunResult, StepResult
from engine.verify.fork_graph import find_fork, project_root, verify_context
from engine.verify.verdict import judge
from engine.verify_result import REASONS
from trace_sandbox.gates import expectation, oracle

ROOT = Path(__file__).resolve().parent.parent
FORK = ROOT / "tests" / "fixtures" / "fork"
CAND = FORK / "trace" / "candidates" / "cparse-key-overflow" / "candidate.toml"


@pytest.fixture(scope="module")
def gate() -> ModuleType:
    return expectation


HARNESS = ROOT / "trace_sandbox" / "harness"


def load_harness() -> ModuleType:
    """The harness's entry module, under the package's one import name (trace_sandbox)."""
    from trace_sandbox.harness import main

    return main


@pytest.fixture(scope="module")
def harness() -> ModuleType:
    return load_harness()


def inv(**kw: Any) -> dict[str, Any]:
    """One target invocation as the harness records it."""
    base: dict[str, Any] = {"target": "bin/cparse", "kind": "program", "args": []}
    base |= {"exit_code": 0, "signal": None, "sanitizer": None, "opened": []}
    return base | {"stdout_tail": "", "stderr_tail": ""} | kw


def rec(side: str = "pre", run: int = 1, **kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "schema": "trace.run/v1",
        "side": side,
        "run": run,
        "build": "ok",
        "target_ran": True,
        "target_failed": False,
        "invocations": [inv()],
        "exit_code": 0,
        "signal": None,
        "sanitizer": None,
        "stdout_sha256": None,
        "stderr_sha256": None,
        "stdout_tail": "",
        "stderr_tail": "",
    }
    return base | kw


def failing(side: str = "pre", run: int = 1, **kw: Any) -> dict[str, Any]:
    """A run whose one target invocation failed as `kw` says (the script exits the same)."""
    i = inv(**kw)
    return rec(side, run, invocations=[i], target_failed=True, exit_code=i["exit_code"])


ASAN = {"tool": "AddressSanitizer", "kind": "heap-buffer-overflow"}
ASAN_LINE = "==1==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x602000000020"
CRASH_INV = inv(exit_code=1, sanitizer=ASAN, stderr_tail=ASAN_LINE)
CRASH = {"invocations": [CRASH_INV], "target_failed": True, "exit_code": 1, "sanitizer": ASAN}
EXPECT = {"sanitizer": "AddressSanitizer: heap-buffer-overflow", "exit_code": 1}
# the audit's cheating reproducer: the target ran harmlessly, the SCRIPT printed a sanitizer
# line and exited 1 (an old harness parsed the script's own output and exit: PASS)
CHEAT = {"exit_code": 1, "stderr_tail": ASAN_LINE}


@pytest.mark.parametrize(
    ("side", "records", "expect", "reason"),
    [
        ("pre", [rec(**CRASH), rec(run=2, **CRASH)], EXPECT, "ok"),
        ("pre", [rec(), rec(run=2)], EXPECT, "pre-fix-did-not-fail"),
        ("pre", [rec(**CHEAT), rec(run=2, **CHEAT)], EXPECT, "pre-fix-did-not-fail"),
        ("pre", [failing(exit_code=None, signal="SIGSEGV")], EXPECT, "pre-fix-wrong-failure"),
        ("pre", [failing(exit_code=1)], {"signal": "SIGSEGV"}, "pre-fix-wrong-failure"),
        (
            "pre",
            [failing(exit_code=1, stdout_tail="boom")],
            {"output": "^bang"},
            "pre-fix-wrong-failure",
        ),
        ("pre", [failing(exit_code=1, stdout_tail="x\nbang!")], {"output": "^bang"}, "ok"),
        # the pattern must be in the failing target's own output, not in the script's
        (
            "pre",
            [rec(**CRASH, stdout_tail="bang!")],
            {"output": "^bang"},
            "pre-fix-wrong-failure",
        ),
        ("pre", [rec(**CRASH)], {"sanitizer": "AddressSanitizer"}, "ok"),
        # one invocation must meet the whole expectation (here: each meets half of it)
        (
            "pre",
            [rec(invocations=[inv(exit_code=2, sanitizer=ASAN), inv(exit_code=1)])],
            EXPECT,
            "pre-fix-wrong-failure",
        ),
        ("pre", [rec(invocations=[inv(), CRASH_INV])], EXPECT, "ok"),
        ("pre", [rec(**CRASH), rec(run=2)], EXPECT, "flaky"),
        ("pre", [rec(target_ran=False, invocations=[], exit_code=1)], EXPECT, "target-never-ran"),
        ("post", [rec("post"), rec("post", 2)], EXPECT, "ok"),
        ("post", [rec("post", **CRASH)], EXPECT, "post-fix-still-fails"),
        # the script's own exit never counts, either way: the targets all exited 0 (issue 9)
        ("post", [rec("post", exit_code=1)], EXPECT, "ok"),
        ("post", [rec("post", timed_out=True, exit_code=None)], EXPECT, "post-fix-still-fails"),
        ("post", [rec("post", target_ran=False, invocations=[])], EXPECT, "target-never-ran"),
        ("post", [], EXPECT, "run-step-failed"),
    ],
)
def test_judge_side(
    gate: ModuleType, side: str, records: list[dict[str, Any]], expect: dict[str, Any], reason: str
) -> None:
    row = gate.judge_side(side, records, {"expect": expect})
    assert row["reason"] == reason, row
    assert row["holds"] == (reason == "ok")
    assert reason in REASONS


def test_gate_record_lists_each_reason_once(gate: ModuleType) -> None:
    out = gate.gate([rec(), rec(run=2, **CRASH)], [rec("post", **CRASH)], {"expect": EXPECT})
    assert out["passed"] is False
    assert out["reasons"] == ["flaky", "post-fix-still-fails"]
    assert out["details"]["flaky"] == {"pre": True, "post": False}
    ok = gate.gate([rec(**CRASH)], [rec("post")], {"expect": EXPECT})
    assert ok["passed"] is True and ok["reasons"] == []


def test_wrong_failure_detail_names_each_mismatch(gate: ModuleType) -> None:
    got = oracle.mismatches(inv(exit_code=134, signal="SIGABRT"), EXPECT | {"output": "overflow"})
    assert got == [
        "expected exit code 1, got 134",
        "expected sanitizer report 'AddressSanitizer: heap-buffer-overflow', got 'none'",
        "the target's output does not match /overflow/",
    ]
    row = gate.judge_side("pre", [failing(exit_code=134, signal="SIGABRT")], {"expect": EXPECT})
    assert row["detail"].startswith("bin/cparse: SIGABRT, exit 134: expected exit code 1, got 134")


# ---- the harness's pure helpers ----


def test_harness_normalises_pids_addresses_and_paths(harness: ModuleType) -> None:
    text = "==4242==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x602000000040\n"
    text += "    #1 0x55665cadf3b2 in parse_line /build/work/x.c:18 (pid 77)\n"
    out = harness.normalise(text, [("/build/work", "<work>")])
    assert out == (
        "==PID==ERROR: AddressSanitizer: heap-buffer-overflow on address 0xADDR\n"
        "    #1 0xADDR in parse_line <work>/x.c:18 (pid N)\n"
    )
    report = {"tool": "AddressSanitizer", "kind": "heap-buffer-overflow"}
    assert harness.sanitizer_report(out) == report  # no SUMMARY line: the ERROR line's kind
    leak = harness.sanitizer_report("==1==ERROR: LeakSanitizer: detected memory leaks")
    assert leak == {"tool": "LeakSanitizer", "kind": "memory-leak"}


def test_harness_store_name_and_python_paths(harness: ModuleType, tmp_path: Path) -> None:
    assert harness.store_name("/nix/store/" + "a" * 32 + "-crash.txt") == "crash.txt"
    assert harness.store_name("/somewhere/plain-name.txt") == "plain-name.txt"
    (tmp_path / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    (tmp_path / "lib" / "python").mkdir()
    assert harness.python_paths(str(tmp_path)) == [
        str(tmp_path / "lib" / "python"),
        str(tmp_path / "lib" / "python3.11" / "site-packages"),
    ]


# ---- verdict from step results (fake RunResult against the real graph) ----


@pytest.fixture(scope="module")
def graph_and_candidate() -> tuple[Any, Any]:
    cand = load_candidate(CAND)
    graph = load_graph(
        FORK / "trace.toml", root=project_root(FORK), context=verify_context(cand, FORK)
    )
    return graph, cand


def step(sid: str, status: str, outcome: Any = None, det: bool | None = None) -> StepResult:
    return StepResult(
        id=sid,
        key="k-" + sid,
        status=status,  # type: ignore[arg-type]
        drv=f"/nix/store/{sid}.drv",
        out=None if status in ("failed", "skipped") else f"/nix/store/{sid}",
        outcome=outcome,
        deterministic=det,
        log_tail="error: gcc failed" if status == "failed" else None,
    )


def fake_run(
    pre_build: str = "built",
    post_build: str = "built",
    pre: dict[str, Any] | None = None,
    post: dict[str, Any] | None = None,
    det: bool | None = True,
) -> RunResult:
    steps = {"pre-fix": step("pre-fix", pre_build)}
    steps["post-fix"] = step("post-fix", post_build, det=det if post_build == "built" else None)
    for side, build, record in (("pre", pre_build, pre), ("post", post_build, post)):
        for i in (1, 2, 3):
            sid = f"{side}-fix-run@{i}"
            if build == "failed":
                steps[sid] = step(sid, "skipped")
            else:
                r = rec(side, i, **(record or {}))
                steps[sid] = step(sid, "built", r, det=det if side == "post" else None)
    steps["expectation"] = step("expectation", "skipped")
    return RunResult(graph="trace.toml", steps=steps)


@pytest.mark.parametrize(
    ("kw", "reasons"),
    [
        ({"pre": CRASH}, []),
        ({"pre_build": "failed"}, ["pre-fix-build-broken"]),
        ({"post_build": "failed", "pre": CRASH}, ["post-fix-build-broken"]),
        ({"pre_build": "failed", "post": CRASH}, ["pre-fix-build-broken", "post-fix-still-fails"]),
        ({"pre": CRASH, "det": False}, ["nondeterministic"]),
        ({"pre": CRASH, "det": None}, ["determinism-unchecked"]),
    ],
)
def test_verdict_from_step_results(
    graph_and_candidate: tuple[Any, Any], kw: dict[str, Any], reasons: list[str]
) -> None:
    graph, cand = graph_and_candidate
    res = judge(cand, graph, fake_run(**kw))
    assert res.reasons == reasons, [c.model_dump() for c in res.claims]
    assert res.passed == (not reasons)
    assert len(res.pre.runs) == 3 and len(res.post.runs) == 3
    if kw.get("pre_build") == "failed":
        assert [r.build for r in res.pre.runs] == ["failed"] * 3
        assert res.claims[0].detail == "error: gcc failed; full log: nix log /nix/store/pre-fix.drv"
    assert json.loads(res.model_dump_json(by_alias=True))["schema"] == "trace.verify/v1"


def test_verdict_reports_a_failed_run_step(graph_and_candidate: tuple[Any, Any]) -> None:
    graph, cand = graph_and_candidate
    run = fake_run(pre=CRASH)
    run.steps["post-fix-run@2"] = step("post-fix-run@2", "failed")
    res = judge(cand, graph, run)
    assert res.reasons[0] == "run-step-failed"
    assert res.claims[1].claim == "post-fix-survives" and res.claims[1].evidence.startswith(
        "post-fix-run@2"
    )


def test_find_fork_walks_up_to_trace_toml(tmp_path: Path) -> None:
    assert find_fork(CAND) == FORK.resolve()
    (tmp_path / "c").mkdir()
    assert find_fork(tmp_path / "c" / "candidate.toml") is None


def run_harness(
    tmp_path: Path,
    name: str,
    script: str,
    timeout: int = 30,
    extra_env: dict[str, str] | None = None,
    command: list[str] | None = None,
) -> dict[str, Any]:
    """The harness itself, outside the sandbox, against a tiny fake package (`command`: how the
    harness is started, by default as the derivations start it)."""
    import subprocess
    import sys

    pkg = tmp_path / "pkg"
    if not pkg.exists():
        (pkg / "bin").mkdir(parents=True)
        programs = {
            "crash": "#!/bin/sh\necho crashing\nkill -SEGV $$\n",
            "showenv": "#!/bin/sh\nenv | sort\n",
            "ok": "#!/bin/sh\necho fine\n",
            "reader": "#!/bin/sh\ncat >/dev/null\necho read-all\n",
            "show": '#!/bin/sh\ncat "$@"\n',
            "bytes": '#!/bin/sh\nprintf %s "$1" | od -An -tx1\nprintf %s "$X" | od -An -tx1\n',
            "big": "#!/bin/sh\nwhile :; do echo line; done\n",
            "rt": "#!/usr/bin/python3\nimport os, signal\n"
            "os.kill(os.getpid(), signal.SIGRTMIN + 2)\n",
        }
        for prog, text in programs.items():
            (pkg / "bin" / prog).write_text(text)
            (pkg / "bin" / prog).chmod(0o755)
        (pkg / "lib" / "python" / "mod").mkdir(parents=True)
        (pkg / "lib" / "python" / "mod" / "__init__.py").write_text("VALUE = 3\n")
    (tmp_path / f"{name}.sh").write_text(script)
    build = tmp_path / f"build-{name}"
    build.mkdir()
    env = {
        "out": str(tmp_path / f"out-{name}"),
        "target": str(pkg),
        "script": str(tmp_path / f"{name}.sh"),
        "run": "1",
        "tools": "/usr",
        "timeout": str(timeout),
        "TMPDIR": str(build),
        **(extra_env or {}),
    }
    argv = command or [sys.executable, "-I", "-S", str(HARNESS)]
    subprocess.run(argv, env=env, check=True)
    data: dict[str, Any] = json.loads((tmp_path / f"out-{name}" / "outcome.json").read_text())
    return data


def test_harness_runs_the_target_itself_and_keeps_its_signal(tmp_path: Path) -> None:
    rec = run_harness(tmp_path, "crash", '"$TARGET/bin/crash" arg\necho after\n')
    [one] = rec["invocations"]
    assert (one["target"], one["kind"], one["args"]) == ("bin/crash", "program", ["arg"])
    assert (one["exit_code"], one["signal"], one["stdout_tail"]) == (None, "SIGSEGV", "crashing\n")
    assert rec["target_ran"] is True and rec["target_failed"] is True
    assert (rec["exit_code"], rec["signal"]) == (0, None)  # the script's own: it went on
    assert "crashing" in rec["stdout_tail"]  # the target's output still reaches the script
    rec = run_harness(tmp_path, "crash2", "crash\n")  # via PATH; sh exits 128+11
    assert (rec["exit_code"], rec["signal"]) == (139, None)
    assert rec["invocations"][0]["signal"] == "SIGSEGV"


def test_harness_a_failure_only_the_script_reports_is_not_the_target_failing(
    tmp_path: Path,
) -> None:
    script = f'"$TARGET/bin/ok"\necho "{ASAN_LINE}" >&2\nenv\nexit 1\n'
    rec = run_harness(tmp_path, "cheat", script)
    assert rec["target_ran"] and not rec["target_failed"]
    assert rec["sanitizer"] is None and rec["invocations"][0]["sanitizer"] is None
    assert rec["exit_code"] == 1 and "AddressSanitizer" in rec["stderr_tail"]
    # the reproducer's environment says nothing about the side it runs on
    assert "TRACE_RUN=1" in rec["stdout_tail"] and "SIDE" not in rec["stdout_tail"]
    assert "side" not in rec


def test_harness_targets_get_no_preloaded_code(tmp_path: Path) -> None:
    script = 'LD_PRELOAD=/tmp/evil.so PYTHONSTARTUP=x.py FOO=bar "$TARGET/bin/showenv"\n'
    rec = run_harness(tmp_path, "env", script)
    seen = rec["invocations"][0]["stdout_tail"]
    assert "FOO=bar" in seen and "TRACE_RUN=1" in seen
    assert "LD_PRELOAD" not in seen and "PYTHONSTARTUP" not in seen


def test_harness_python_target_is_the_process_that_ran_the_package(tmp_path: Path) -> None:
    script = (
        'python3 -c "print(1)"\n'  # no package module: not a target
        "python3 -c \"import mod, sys; sys.exit('boom %d' % mod.VALUE)\"\n"
    )
    rec = run_harness(tmp_path, "py", script)
    [one] = rec["invocations"]
    assert (one["target"], one["kind"]) == ("lib/python/mod/__init__.py", "python")
    assert one["exit_code"] == 1 and one["stderr_tail"] == "boom 3\n"
    assert "lib/python/mod/__init__.py" in one["opened"]


def test_harness_timeout_kills_the_whole_reproducer(tmp_path: Path) -> None:
    import time

    start = time.monotonic()
    rec = run_harness(tmp_path, "hang", "sleep 60 &\nsleep 60\n", timeout=1)
    assert time.monotonic() - start < 30
    assert (rec["exit_code"], rec["signal"], rec["target_ran"]) == (None, "SIGKILL", False)
    assert "killed after 1 s" in rec["stderr_tail"]
