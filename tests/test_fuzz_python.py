"""The fuzzing gate's Python targets (issue 26): trace_sandbox/gates/fuzz_python.py and the gate's
judgement of a Python crash. No Nix: the lineesc fixture is installed here by hand (its
installPhase's layout: lib/python/lineesc, bin/unescape a `#!python3` script) from its source
and a candidate's patch; the real builds are in test_gates_calibration.py and
test_e2e_fuzz_python.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tomli

from tests.tiers import repeats
from trace_sandbox.gates import fuzz_python
from trace_sandbox.gates.fuzz import fuzz
from trace_sandbox.gates.fuzz_gate import evaluate, python_targets
from trace_sandbox.gates.fuzz_python import (
    Entry,
    PythonRunner,
    entry_of,
    script_names,
    traceback_crash,
)
from trace_sandbox.gates.variants import Invocation, Unit, generate, units_of

REPO = Path(__file__).resolve().parent.parent
FORK = REPO / "tests" / "fixtures" / "fork"
SOURCE = FORK / "pkgs" / "lineesc" / "src"
CANDIDATES = FORK / "trace" / "candidates"
WRONG = CANDIDATES / "lineesc-trailing-backslash"
RIGHT = CANDIDATES / "lineesc-truncated-escape"
POLICY = {"name": "trace-signing", "version": "1.5.0", "thresholds": {"executions": 500}}
INVS = [
    Invocation("bin/unescape", "program", ("good.txt",)),
    Invocation("bin/unescape", "program", ("poc.txt",)),
]


def installed(tmp: Path, candidate: Path) -> Path:
    """lineesc with the candidate's patch, laid out as its installPhase lays it out."""
    src = tmp / "src"
    shutil.copytree(SOURCE, src)
    subprocess.run(["patch", "-s", "-p1", "-i", str(candidate / "fix.patch")], cwd=src, check=True)
    out = tmp / "target"
    (out / "lib" / "python").mkdir(parents=True)
    (out / "bin").mkdir()
    shutil.copytree(src / "lineesc", out / "lib" / "python" / "lineesc")
    script = out / "bin" / "unescape"
    script.write_text(f"#!{sys.executable}\n" + (src / "unescape.py").read_text())
    script.chmod(0o755)
    return out


def runner(tmp: Path, candidate: Path, *, in_process: bool = True) -> PythonRunner:
    target = installed(tmp, candidate)
    files = {n: (candidate / n).read_bytes() for n in ("good.txt", "good.out", "poc.txt")}
    work = tmp / "work"
    work.mkdir()
    paths = [str(target / "lib" / "python")]
    units = units_of(INVS, files)
    return PythonRunner(str(target), INVS, files, units, str(work), paths, in_process=in_process)


def gate_seeds(run: PythonRunner, candidate: Path) -> tuple[list[tuple[int, bytes]], list[bytes]]:
    """The seeds and dictionary fuzz-plan uses: the PoC's units, the variants gate's variants
    (its policy's budget and seed; good.txt a good input), the variant plan's dictionary."""
    policy = tomli.loads((REPO / "policy" / "signing.toml").read_text())["gates"]["variants"]
    sources = [(candidate / "fix.patch").read_text(), (SOURCE / "lineesc/__init__.py").read_text()]
    variants, tokens = generate(
        INVS,
        run.files,
        sources,
        seed=policy["seed"],
        budget=policy["budget"],
        good=frozenset({"good.txt"}),
    )
    index = {u.name: k for k, u in enumerate(run.units)}
    seeds = [(k, u.data) for k, u in enumerate(run.units)]
    seeds += [(index[v.unit], v.files[v.unit]) for v in variants if v.unit in v.files]
    return seeds, tokens


def default_executions() -> int:
    policy = tomli.loads((REPO / "policy" / "signing.toml").read_text())
    return int(policy["gates"]["fuzz"]["executions"])


# --- the runner --------------------------------------------------------------------------------


def test_the_poc_passes_the_wrong_fix_and_crashes_the_unpatched_package(tmp_path: Path) -> None:
    wrong = runner(tmp_path / "w", WRONG)
    poc = [u.name for u in wrong.units].index("poc.txt")
    assert wrong(poc, wrong.units[poc].data).crash is None  # refused cleanly: exit 2
    assert wrong(poc, b"a\\x4\n").crash == "Python: IndexError @ _hex (__init__.py)"
    right = runner(tmp_path / "r", RIGHT)
    assert right(poc, b"a\\x4\n").crash is None
    cut = right.calls[1][2]
    assert cut is not None
    ran = fuzz_python.run_in_process(cut, right.place, b"")
    assert ran.exit_code == 2 and b"escape cut off at the end of the line" in ran.stderr


