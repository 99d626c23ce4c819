"""Nix's own failures are not step failures: a killed or failing nix-build (or nix-store) is
exit 4 with what Nix said; `trace plan` evaluates and blames the step (and template) of an
evaluation error, also when Nix gives no position; paths go to Nix in batches (no argv limit);
failures are reported once, printable, and a skipped step names the upstream step that failed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from engine import nix as nixmod
from engine.cli import main
from engine.graphtypes import NixConfig
from engine.nix import Nix, batches
from engine.nixreport import printable
from tests.enginekit import make_project

REAL_NIX_STORE = subprocess.run(
    ["sh", "-c", "command -v nix-store"], capture_output=True, text=True, check=False
).stdout.strip()


def shim(folder: Path, name: str, script: str) -> None:
    folder.mkdir(exist_ok=True)
    (folder / name).write_text("#!/bin/sh\n" + script)
    (folder / name).chmod(0o755)


REAL_NIX_BUILD = subprocess.run(
    ["sh", "-c", "command -v nix-build"], capture_output=True, text=True, check=False
).stdout.strip()
NO_SPACE = 'echo "error: writing to file: No space left on device" >&2; exit 1'


def primed_project(tmp: Path, steps_toml: str) -> Path:
    """A project whose state directory exists (a first run built another step): a first run
    builds from its own evaluation with nix-store --realise, a later one with nix-build."""
    first = make_project(
        tmp, f'[steps.a]\nkind = "text"\nparams = {{ message = "{uuid.uuid4()}" }}\n'
    )
    assert main(["run", str(first), "--root", str(tmp), "-q"]) == 0
    return make_project(tmp, steps_toml)


@pytest.mark.nix
@pytest.mark.parametrize("when", ["after-evaluating", "before-evaluating"])
@pytest.mark.usefixtures("own_store_lock")  # which Nix processes run: tests/conftest.py
def test_nix_failing_for_its_own_reasons_is_exit_4_with_its_stderr(
    when: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """after-evaluating: the one nix-build evaluated every step, then Nix failed; before: it
    failed before evaluating (so trace evaluates with nix-instantiate, which works, and builds
    with nix-store --realise, which fails the same way)."""
    graph = primed_project(
        tmp_path / "p", f'[steps.a]\nkind = "text"\nparams = {{ message = "{uuid.uuid4()}" }}\n'
    )
    shims = tmp_path / "shims"
    if when == "after-evaluating":
        shim(shims, "nix-build", f'{REAL_NIX_BUILD} "$@" >/dev/null\n{NO_SPACE}\n')
    else:
        shim(shims, "nix-build", NO_SPACE + "\n")
        shim(
            shims,
            "nix-store",
            f'case "$1" in --realise) {NO_SPACE};; esac\nexec {REAL_NIX_STORE} "$@"\n',
        )
    monkeypatch.setenv("PATH", f"{shims}:{os.environ['PATH']}")
    rc = main(["run", str(graph), "--root", str(graph.parent), "-q"])
    err = capsys.readouterr().err
    assert rc == 4
    assert "Nix itself failed, not a step's build" in err
    assert "No space left on device" in err and "FAILED" not in err
    program = "nix-build" if when == "after-evaluating" else "nix-store --realise"
    assert f"{program} failed with exit status 1" in err


@pytest.mark.nix
@pytest.mark.usefixtures("own_store_lock")  # which Nix processes run: tests/conftest.py
def test_nix_killed_mid_build_is_exit_4_not_step_failures(tmp_path: Path) -> None:
    graph = primed_project(
        tmp_path,
        f'[steps.slow]\nkind = "text"\nparams = {{ message = "{uuid.uuid4()}", sleep = 30 }}\n',
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "run", str(graph), "--root", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    for line in proc.stderr:  # wait until nix-build is building
        if "building" in line:
            break
    children = subprocess.run(
        ["pgrep", "-P", str(proc.pid), "-x", "nix-build"], capture_output=True, text=True
    ).stdout.split()
    assert len(children) == 1
    os.kill(int(children[0]), signal.SIGKILL)
    rest = proc.stderr.read()
    assert proc.wait(timeout=120) == 4
    assert "killed by signal 9" in rest and "Nix itself failed" in rest
    assert "FAILED slow" not in rest


def test_paths_go_to_nix_in_batches_so_any_graph_fits_argv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """100,000 dirty derivations (a fake nix-store counts what it is given per call)."""
    log = tmp_path / "calls"
    shims = tmp_path / "shims"
    shim(
        shims,
        "nix-store",
        f'n=0; for a in "$@"; do case "$a" in /nix/store/*) n=$((n+1));; esac; done\n'
        f'echo "$n" >> {log}\n'
        'case "$1" in --check-validity) exit 0;; esac\nexit 0\n',
    )
    monkeypatch.setenv("PATH", f"{shims}:{os.environ['PATH']}")
    drvs = [f"/nix/store/{i:032d}-step-{i}.drv" for i in range(100_000)]
    report = Nix(NixConfig()).realise(drvs)
    assert report.returncode == 0
    counts = [int(x) for x in log.read_text().split()]
    assert sum(counts) == 100_000 and len(counts) > 1
    assert max(counts) * (min(len(d) for d in drvs) + 1) <= nixmod.ARGV_BUDGET
    log.unlink()
    assert Nix(NixConfig()).invalid(drvs) == set()
    assert sum(int(x) for x in log.read_text().split()) == 100_000


def test_batches_keep_order_and_budget() -> None:
    paths = [f"/nix/store/{i:03d}" for i in range(50)]
    parts = batches(paths, budget=100)
    assert [p for part in parts for p in part] == paths
    assert all(sum(len(p) + 1 for p in part) <= 100 for part in parts)


@pytest.mark.nix
@pytest.mark.usefixtures("own_store_lock")  # which Nix processes run: tests/conftest.py
def test_a_graph_built_in_several_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.graph import load_graph
    from engine.run import run_graph

    salt = uuid.uuid4().hex
    steps = "".join(
        f'[steps.s{i}]\nkind = "text"\nparams = {{ message = "{salt} {i}" }}\n'
        + (f'needs = ["s{i - 1}"]\n' if i else "")
        for i in range(6)
    )
    graph = make_project(tmp_path, steps)
    monkeypatch.setattr(nixmod, "ARGV_BUDGET", 150)  # two paths per call
    # nix-build failing before it evaluates: the two-process path (nix-instantiate, then
    # nix-store --realise in batches) builds the graph
    shim(tmp_path / "shims", "nix-build", 'echo "error: not now" >&2; exit 1\n')
    monkeypatch.setenv("PATH", f"{tmp_path / 'shims'}:{os.environ['PATH']}")
    result = run_graph(load_graph(graph, root=tmp_path), tmp_path / ".trace")
    assert result.ok and {s.status for s in result.steps.values()} == {"built"}
    assert result.nix_calls == 3  # nix-build, nix-instantiate, nix-store --realise


def test_log_tails_are_printable() -> None:
    assert printable("a\x1b[2Jb\x00c\rd\x85e\u2028f\tg\nh") == (
        "a\\x1b[2Jb\\x00c\\x0dd\\x85e\\u2028f\tg\nh"
    )


@pytest.mark.nix
def test_a_failure_is_reported_once_printable_and_skips_name_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    graph = make_project(
        tmp_path,
        f"""
        [steps.bad]
        kind = "text"
        params = {{ fail = true, message = "{uuid.uuid4().hex}" }}
        [steps.after]
        kind = "text"
        needs = ["bad"]
        """,
    )
    tmpl = tmp_path / "templates" / "text.nix.j2"
    tmpl.write_text(
        tmpl.read_text().replace(
            'echo "failing on purpose',
            "printf 'esc\\033[31m nul\\000 end\\n' >&2\n  echo \"failing",
        )
    )
    rc = main(["run", str(graph), "--root", str(tmp_path)])  # progress lines on (not a tty)
    err = capsys.readouterr().err
    assert rc == 1
    said = [ln.split()[:2] for ln in err.splitlines()]
    assert sum(w in (["FAILED", "bad"], ["failed", "bad"]) for w in said) == 1, err
    assert "\x1b" not in err and "\x00" not in err and "esc\\x1b[31m nul" in err
    assert "skipped after: needs bad, which did not build" in err


PKGS_WITH_A_BROKEN_ATTR = """\
{ }:
let base = import ./base.nix { };
in base // { broken = throw "this package is broken"; }
"""


@pytest.mark.nix
def test_plan_evaluates_and_blames_the_step_without_a_position(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The error is raised inside the package set (no position in the generated file): the
    dirty steps are bisected and the one that uses the broken attribute is named."""
    steps = "".join(
        f'[steps.s{i}]\nkind = "{"uses_broken" if i == 3 else "text"}"\n'
        f'params = {{ message = "{uuid.uuid4().hex}" }}\n'
        for i in range(6)
    )
    graph = make_project(
        tmp_path,
        steps
        + '[kinds.uses_broken]\ntemplate = "templates/broken.nix.j2"\n'
        + '[kinds.uses_broken.params.message]\ntype = "string"\n',
    )
    (tmp_path / "pkgs" / "default.nix").rename(tmp_path / "pkgs" / "base.nix")
    (tmp_path / "pkgs" / "default.nix").write_text(PKGS_WITH_A_BROKEN_ATTR)
    (tmp_path / "templates" / "broken.nix.j2").write_text(
        'pkgs.runCommand {{ params.message }} { x = pkgs.broken; } "mkdir $out"\n'
    )
    rc = main(["plan", str(graph), "--root", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2
    assert "step 's3' does not evaluate" in err and "this package is broken" in err
    assert "graph.toml:" in err and "broken.nix.j2" in err
    assert not (tmp_path / ".trace").exists()
    assert main(["plan", str(graph), "--root", str(tmp_path), "--no-eval"]) == 0


@pytest.mark.nix
def test_plan_blames_the_template_line_of_a_positioned_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    graph = make_project(tmp_path, '[steps.a]\nkind = "text"\n[steps.b]\nkind = "odd"\n')
    graph.write_text(graph.read_text() + '[kinds.odd]\ntemplate = "templates/odd.nix.j2"\n')
    (tmp_path / "templates" / "odd.nix.j2").write_text(
        'pkgs.runCommand "odd" {\n  x = 1;\n  y = undefinedName;\n} "mkdir $out"\n'
    )
    start = time.monotonic()
    rc = main(["plan", str(graph), "--root", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and start
    assert "step 'b' does not evaluate (template " in err and "odd.nix.j2:3)" in err
    assert "undefinedName" in err


@pytest.mark.nix
@pytest.mark.parametrize("command", ["run", "plan"])
def test_a_store_nix_cannot_open_is_exit_4_not_a_step_that_does_not_evaluate(
    command: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A chroot store that cannot be created fails every Nix call, evaluation included: that is
    Nix's own failure (exit 4, with what Nix said), not the step's template (exit 2)."""
    graph = make_project(
        tmp_path / "p", f'[steps.a]\nkind = "text"\nparams = {{ message = "{uuid.uuid4()}" }}\n'
    )
    monkeypatch.setenv("NIX_REMOTE", f"/proc/trace-no-store-{uuid.uuid4().hex}")
    rc = main(
        [command, str(graph), "--root", str(graph.parent), "-q"][: 4 if command == "plan" else 5]
    )
    err = capsys.readouterr().err
    assert rc == 4, err
    assert "creating directory '/proc/trace-no-store-" in err
    assert "Nix itself failed" in err and "does not evaluate" not in err


@pytest.mark.nix
def test_a_builder_that_exits_0_without_its_output_is_that_steps_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nix exits 1 (not 100) when a builder succeeds without creating $out: the step failed
    (exit 1, its log shown, the step below it skipped, its sibling built), Nix did not."""
    graph = make_project(
        tmp_path,
        f"""
        [steps.empty]
        kind = "text"
        params = {{ message = "{uuid.uuid4().hex}" }}
        [steps.after]
        kind = "text"
        needs = ["empty"]
        [steps.fine]
        kind = "text"
        params = {{ message = "{uuid.uuid4().hex}" }}
        """,
    )
    tmpl = tmp_path / "templates" / "text.nix.j2"
    tmpl.write_text(
        tmpl.read_text().replace(
            "  mkdir $out\n",
            '  if [ "$stepid" = empty ]; then echo "no output made"; exit 0; fi\n  mkdir $out\n',
        )
    )
    rc = main(["run", str(graph), "--root", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 1, err
    assert "Nix itself failed" not in err
    assert "FAILED empty" in err and "no output made" in err
    assert "skipped after: needs empty, which did not build" in err
    assert "built  fine" in err
    assert "exited 0 without creating its output" in err
