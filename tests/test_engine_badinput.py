"""The bad-input catalogue: one row per input. Each is refused by `trace run` with exit 2 and a
message naming what is wrong (and where), and writes nothing: no state directory, no GC-root
folder. Rows marked nix need an evaluation to find the fault."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from engine.cache import gcroot_folder
from engine.cli import main
from tests.enginekit import KINDS, make_project

STEP = '[steps.a]\nkind = "text"\n'
FLOAT_KIND = (
    '[kinds.f]\ntemplate = "templates/text.nix.j2"\n'
    '[kinds.f.params.ratio]\ntype = "float"\n[kinds.f.params.message]\ntype = "string"\n'
    '[kinds.f.params.fail]\ntype = "bool"\n[kinds.f.params.sleep]\ntype = "int"\n'
)
PLAIN_TEMPLATE = 'pkgs.runCommand "x" { } "mkdir $out"\n'


@dataclass
class Row:
    steps: str = STEP  # appended to the kinds of tests/enginekit.py
    fragment: str = ""  # must appear in the error
    where: str = "graph.toml"  # must appear too (file, and line when known)
    files: dict[str, str | bytes] = field(default_factory=dict)  # written into the project
    args: list[str] = field(default_factory=list)
    graph: str = "graph.toml"
    usage: bool = False  # refused by the argument parser (SystemExit 2)
    nix: bool = False


def kind_with(template: str) -> dict[str, str | bytes]:
    return {"templates/text.nix.j2": template}


def nix_with(line: str) -> dict[str, str | bytes]:
    """The whole graph file, with one more line in its [nix] table."""
    return {"graph.toml": KINDS.replace("[nix]\n", f"[nix]\n{line}\n") + STEP}


ROWS: dict[str, Row] = {
    # --- the file itself
    "toml-syntax": Row(steps="[steps.a\n", fragment="TOML syntax error", where="graph.toml:16"),
    "toml-duplicate-key": Row(
        steps='[steps.a]\nkind = "text"\nkind = "text"\n', fragment="TOML syntax error"
    ),
    "graph-missing": Row(graph="nope.toml", fragment="file not found", where="nope.toml"),
    "graph-is-a-directory": Row(graph="templates", fragment="is a directory", where="templates"),
    "graph-not-utf8": Row(
        files={"graph.toml": b"version = 1\n# \xff\xfe\n"}, fragment="not UTF-8", where=":2"
    ),
    "graph-deeply-nested": Row(
        files={"graph.toml": "[" + ".".join(["a"] * 5000) + "]\n"}, fragment="nested too deeply"
    ),
    "graph-deeply-nested-array": Row(
        files={"graph.toml": "a = " + "[" * 5000 + "]" * 5000 + "\n"}, fragment="nested too deep"
    ),
    "empty-file": Row(files={"graph.toml": ""}, fragment="no steps"),
    "kinds-but-no-steps": Row(steps="", fragment="no steps"),
    "only-comments": Row(files={"graph.toml": "# nothing\n"}, fragment="no steps"),
    "unknown-top-level-key": Row(steps="bogus = 1\n" + STEP, fragment="remove or rename 'bogus'"),
    "version-2": Row(files={"graph.toml": "version = 2\n"}, fragment="Input should be 1"),
    "version-string": Row(files={"graph.toml": 'version = "1"\n'}, fragment="version"),
    # --- includes
    "include-missing": Row(
        files={"graph.toml": 'include = ["nope.toml"]\n'}, fragment="'nope.toml' does not exist"
    ),
    "include-directory": Row(
        files={"graph.toml": 'include = ["templates"]\n'}, fragment="is a directory"
    ),
    "include-cycle": Row(
        files={"graph.toml": 'include = ["b.toml"]\n', "b.toml": 'include = ["graph.toml"]\n'},
        fragment="include cycle",
        where="graph.toml",
    ),
    "include-not-a-list": Row(
        files={"graph.toml": 'include = "b.toml"\n'}, fragment="valid list", where="graph.toml:1"
    ),
    "include-bad-syntax": Row(
        files={"graph.toml": 'include = ["b.toml"]\n', "b.toml": "[steps\n"},
        fragment="TOML syntax error",
        where="b.toml:1",
    ),
    "include-duplicate-step": Row(
        files={"graph.toml": 'include = ["b.toml"]\n' + STEP, "b.toml": KINDS + STEP},
        fragment="declared twice",
        where="graph.toml",
    ),
    "include-duplicate-kind": Row(
        files={
            "graph.toml": 'include = ["b.toml"]\n[kinds.text]\ntemplate = "templates/x.j2"\n',
            "b.toml": KINDS + STEP,
        },
        fragment="kind 'text' is declared twice",
    ),
    # --- kinds and templates
    "template-missing": Row(
        steps='[kinds.k]\ntemplate = "nope.nix.j2"\n', fragment="'nope.nix.j2' does not exist"
    ),
    "template-is-a-directory": Row(
        steps='[kinds.k]\ntemplate = "templates"\n', fragment="is a directory"
    ),
    "template-not-utf8": Row(
        files={"templates/text.nix.j2": b"pkgs.runCommand\n\xc3\x28\n"},
        fragment="not UTF-8",
        where="text.nix.j2:2",
    ),
    "template-syntax": Row(
        files=kind_with("pkgs.runCommand {{ step.id \n"),
        fragment="does not compile",
        where="text.nix.j2",
    ),
    "template-value-in-string": Row(
        files=kind_with('pkgs.runCommand "p-{{ step.id }}" { } "mkdir $out"\n'),
        fragment="inside a Nix string",
        where="text.nix.j2:1",
    ),
    "template-value-in-indented-string": Row(
        files=kind_with("pkgs.runCommand \"x\" { } ''\n  echo {{ params.message }}\n''\n"),
        fragment="inside a Nix ''-string",
        where="text.nix.j2:2",
    ),
    "template-value-in-block-comment": Row(
        files=kind_with("/* {{ params.message }} */\n" + PLAIN_TEMPLATE),
        fragment="inside a Nix comment",
        where="text.nix.j2:1",
    ),
    "template-value-in-line-comment": Row(
        files=kind_with("# {{ params.message }}\n" + PLAIN_TEMPLATE),
        fragment="inside a Nix comment",
        where="text.nix.j2:1",
    ),
    "template-undefined-name": Row(
        files=kind_with('pkgs.runCommand {{ params.nope }} { } "mkdir $out"\n'),
        fragment="does not render",
        where="text.nix.j2:1",
    ),
    "kind-param-bad-type": Row(
        steps='[kinds.k]\ntemplate = "templates/text.nix.j2"\n[kinds.k.params.x]\ntype = "blob"\n',
        fragment="Input should be",
    ),
    "kind-param-default-wrong-type": Row(
        steps='[kinds.k]\ntemplate = "templates/text.nix.j2"\n'
        '[kinds.k.params.x]\ntype = "int"\ndefault = "one"\n',
        fragment="default of 'x' must be an integer",
    ),
    "kind-param-required-string": Row(
        steps='[kinds.k]\ntemplate = "templates/text.nix.j2"\n'
        '[kinds.k.params.x]\ntype = "int"\nrequired = "yes"\n',
        fragment="valid boolean",
    ),
    "kind-extra-key": Row(
        steps='[kinds.k]\ntemplate = "templates/text.nix.j2"\ncolour = "red"\n',
        fragment="remove or rename 'colour'",
    ),
    "kind-check-string": Row(
        steps='[kinds.k]\ntemplate = "templates/text.nix.j2"\ncheck = "yes"\n',
        fragment="valid boolean",
    ),
    "kind-bad-name": Row(
        steps='[kinds."bad kind"]\ntemplate = "templates/text.nix.j2"\n',
        fragment="'bad kind' is not a valid name",
        where="graph.toml:16",
    ),
    # --- steps
    "step-bad-name": Row(
        steps='[steps."bad step"]\nkind = "text"\n',
        fragment="'bad step' is not a valid name",
        where="graph.toml:16",
    ),
    "step-name-starts-with-digit": Row(
        steps='[steps.1a]\nkind = "text"\n', fragment="not a valid name", where="graph.toml:16"
    ),
    "step-name-with-dot-quoted": Row(
        steps='[steps."a.b"]\nkind = "text"\n', fragment="not a valid name", where="graph.toml:16"
    ),
    "step-unknown-kind": Row(
        steps='[steps.a]\nkind = "txt"\n', fragment="unknown kind 'txt'", where="graph.toml:17"
    ),
    "step-without-kind": Row(steps="[steps.a]\n", fragment="Field required"),
    "step-kind-not-string": Row(steps="[steps.a]\nkind = 1\n", fragment="valid string"),
    "step-needs-unknown": Row(
        steps=STEP + 'needs = ["b"]\n', fragment="needs unknown step 'b'", where="graph.toml:18"
    ),
    "step-needs-not-a-list": Row(steps=STEP + 'needs = "b"\n', fragment="valid list"),
    "dependency-cycle": Row(
        steps='[steps.a]\nkind = "text"\nneeds = ["b"]\n[steps.b]\nkind = "text"\nneeds = ["a"]\n',
        fragment="dependency cycle",
    ),
    "step-needs-itself": Row(steps=STEP + 'needs = ["a"]\n', fragment="dependency cycle"),
    "step-extra-key": Row(steps=STEP + "need = []\n", fragment="remove or rename 'need'"),
    "step-check-string": Row(steps=STEP + 'check = "no"\n', fragment="valid boolean"),
    "step-description-number": Row(steps=STEP + "description = 1\n", fragment="valid string"),
    # --- params
    "param-unknown": Row(
        steps=STEP + "params = { mesage = 'x' }\n", fragment="did you mean 'message'"
    ),
    "param-string-given-int": Row(
        steps=STEP + "params = { message = 1 }\n", fragment="must be a string"
    ),
    "param-bool-given-string": Row(
        steps=STEP + 'params = { fail = "yes" }\n', fragment="must be true or false"
    ),
    "param-int-given-float": Row(
        steps=STEP + "params = { sleep = 1.5 }\n", fragment="must be an integer"
    ),
    "param-int-given-bool": Row(
        steps=STEP + "params = { sleep = true }\n", fragment="must be an integer"
    ),
    "param-int-given-string": Row(
        steps=STEP + 'params = { sleep = "2" }\n', fragment="must be an integer"
    ),
    "param-nul": Row(
        steps=STEP + 'params = { message = "a\\u0000b" }\n', fragment="NUL", where="graph.toml:18"
    ),
    "param-nan": Row(
        steps=FLOAT_KIND + '[steps.a]\nkind = "f"\nparams = { ratio = nan, message = "m" }\n',
        fragment="is nan",
    ),
    "param-inf": Row(
        steps=FLOAT_KIND + '[steps.a]\nkind = "f"\nparams = { ratio = inf, message = "m" }\n',
        fragment="is inf",
    ),
    "param-minus-inf": Row(
        steps=FLOAT_KIND + '[steps.a]\nkind = "f"\nparams = { ratio = -inf, message = "m" }\n',
        fragment="is -inf",
    ),
    "param-required-missing": Row(
        steps=FLOAT_KIND.replace('type = "string"', 'type = "string"\nrequired = true')
        + '[steps.a]\nkind = "f"\nparams = { ratio = 1.0 }\n',
        fragment="parameter 'message' of kind 'f' is required",
    ),
    "param-unknown-variable": Row(
        steps=STEP + 'params = { message = { var = "candidate.nope" } }\n',
        fragment="unknown variable 'candidate.nope'",
    ),
    "param-table-not-a-var": Row(
        steps=STEP + 'params = { message = { var = "x", y = 1 } }\n', fragment="must be a string"
    ),
    # --- repeat
    "repeat-zero": Row(steps=STEP + "repeat = 0\n", fragment="greater than or equal to 1"),
    "repeat-negative": Row(steps=STEP + "repeat = -1\n", fragment="greater than or equal to 1"),
    "repeat-true": Row(steps=STEP + "repeat = true\n", fragment="valid integer"),
    "repeat-string": Row(steps=STEP + 'repeat = "2"\n', fragment="valid integer"),
    "repeat-float": Row(steps=STEP + "repeat = 1.5\n", fragment="valid integer"),
    "repeat-huge": Row(steps=STEP + "repeat = 100000000\n", fragment="less than or equal to 10000"),
    "repeat-unknown-variable": Row(
        steps=STEP + 'repeat = { var = "n" }\n', fragment="unknown variable 'n'"
    ),
    # --- [nix]
    "jobs-zero": Row(files=nix_with("jobs = 0"), fragment="greater than or equal to 1"),
    "jobs-negative": Row(files=nix_with("jobs = -1"), fragment="greater than or equal"),
    "jobs-string": Row(files=nix_with('jobs = "2"'), fragment="valid integer"),
    "jobs-bool": Row(files=nix_with("jobs = true"), fragment="valid integer"),
    "option-sandbox": Row(
        files=nix_with('options = { sandbox = "false" }'), fragment="may not set 'sandbox'"
    ),
    "option-substituters": Row(
        steps='[nix.options]\nsubstituters = "https://x"\n' + STEP,
        fragment="may not set 'substituters'",
    ),
    "option-extra-substituters": Row(
        steps='[nix.options]\nextra-substituters = "https://x"\n' + STEP,
        fragment="may not set 'extra-substituters'",
    ),
    "option-builders": Row(
        steps='[nix.options]\nbuilders = "ssh://x"\n' + STEP, fragment="may not set 'builders'"
    ),
    "option-not-a-string": Row(steps="[nix.options]\ncores = 1\n" + STEP, fragment="valid string"),
    "sandbox-paths-not-a-list": Row(
        files=nix_with('extra_sandbox_paths = "/usr"'), fragment="valid list"
    ),
    "package-set-missing": Row(
        files={"graph.toml": '[nix]\npackage_set = "nope"\n' + STEP + 'template = "x"\n'},
        fragment="remove or rename 'template'",
    ),
    "package-set-escapes-root": Row(
        steps=STEP, files={}, fragment="escapes the project root", args=["--root", "templates"]
    ),
    # --- inputs
    "input-missing": Row(
        steps=STEP + 'inputs = { f = "nope.txt" }\n',
        fragment="input 'nope.txt' does not exist",
        where="graph.toml:18",
    ),
    "input-escapes-root": Row(
        steps=STEP + 'inputs = { f = "../../etc/hostname" }\n', fragment="escapes the project root"
    ),
    "input-absolute-outside-root": Row(
        steps=STEP + 'inputs = { f = "/etc/hostname" }\n', fragment="escapes the project root"
    ),
    "inputs-not-a-table": Row(steps=STEP + 'inputs = ["a"]\n', fragment="valid dictionary"),
    # --- the command line
    "jobs-flag-zero": Row(args=["-j", "0"], fragment="must be 1 or more", usage=True, where=""),
    "jobs-flag-negative": Row(
        args=["-j", "-1"], fragment="must be 1 or more", usage=True, where=""
    ),
    "jobs-flag-not-a-number": Row(
        args=["-j", "two"], fragment="not an integer", usage=True, where=""
    ),
    "unknown-flag": Row(args=["--frobnicate"], fragment="unrecognized", usage=True, where=""),
    "state-dir-is-a-file": Row(
        args=["--state-dir", "graph.toml"], fragment="cannot use", where="--state-dir"
    ),
    # --- found by evaluating (real nix)
    "eval-throw": Row(
        files=kind_with('throw "no such thing"\n'), fragment="step 'a' does not evaluate", nix=True
    ),
    "eval-missing-package-attribute": Row(
        files=kind_with("pkgs.noSuchThing { }\n"),
        fragment="step 'a' does not evaluate",
        where="graph.toml:16",
        nix=True,
    ),
}


def rows() -> list[object]:
    return [
        pytest.param(name, row, marks=[pytest.mark.nix] if row.nix else [], id=name)
        for name, row in ROWS.items()
    ]


def test_the_catalogue_has_at_least_70_rows() -> None:
    assert len(ROWS) >= 70


@pytest.mark.parametrize(("name", "row"), rows())
def test_bad_input_exits_2_says_what_and_writes_nothing(
    name: str,
    row: Row,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    project = tmp_path / "p"
    make_project(project, row.steps)
    for rel, content in row.files.items():
        target = project / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)
    monkeypatch.chdir(project)
    try:
        rc = main(["run", row.graph, "-q", *row.args])
    except SystemExit as exc:  # argparse refuses usage errors itself
        assert row.usage, f"{name}: unexpected SystemExit"
        rc = int(exc.code or 0)
    err = capsys.readouterr().err
    assert rc == 2, f"{name}: exit {rc}\n{err}"
    assert row.fragment in err, f"{name}: {err}"
    assert row.where in err, f"{name}: {err}"
    if not row.usage:
        assert err.startswith("trace: error: ") and "Traceback" not in err
    assert not (project / ".trace").exists(), f"{name}: wrote a state directory"
    assert not gcroot_folder(project / ".trace").exists(), f"{name}: made a GC-root folder"