def test_coverage_is_the_package_s_arcs_only_and_grows_with_new_paths(tmp_path: Path) -> None:
    run = runner(tmp_path, RIGHT)
    plain = run(0, b"abc\n").features
    escaped = run(0, b"a\\u00e9\n").features
    assert plain and escaped & ~plain  # the \u path's arcs are new
    files = {arc[0] for arc in run.arcmap.ids}
    assert files and all(f.startswith(run.target) for f in files), files


def test_each_input_runs_on_fresh_module_state(tmp_path: Path) -> None:
    """A module-level counter the target bumps: every run imports the package afresh."""
    pkg = tmp_path / "target" / "lib" / "python" / "counter"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("runs = []\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / "main.py").write_text(
        "import counter\ncounter.runs.append(1)\nassert len(counter.runs) == 1, counter.runs\n"
    )
    invs = [Invocation("lib/python/counter/__init__.py", "python", ("main.py", "x"))]
    units = [Unit("arg", "arg:0:1", b"x")]
    paths = [str(pkg.parent)]
    run = PythonRunner(str(tmp_path / "target"), invs, {}, units, str(work), paths)
    assert [run(0, b"x").crash for _ in range(3)] == [None, None, None]
    assert "counter" not in sys.modules and run.mode() == "in-process"


def test_a_run_past_its_steps_is_a_hang_and_the_interpreter_is_put_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hang is a count of traced events (STEPS), not a time: the same input is a hang on a
    fast and a slow machine (stop 37's CI failure: the fuzz plan of a slow PoC differed)."""
    monkeypatch.setattr(fuzz_python, "STEPS", 20_000)
    work = tmp_path / "work"
    work.mkdir()
    (work / "spin.py").write_text(
        "import sys\nsys.setrecursionlimit(90)\nfor i in range(int(sys.stdin.read())):\n    pass\n"
    )
    invs = [Invocation("spin.py", "python", ("spin.py",), stdin=b"9000")]
    run = PythonRunner(str(work), invs, {}, [Unit("stdin", "stdin:0", b"9000")], str(work), [])
    argv, cwd, limit = list(sys.argv), Path.cwd(), sys.getrecursionlimit()
    assert not run(0, b"9000").hung  # ~9,000 line events
    assert run(0, b"11000").hung  # ~11,000 > 20,000 / 2: two events a loop
    assert [run(0, b"10500").hung for _ in range(3)] == [True] * 3  # the same, every time
    assert sys.argv == argv and Path.cwd() == cwd and sys.gettrace() is None
    assert sys.getrecursionlimit() == limit  # the target lowered it; put back


def test_a_run_stuck_where_no_event_comes_is_stopped_by_the_wall_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fuzz_python, "WALL_LIMIT", 0.2)
    work = tmp_path / "work"
    work.mkdir()
    (work / "block.py").write_text("import time\ntime.sleep(5)\n")
    invs = [Invocation("block.py", "python", ("block.py",))]
    run = PythonRunner(str(work), invs, {}, [Unit("stdin", "stdin:0", b"")], str(work), [])
    assert run(0, b"").hung


