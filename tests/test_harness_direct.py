"""Trace's own variant scripts run without a shell (trace_sandbox/harness/direct.py).

The claim: for a script of script_of's form, a direct run gives the record the shell would
have given, byte for byte, and never starts the reproducer's launcher; any other script, and
any run the shell would have reported a signal for, runs the usual way. The harness runs
outside the Nix sandbox here, in this process, against a tiny package of its own (the real
builds: tests/test_gates_variants_nix.py and every verify test).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_gates_variant_runs import _variant
from trace_sandbox.gates.variant_runs import run_side
from trace_sandbox.gates.variants import Invocation, script_of
from trace_sandbox.harness import direct
from trace_sandbox.harness import main as harness_main

PROGRAMS = {
    "ok": "#!/bin/sh\necho fine\n",
    "show": '#!/bin/sh\ncat "$@"\n',
    "args": "#!/usr/bin/python3 -I\nimport os, sys\nprint([os.fsencode(a) for a in sys.argv])\n",
    "envlist": "#!/usr/bin/python3 -I\nimport os\nprint(list(os.environ))\n",
    "reader": "#!/bin/sh\nwc -c\n",
    "fail3": "#!/bin/sh\necho no >&2\nexit 3\n",
    "crash": "#!/bin/sh\necho crashing\nkill -SEGV $$\n",
    "sleeper": "#!/bin/sh\nsleep 20\n",
}


@pytest.fixture
def pkg(tmp_path: Path) -> Path:
    root = tmp_path / "pkg"
    (root / "bin").mkdir(parents=True)
    for prog, text in PROGRAMS.items():
        (root / "bin" / prog).write_text(text)
        (root / "bin" / prog).chmod(0o755)
    (root / "lib" / "python" / "mod").mkdir(parents=True)
    (root / "lib" / "python" / "mod" / "__init__.py").write_text("VALUE = 3\n")
    # compiled now by the targets' interpreter, as a store path is: else the first run writes
    # the .pyc the second reads (not by this process: PYTHONPYCACHEPREFIX puts its .pyc aside)
    target_python = os.path.realpath("/usr/bin/python3")
    subprocess.run([target_python, "-m", "compileall", "-q", str(root / "lib")], env={}, check=True)
    return root


def _run(
    pkg: Path,
    script: str,
    data: dict[str, bytes],
    *,
    direct_mode: bool,
    monkeypatch: pytest.MonkeyPatch,
    timeout: int = 30,
) -> dict[str, Any]:
    """One harness run of `script` in this process; with `direct_mode`, the reproducer's
    launcher must not be started."""
    work = Path(tempfile.mkdtemp(prefix="hd-", dir="/tmp"))  # short: the harness's sockets
    try:
        for name, content in data.items():
            (work / name).write_bytes(content)
        (work / "repro.sh").write_text(script, encoding="utf-8", errors="surrogateescape")
        (work / "build").mkdir()
        env = {
            "out": str(work / "out"),
            "target": str(pkg),
            "script": str(work / "repro.sh"),
            "data": " ".join(str(work / n) for n in sorted(data)),
            "run": "1",
            "tools": "/usr",
            "timeout": str(timeout),
            "TMPDIR": str(work / "build"),
            "direct": "1" if direct_mode else "0",
        }
        with monkeypatch.context() as m:
            if direct_mode:

                def no_shell(*_: object, **__: object) -> None:
                    raise AssertionError("the reproducer's launcher was started")

                m.setattr(harness_main, "isolated_reproducer", no_shell)
            harness_main.run(env)
        record: dict[str, Any] = json.loads((work / "out" / "outcome.json").read_text())
        return record
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _plan(tmp_path: Path, scripts: list[str], data: list[dict[str, bytes]]) -> Path:
    """A variant plan: variant n+1 is scripts[n] with data[n]."""
    plan = tmp_path / "plan"
    for n, (script, files) in enumerate(zip(scripts, data, strict=True), start=1):
        _variant(plan, n, script, files)
    return plan


def _run_side(pkg: Path, plan: Path, out: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """run_side of `plan` against `pkg`, as a variant-runs derivation runs it; every run's
    temporary directory is gone afterwards."""
    build = Path(tempfile.mkdtemp(prefix="hd-", dir="/tmp"))
    try:
        for k, v in {"target": str(pkg), "run": "1", "tools": "/usr", "timeout": "30"}.items():
            monkeypatch.setenv(k, v)
        monkeypatch.setenv("TMPDIR", str(build))
        summary = run_side(str(plan), str(out))
        assert list(build.iterdir()) == []
        return summary
    finally:
        shutil.rmtree(build, ignore_errors=True)


CASES = {
    "one program": ('"$TARGET/bin/ok"\n', {}),
    "quotes, $TARGET and $PWD in arguments": (
        "\"$TARGET/bin/args\" 'it'\\''s' '' \"$TARGET\"'/bin/ok' \"$PWD\"'/two.bin'\n"
        "\"$TARGET/bin/show\" 'two.bin'\n",
        {"two.bin": b"second\n"},
    ),
    "a file on stdin": ('"$TARGET/bin/reader" < stdin-0.bin\n', {"stdin-0.bin": b"x" * 70000}),
    "the last line's exit status": ('"$TARGET/bin/ok"\n"$TARGET/bin/fail3"\n', {}),
    "the shell's environment, in its order": ('"$TARGET/bin/envlist"\n', {}),
    "python3 running the package's module": (
        "python3 '-c' 'import mod, sys; print(mod.VALUE); sys.exit(5)'\n",
        {},
    ),
    "comments": ("# a comment\n\"$TARGET/bin/ok\" 'a b'\n# another\n", {}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_direct_run_gives_the_shells_record_byte_for_byte(
    case: str, pkg: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script, data = CASES[case]
    assert direct.parse(script.encode()) is not None  # else this compares the shell with itself
    shell = _run(pkg, script, data, direct_mode=False, monkeypatch=monkeypatch)
    fast = _run(pkg, script, data, direct_mode=True, monkeypatch=monkeypatch)
    assert shell["target_ran"]
    assert json.dumps(fast, sort_keys=True) == json.dumps(shell, sort_keys=True)


def test_the_record_holds_what_the_lines_did(pkg: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not only equal to the shell's: right (a broken request would fail both ways alike)."""
    script, data = CASES["the last line's exit status"]
    rec = _run(pkg, script, data, direct_mode=True, monkeypatch=monkeypatch)
    assert rec["exit_code"] == 3 and rec["stdout_tail"] == "fine\n" and rec["stderr_tail"] == "no\n"
    assert [i["target"] for i in rec["invocations"]] == ["bin/fail3", "bin/ok"]
    script, data = CASES["a file on stdin"]
    rec = _run(pkg, script, data, direct_mode=True, monkeypatch=monkeypatch)
    assert rec["stdout_tail"].strip() == "70000"
    script, data = CASES["python3 running the package's module"]
    rec = _run(pkg, script, data, direct_mode=True, monkeypatch=monkeypatch)
    [inv] = rec["invocations"]
    assert (inv["kind"], inv["exit_code"], rec["exit_code"]) == ("python", 5, 5)


