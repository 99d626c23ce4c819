"""The command line imports only the module of the command it runs, and its table is true."""

from __future__ import annotations

import argparse
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from engine import cli


@pytest.mark.parametrize("module", sorted(cli.COMMAND_MODULES))
def test_the_table_names_what_each_module_registers(module: str) -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    importlib.import_module(module).register(sub)
    assert tuple(sub.choices) == cli.COMMAND_MODULES[module]


def test_every_command_has_one_module() -> None:
    names = [n for names in cli.COMMAND_MODULES.values() for n in names]
    assert len(names) == len(set(names))
    assert cli.module_of("verify") == "engine.cli.verify"
    assert cli.module_of("verify-bundle") == "engine.cli.verify_bundle"
    assert cli.module_of("no-such-command") is None


def _modules_after(argv: list[str]) -> set[str]:
    code = (
        "import json, sys\n"
        "from engine import cli\n"
        f"cli.build_parser({argv[0]!r}).parse_args({argv!r})\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('engine'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=Path(cli.__file__).parent.parent,
    )
    return set(json.loads(out.stdout))


def test_a_command_imports_only_its_own_module() -> None:
    loaded = _modules_after(["plan", "x.toml"])
    assert "engine.cli.plan" in loaded
    others = {m for m in cli.COMMAND_MODULES if m != "engine.cli.plan"}
    assert not loaded & others, loaded & others


def test_an_unknown_command_gets_the_whole_list(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["verfy"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice" in err and "verify" in err and "fork" in err


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    for names in cli.COMMAND_MODULES.values():
        for name in names:
            assert name in out


def test_every_command_is_in_the_command_wing() -> None:
    """One command wing: parsers are made only in engine/cli/, one module per command."""
    engine = Path(cli.__file__).parent.parent
    outside = sorted(
        str(p.relative_to(engine.parent))
        for p in engine.rglob("*.py")
        if p.parent.name != "cli" and re.search(r"\.add_parser\(|def register\(", p.read_text())
    )
    assert outside == []
    modules = {p.stem for p in (engine / "cli").glob("*.py")} - {"__init__", "__main__"}
    commands = {m.rpartition(".")[2] for m in cli.COMMAND_MODULES}
    assert modules - commands == {"args", "options"}  # the shared argument helpers


@pytest.mark.parametrize("command", ["verify", "fork", "draft"])
@pytest.mark.parametrize("jobs", ["0", "-1", "two"])
def test_jobs_below_one_are_refused_before_any_work(
    tmp_path: Path, command: str, jobs: str
) -> None:
    """Issue 28: `-j 0` / `-j -1` were accepted, a state dir was written, then Nix failed (exit
    4); now argparse refuses them (exit 2) and nothing is written."""
    import subprocess
    import sys

    trace_bin = Path(sys.executable).parent / "trace"
    repo = Path(__file__).resolve().parent.parent
    cand = repo / "tests/fixtures/fork/trace/candidates/cparse-key-overflow/candidate.toml"
    state = tmp_path / "state"
    args = {"verify": [str(cand), "--state-dir", str(state)], "fork": [], "draft": [str(cand)]}
    proc = subprocess.run(
        [str(trace_bin), command, *args[command], "-j", jobs],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "-j/--jobs" in proc.stderr and "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_verify_names_the_steps_that_did_not_build() -> None:
    """A gate whose step failed is missing from the verify table and `decide` refuses the
    candidate: `trace verify` says which steps did not build, never hides them."""
    from engine.cli.verify import unbuilt_lines
    from engine.run import RunResult, StepResult

    steps = {
        "post-fix": StepResult(id="post-fix", key="k", status="built"),
        "mutant-run@5": StepResult(
            id="mutant-run@5", key="k", status="failed", log_tail="x\nerror: lock held"
        ),
        "gate-mutation": StepResult(id="gate-mutation", key="k", status="skipped"),
    }
    assert unbuilt_lines(RunResult(graph="g", steps=steps)) == [
        "NOT BUILT mutant-run@5 (failed): error: lock held",
        "NOT BUILT gate-mutation (skipped): no log",
    ]