def test_the_alarm_firing_while_a_crash_is_judged_is_no_crash_of_the_runner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The alarm is off before the exception is looked at: an exception slow to print (a deep
    traceback on a slow machine) can no longer take the alarm out of the runner itself."""
    monkeypatch.setattr(fuzz_python, "WALL_LIMIT", 0.3)
    work = tmp_path / "work"
    work.mkdir()
    # the exception type's name is slow to read: it stands in for a slow machine working through
    # a deep traceback (crash_signature reads the type's name and every frame)
    (work / "slow.py").write_text(
        "import time\nclass Meta(type):\n    @property\n    def __name__(cls):\n"
        "        time.sleep(0.6)\n        return 'Slow'\n"
        "class Slow(Exception, metaclass=Meta):\n    pass\nraise Slow()\n"
    )
    invs = [Invocation("slow.py", "python", ("slow.py",))]
    run = PythonRunner(str(work), invs, {}, [Unit("stdin", "stdin:0", b"")], str(work), [])
    out = run(0, b"")
    assert out.crash is not None and out.crash.startswith("Python: Slow") and not out.hung


def test_in_process_and_per_process_runs_explore_the_same_inputs(tmp_path: Path) -> None:
    """The fallback (a python3 per execution) sees what the in-process runs see: the same
    corpus, the same crash, for the same seed (a small budget: each run starts a python3)."""
    here = runner(tmp_path / "a", WRONG)
    there = runner(tmp_path / "b", WRONG, in_process=False)
    seeds = [(k, u.data) for k, u in enumerate(here.units)] + [(1, b"a\\x4\n")]
    a = fuzz(seeds, here, executions=6, seed=3)
    b = fuzz(seeds, there, executions=6, seed=3)
    assert there.mode() == "per-process" and here.mode() == "in-process"
    assert a.corpus == b.corpus and a.edges == b.edges
    assert [c.signature for c in a.crashes] == [c.signature for c in b.crashes]
    assert a.crashes[0].signature == "Python: IndexError @ _hex (__init__.py)"


def test_the_default_budget_finds_the_wrong_fix_s_crash_with_10_of_10_seeds(
    tmp_path: Path,
) -> None:
    """Seeded as the gate seeds it, each seed runs until its first crash (a prefix of the full,
    deterministic run): an escape cut off by a line's end, within the policy's executions.
    The PoC and every one of its variants pass the wrong fix."""
    run = runner(tmp_path, WRONG)
    seeds, tokens = gate_seeds(run, WRONG)
    assert not any(run(k, d).crash for k, d in seeds)  # the variants miss it
    budget = default_executions()
    found = {}
    for seed in range(repeats(10, 3)):  # the fast tier: 3 (tests/tiers.py)
        result = fuzz(seeds, run, executions=budget, seed=seed, tokens=tokens, stop_on_crash=True)
        assert result.crashes, f"seed {seed}: no crash in {budget} executions"
        (crash,) = result.crashes
        assert crash.signature == "Python: IndexError @ _hex (__init__.py)", crash
        found[seed] = crash.found_at
    again = fuzz(seeds, run, executions=budget, seed=0, tokens=tokens, stop_on_crash=True)
    assert (
        again.crashes[0].data
        == fuzz(seeds, run, executions=budget, seed=0, tokens=tokens, stop_on_crash=True)
        .crashes[0]
        .data
    )  # the same seed, the same input
    assert max(found.values()) <= budget
    print(f"first crash at execution, by seed: {found}")


def test_the_real_fix_gives_the_fuzzer_no_crash(tmp_path: Path) -> None:
    """A share of the default budget here, for the fast tier (the calibration row runs the
    whole budget, in the gate, with real builds)."""
    run = runner(tmp_path, RIGHT)
    seeds, tokens = gate_seeds(run, RIGHT)
    result = fuzz(seeds, run, executions=150, seed=0, tokens=tokens)
    assert result.executions == 150 and result.edges
    assert result.crashes == []


# --- what counts as a Python invocation ----------------------------------------------------------


def test_entries_scripts_and_which_targets_are_python(tmp_path: Path) -> None:
    script = tmp_path / "bin" / "tool"
    script.parent.mkdir()
    script.write_text("#!/usr/bin/python3\nprint(1)\n")
    (tmp_path / "bin" / "cc").write_bytes(b"\x7fELF")
    work = "/w"
    tool = Invocation("bin/tool", "program", ("a.txt",))
    assert entry_of(tool, str(tmp_path), work) == Entry(
        "script", str(script), (str(script), "a.txt")
    )
    py = Invocation("lib/python/p/__init__.py", "python", ("run.py", "<work>/in"))
    assert entry_of(py, str(tmp_path), work) == Entry("script", "/w/run.py", ("run.py", "/w/in"))
    mod = Invocation("x", "python", ("-m", "p.cli", "in"))
    assert entry_of(mod, str(tmp_path), work) == Entry("module", "p.cli", ("p.cli", "in"))
    code = Invocation("x", "python", ("-c", "import p", "in"))
    assert entry_of(code, str(tmp_path), work) == Entry("code", "import p", ("-c", "in"))
    assert entry_of(Invocation("x", "python", ("-X", "dev", "r.py")), str(tmp_path), work) is None
    assert script_names([py, mod, tool]) == {"run.py"}
    assert python_targets(str(tmp_path), [tool, py])
    assert not python_targets(str(tmp_path), [tool, Invocation("bin/cc", "program", ())])


def test_a_traceback_names_its_exception_and_nothing_else_is_a_crash() -> None:
    tb = 'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n'
    assert traceback_crash(tb + "IndexError: string index out of range\n") == ("Python: IndexError")
    assert traceback_crash(tb + "lineesc.EscapeError: bad\n") == "Python: EscapeError"
    assert traceback_crash(tb + "KeyError\n") == "Python: KeyError"
    assert traceback_crash("unescape: line 1: escape cut off\n") is None


# --- the gate's judgement of a Python finding ------------------------------------------------


def _inv(exit_code: int, stderr: str) -> dict[str, Any]:
    return {"exit_code": exit_code, "signal": None, "sanitizer": None, "stderr": stderr}


def _tb(kind: str) -> str:
    return f'Traceback (most recent call last):\n  File "t", line 3, in f\n{kind}: boom\n'


def _side(root: Path, invs: list[dict[str, Any]]) -> str:
    d = root / "v" / "1"
    d.mkdir(parents=True)
    meta = {"id": "f001-crash", "index": 1, "description": "d", "files": {}}
    (d / "variant.json").write_text(json.dumps(meta))
    (d / "outcome.json").write_text(json.dumps({"target_ran": True, "invocations": invs}))
    return str(root)


def _judge(tmp: Path, post: dict[str, Any], pre: dict[str, Any], oracles: Any) -> Any:
    plan = tmp / "plan"
    plan.mkdir(parents=True)
    stats = {"executions": 10, "not_measurable": None}
    (plan / "plan.json").write_text(json.dumps({"seed": 0, "fuzz": stats, "variants": []}))
    cfg = {
        "policy": POLICY,
        "plan": str(plan),
        "expect": {},
        "oracles": json.dumps(oracles),
        "post": [_side(tmp / "post", [post])],
        "pre": [_side(tmp / "pre", [pre])],
    }
    return evaluate(cfg)


LINEESC = {
    "expect": {"invocation": [{"args": "poc", "exit_code": [1], "stderr": "IndexError"}]},
    "accept": {"invocation": [{"args": "poc", "exit_code": [2], "stderr": "cut off"}]},
}


def test_the_advisory_s_exception_post_fix_is_fuzz_found_crash(tmp_path: Path) -> None:
    """IndexError on both sides: the bug [expect] declares, reached again (on the good file's
    call: a variant changes the input, not the program, so the selector is dropped)."""
    rec = _judge(tmp_path, _inv(1, _tb("IndexError")), _inv(1, _tb("IndexError")), LINEESC)
    assert rec["reasons"] == ["fuzz-found-crash"] and not rec["passed"]
    assert rec["details"]["results"][0]["post_crash"] == ["Python: IndexError"]


def test_a_pre_existing_exception_of_another_kind_is_listed_not_failing(tmp_path: Path) -> None:
    rec = _judge(tmp_path, _inv(1, _tb("KeyError")), _inv(1, _tb("KeyError")), LINEESC)
    assert rec["passed"] and rec["details"]["results"][0]["status"] == "other-crash"


def test_an_exception_the_fix_brings_is_a_finding(tmp_path: Path) -> None:
    rec = _judge(tmp_path, _inv(1, _tb("KeyError")), _inv(0, ""), LINEESC)
    assert rec["reasons"] == ["fuzz-found-crash"]


def test_a_declared_rejection_by_exception_and_a_clean_exit_are_no_crash(tmp_path: Path) -> None:
    """htmlattr's fix refuses a key by raising ValueError (exit 1), as its [accept] declares."""
    oracles = {
        "expect": {"invocation": [{"args": "injected", "exit_code": [0]}]},
        "accept": {"invocation": [{"args": "injected", "exit_code": [1], "stderr": "ValueError"}]},
    }
    rec = _judge(tmp_path / "a", _inv(1, _tb("ValueError")), _inv(0, ""), oracles)
    assert rec["passed"] and rec["details"]["results"][0]["status"] == "no-crash"
    rec = _judge(tmp_path / "b", _inv(2, "unescape: line 1: cut off\n"), _inv(0, ""), LINEESC)
    assert rec["passed"] and rec["details"]["results"][0]["post_crash"] == []