def test_a_target_killed_by_a_signal_is_not_kept(
    pkg: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shell reports it on its stderr in its own words: the direct run is not its record."""
    with pytest.raises(harness_main.DirectFallback, match="signal 11"):
        _run(pkg, '"$TARGET/bin/crash"\n', {}, direct_mode=True, monkeypatch=monkeypatch)


def test_a_timeout_ends_the_run_as_it_ends_the_shell(
    pkg: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = '"$TARGET/bin/sleeper"\n"$TARGET/bin/ok"\n'
    rec = _run(pkg, script, {}, direct_mode=True, monkeypatch=monkeypatch, timeout=1)
    assert (rec["timed_out"], rec["exit_code"], rec["signal"]) == (True, None, "SIGKILL")
    [inv] = rec["invocations"]  # the next line never started
    assert (inv["target"], inv["ended"]) == ("bin/sleeper", "timed-out")


@pytest.mark.parametrize(
    "script",
    [
        '"$TARGET/bin/ok"; rm -rf /\n',
        '"$TARGET/bin/ok" $(id)\n',
        '"$TARGET/bin/ok" `id`\n',
        '"$TARGET/bin/ok" "$HOME"\n',
        '"$TARGET/bin/ok" unquoted\n',
        '"$TARGET/bin/ok" | cat\n',
        '"$TARGET/bin/ok" > out\n',
        "sh -c 'true'\n",
        '"$TARGET/../x"\n',
        '"$TARGET/bin/ok" \'open\n',
        "\"$TARGET/bin/ok\"  'two spaces'\n",
        '"$TARGET/bin/ok" < ../etc/passwd\n',
        "FOO=1 python3\n",
    ],
)
def test_any_other_script_runs_in_the_shell(script: str) -> None:
    assert direct.parse(script.encode()) is None


def test_a_plan_whose_variant_crashes_is_run_again_the_usual_way(
    pkg: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """run_side: the crashing variant's record is the shell's (its stderr has the shell's
    report of the signal), the others' the direct runs'."""
    plan = _plan(tmp_path, ['"$TARGET/bin/crash"\n', '"$TARGET/bin/ok"\n'], [{}, {}])
    summary = _run_side(pkg, plan, tmp_path / "out", monkeypatch)
    crashed, fine = (r["outcome"] for r in summary["runs"])
    assert crashed["invocations"][0]["signal"] == "SIGSEGV"
    shell = _run(pkg, '"$TARGET/bin/crash"\n', {}, direct_mode=False, monkeypatch=monkeypatch)
    assert crashed["stderr_tail"] == shell["stderr_tail"] != ""  # the shell's own report
    assert fine["stdout_tail"] == "fine\n"


_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=12)
_PIECES = st.lists(st.one_of(_TEXT, st.sampled_from(["$TARGET", "<work>", "'", " ", '"$x"'])))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["bin/ok", "bin/a.b+c-d_e", "python3"]),
            st.lists(_PIECES.map("".join), max_size=4),
            st.booleans(),
        ),
        min_size=1,
        max_size=3,
    )
)
def test_parse_reads_back_what_script_of_wrote(lines: list[tuple[str, list[str], bool]]) -> None:
    """Every script script_of writes is read back to its own lines exactly, or (an argument
    with a newline) left to the shell; never read as something else."""
    invs = [Invocation(t, "python" if t == "python3" else "program", tuple(a)) for t, a, _ in lines]
    stdin = {i for i, (_, _, redirected) in enumerate(lines) if redirected}
    script = script_of(invs, {}, stdin)
    parsed = direct.parse(script.encode("utf-8", "surrogateescape"))
    if any("\n" in a for _, args, _ in lines for a in args):
        assert parsed is None
        return
    assert parsed is not None and len(parsed) == len(lines)
    env = {"TARGET": "/view", "PWD": "/work"}
    for i, (line, inv) in enumerate(zip(parsed, invs, strict=True)):
        assert line.program == ("python3" if inv.kind == "python" else inv.target)
        expected = [a.replace("$TARGET", "/view").replace("<work>", "/work") for a in inv.args]
        assert [direct.expand(a, env) for a in line.args] == expected
        assert line.stdin == (f"stdin-{i}.bin" if i in stdin else None)


def test_the_shells_environment_is_learnt_not_assumed(tmp_path: Path) -> None:
    env = {"TARGET": "/t", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LC_ALL": "C"}
    learnt = direct.shell_environment("/bin/sh", env, str(tmp_path))
    assert learnt is not None
    assert {k: learnt[k] for k in env} == env and learnt["PWD"] == str(tmp_path)
    assert set(learnt) - set(env) <= {"PWD", "SHLVL"}
    assert direct.shell_environment("/nonexistent/sh", env, str(tmp_path)) is None
    assert os.path.isdir(tmp_path)


def test_a_batch_of_direct_runs_starts_no_launcher(
    pkg: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch's launcher process starts with its first launch: none when no run needs one."""
    from trace_sandbox.harness import isolation

    scripts = [f"\"$TARGET/bin/show\" 'in{n}'\n" for n in (1, 2, 3)]
    plan = _plan(tmp_path, scripts, [{f"in{n}": f"input {n}\n".encode()} for n in (1, 2, 3)])

    def no_launcher(self: object) -> None:
        raise AssertionError("a launcher process was started")

    monkeypatch.setattr(isolation.Server, "_started", no_launcher)
    summary = _run_side(pkg, plan, tmp_path / "out", monkeypatch)
    assert [r["outcome"]["stdout_tail"] for r in summary["runs"]] == [
        f"input {n}\n" for n in (1, 2, 3)
    ]
