"""Helpers for engine tests: a throw-away project with a minimal package set and step kinds."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
MINIPKGS = REPO / "tests" / "fixtures" / "minipkgs"

TEXT_TEMPLATE = """\
pkgs.runCommand {{ step.id | store_name }} {
  message = {{ params.message }};
  sleep = {{ params.sleep }};
  files = {{ inputs.values() | list }};
  upstream = {{ needs.values() | list }};
  stepid = {{ step.id }};
} ''
  mkdir $out
  sleep $sleep
  printf '%s\\n' "$message" > $out/text
  for f in $files; do if [ -d $f ]; then ls $f >> $out/text; else cat $f >> $out/text; fi; done
  for u in $upstream; do cat $u/text >> $out/text; done
  {% if params.fail %}
  echo "failing on purpose: $stepid" >&2
  exit 7
  {% endif %}
''
"""

KINDS = """\
version = 1
[nix]
package_set = "pkgs"

[kinds.text]
template = "templates/text.nix.j2"
[kinds.text.params.message]
type = "string"
default = "hi"
[kinds.text.params.fail]
type = "bool"
default = false
[kinds.text.params.sleep]
type = "int"
default = 0
"""


def make_project(tmp: Path, steps_toml: str, *, salt: str = "") -> Path:
    """A project dir with pkgs/, templates/text.nix.j2 and graph.toml (KINDS + steps)."""
    tmp.mkdir(parents=True, exist_ok=True)
    shutil.copytree(MINIPKGS, tmp / "pkgs", dirs_exist_ok=True)
    (tmp / "templates").mkdir(exist_ok=True)
    (tmp / "templates" / "text.nix.j2").write_text(TEXT_TEMPLATE)
    (tmp / "graph.toml").write_text(KINDS + textwrap.dedent(steps_toml))
    if salt:
        (tmp / "pkgs" / "salt.txt").write_text(salt)
    return tmp / "graph.toml"


def layered_steps(n: int, width: int = 10, salt: str = "") -> str:
    """n steps in layers of `width`, each needing 2 of the previous layer; layer 0 reads files."""
    lines: list[str] = []
    for i in range(n):
        layer, pos = divmod(i, width)
        lines.append(f"[steps.s{i}]")
        lines.append('kind = "text"')
        lines.append(f'params = {{ message = "step {i} {salt}" }}')
        if layer == 0:
            lines.append(f'inputs = {{ data = "data/in{pos}.txt" }}')
        else:
            prev = (layer - 1) * width
            a, b = prev + pos, prev + (pos + 1) % width
            lines.append(f'needs = ["s{a}", "s{b}"]')
    return "\n".join(lines) + "\n"


def write_inputs(project: Path, width: int = 10) -> None:
    (project / "data").mkdir(exist_ok=True)
    for pos in range(width):
        (project / "data" / f"in{pos}.txt").write_text(f"input {pos}\n")


def cli(*args: str) -> tuple[int, str, str]:
    """`trace ARGS` in-process: (exit code, stdout, stderr)."""
    import contextlib
    import io

    from engine.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(args))
    return rc, out.getvalue(), err.getvalue()


def verify_bundle_process(
    bundle: Path, identity: Path, *, timeout: float, env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    """`trace verify-bundle BUNDLE --json --identity LOCK` in a subprocess whose timeout is the
    bound (a hang fails the test): (exit code, stdout, stderr)."""
    import subprocess
    import sys

    command = ["verify-bundle", str(bundle), "--json", "--identity", str(identity)]
    proc = subprocess.run(
        [sys.executable, "-m", "engine.cli", *command],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    return proc.returncode, proc.stdout, proc.stderr


def keys_of(graph: Any) -> dict[str, str]:
    """Every step's key, computed from scratch in graph order (what `plan` gives a fresh run)."""
    from engine.hashing import key_digest
    from engine.plan import components

    keys: dict[str, str] = {}
    for sid in graph.order:
        keys[sid] = key_digest(components(graph, graph.steps[sid], keys))
    return keys