def test_a_relation_only_expect_counts_only_a_new_exception(tmp_path: Path) -> None:
    """pager-relation-fix declares relations only: a ValueError both sides raise on a mutated
    argument (`int('1x')`) is not its bug."""
    oracles = {"expect": {"relation": [{"relation": "equal"}]}, "accept": {}}
    rec = _judge(tmp_path, _inv(1, _tb("ValueError")), _inv(1, _tb("ValueError")), oracles)
    assert rec["passed"] and rec["details"]["results"][0]["status"] == "other-crash"


# --- fuzz-plan, Python side ----------------------------------------------------------------------


def test_the_plan_fuzzes_a_python_target_and_writes_the_found_input_as_a_reproducer(
    tmp_path: Path,
) -> None:
    """write_plan on lineesc's wrong fix, as fuzz-plan runs it (no Nix): the Python runner,
    the crash minimised and written as an ordinary reproducer of both calls; no corpus for the
    mutation gate (its replay starts a python3 per call)."""
    from trace_sandbox.gates.fuzz_gate import write_plan

    target = installed(tmp_path / "build", WRONG)
    pre = tmp_path / "pre-run"
    pre.mkdir()
    calls = [{"target": i.target, "kind": i.kind, "args": list(i.args)} for i in INVS]
    (pre / "outcome.json").write_text(json.dumps({"target_ran": True, "invocations": calls}))
    data = [str(WRONG / n) for n in ("good.txt", "good.out", "poc.txt")]
    policy = {**POLICY, "thresholds": {"executions": 120, "seed": 3}}
    out = tmp_path / "plan"
    write_plan(
        {"target": str(target), "pre_runs": [str(pre)], "data": data, "policy": policy},
        str(out),
    )
    plan = json.loads((out / "plan.json").read_text())
    assert plan["fuzz"]["runner"] == "in-process" and plan["fuzz"]["not_measurable"] is None
    (variant,) = plan["variants"]
    assert "Python: IndexError @ _hex" in variant["description"], variant
    script = (out / "v" / "1" / "repro.sh").read_text()
    assert script.splitlines()[-2:] == [
        "\"$TARGET/bin/unescape\" 'good.txt'",
        "\"$TARGET/bin/unescape\" 'poc.txt'",
    ]
    assert not (out / "corpus").exists()


def test_a_python_script_alone_is_not_an_input_to_fuzz(tmp_path: Path) -> None:
    """textcols' shape: `python3 repro.py`, repro.py its only data file: nothing to vary."""
    from trace_sandbox.gates.fuzz_gate import write_plan

    target = installed(tmp_path / "build", RIGHT)
    pre = tmp_path / "pre-run"
    pre.mkdir()
    call = {"target": "lib/python/lineesc/__init__.py", "kind": "python", "args": ["repro.py"]}
    (pre / "outcome.json").write_text(json.dumps({"target_ran": True, "invocations": [call]}))
    script = tmp_path / "repro.py"
    script.write_text("import lineesc\n")
    out = tmp_path / "plan"
    cfg = {"target": str(target), "pre_runs": [str(pre)], "data": [str(script)], "policy": POLICY}
    write_plan(cfg, str(out))
    plan = json.loads((out / "plan.json").read_text())
    assert plan["fuzz"]["not_measurable"] == "the PoC has no input to vary"
    assert plan["variants"] == []


def test_an_exception_the_fix_declares_as_its_rejection_is_no_crash_in_the_loop(
    tmp_path: Path,
) -> None:
    """htmlattr's shape: the fix refuses the PoC's key by raising ValueError (exit 1), as its
    [accept] declares; every execution runs that call too, so without the [accept] rule every
    execution would count as a crash and nothing would join the corpus."""
    from trace_sandbox.gates.fuzz_gate import _refusal

    pkg = tmp_path / "target" / "lib" / "python" / "attr"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "def check(key):\n    if ' ' in key:\n        raise ValueError('invalid key')\n"
    )
    work = tmp_path / "work"
    work.mkdir()
    files = {"r.py": b"import attr, sys\nattr.check(open(sys.argv[1]).read())\n"}
    files |= {"good.txt": b"id", "bad.txt": b"x y"}
    invs = [
        Invocation("lib/python/attr/__init__.py", "python", ("r.py", "good.txt")),
        Invocation("lib/python/attr/__init__.py", "python", ("r.py", "bad.txt")),
    ]
    units = [u for u in units_of(invs, files) if u.name != "r.py"]
    accept = {"invocation": [{"args": "bad", "exit_code": [1], "stderr": "ValueError: invalid"}]}
    refused = _refusal({"oracles": json.dumps({"expect": {}, "accept": accept})})
    paths = [str(pkg.parent)]
    target = str(tmp_path / "target")
    good = [u.name for u in units].index("good.txt")
    plain = PythonRunner(target, invs, files, units, str(work), paths)
    assert plain(good, b"ok").crash == "Python: ValueError @ check (__init__.py)"
    judged = PythonRunner(target, invs, files, units, str(work), paths, refused=refused)
    assert judged(good, b"ok").crash is None and judged(good, b"ok").features
    assert judged(good, b"a b").crash is None  # the same refusal on the good call: no crash
