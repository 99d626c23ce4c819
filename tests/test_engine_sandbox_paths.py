"""What the sandbox exposes of the host enters keys and derivations (issue 28, item 1).

Real builds: a step that reads a host file through `[nix] extra_sandbox_paths` is rebuilt (not
`reused`: a new derivation) when that file changes, appears or goes, and its result is the new
one; steps of a graph that exposes no host path, and every step when nothing behind the paths
changed, are answered from the index. Unit tests pin the identity's sensitivity."""

from __future__ import annotations

import os
import textwrap
import uuid
from pathlib import Path

import pytest

from engine import hostpaths
from engine.graph import load_graph
from engine.run import RunResult, run_graph
from tests.enginekit import make_project

TOOL_TEMPLATE = """\
pkgs.runCommand {{ step.id | store_name }} {
  tool = {{ params.tool }};
  upstream = {{ needs.values() | list }};
  salt = {{ params.salt }};
} ''
  mkdir $out
  if [ -e "$tool" ]; then cat "$tool" > $out/text; else echo "tool missing" > $out/text; fi
  for u in $upstream; do cat $u/text >> $out/text; done
''
"""


def project(tmp: Path, tools: Path | None, name: str) -> Path:
    """A graph of two steps (`use`, and `after` which needs it) reading TOOLS/version."""
    salt = uuid.uuid4().hex
    sandbox = f"extra_sandbox_paths = [{str(tools)!r}]\n" if tools else ""
    steps = textwrap.dedent(
        f"""\
        [kinds.tool]
        template = "templates/tool.nix.j2"
        [kinds.tool.params.tool]
        type = "string"
        [kinds.tool.params.salt]
        type = "string"
        [steps.use]
        kind = "tool"
        params = {{ tool = "{tools or "/nonexistent"}/version", salt = "{salt}" }}
        [steps.after]
        kind = "tool"
        needs = ["use"]
        params = {{ tool = "/nonexistent", salt = "{salt}" }}
        """
    )
    graph = make_project(tmp / name, steps)
    (graph.parent / "templates" / "tool.nix.j2").write_text(TOOL_TEMPLATE)
    text = graph.read_text().replace('package_set = "pkgs"\n', f'package_set = "pkgs"\n{sandbox}')
    graph.write_text(text)
    return graph


def build(graph: Path, state: Path) -> RunResult:
    return run_graph(load_graph(graph, root=graph.parent), state)


def status(result: RunResult) -> dict[str, str]:
    return {sid: s.status for sid, s in result.steps.items()}


def text(result: RunResult, sid: str) -> str:
    out = result.steps[sid].out
    assert out is not None
    return (Path(out) / "text").read_text()


@pytest.mark.nix
def test_changing_the_tool_behind_a_sandbox_path_rebuilds_the_steps_that_see_it(
    tmp_path: Path,
) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    state = tmp_path / "state"
    seeing = project(tmp_path, tools, "seeing")
    blind = project(tmp_path, None, "blind")

    first = build(seeing, state)  # the tool is not there yet: its absence is the result
    assert status(first) == {"use": "built", "after": "built"}
    assert text(first, "use").startswith("tool missing")
    assert status(build(blind, state)) == {"use": "built", "after": "built"}

    (tools / "version").write_text("tool v1\n")  # the tool appears
    second = build(seeing, state)
    assert status(second) == {"use": "built", "after": "built"}  # not 'reused'
    assert text(second, "use") == "tool v1\n"
    assert text(second, "after") == "tool missing\ntool v1\n"
    assert second.steps["use"].drv != first.steps["use"].drv
    assert "extra_sandbox_paths" in " ".join(second.steps["use"].reasons)

    (tools / "version").write_text("tool v2\n")  # the tool changes in place
    third = build(seeing, state)
    assert status(third) == {"use": "built", "after": "built"}
    assert text(third, "use") == "tool v2\n"

    # nothing behind the paths changed: reused from the index, as is the graph that sees none
    (tmp_path / "elsewhere.txt").write_text("not exposed\n")
    assert status(build(seeing, state)) == {"use": "cached", "after": "cached"}
    assert status(build(blind, state)) == {"use": "cached", "after": "cached"}

    (tools / "version").unlink()  # the tool goes: its absence again, and nothing stale
    fourth = build(seeing, state)
    assert status(fourth) == {"use": "built", "after": "built"}
    assert text(fourth, "use").startswith("tool missing")


@pytest.mark.nix
def test_every_derivation_of_a_step_carries_the_identity(tmp_path: Path) -> None:
    """Not only the step's own derivation: the package set's and the files it imports."""
    from engine.expression import build as build_expr

    tools = tmp_path / "tools"
    tools.mkdir()
    graph = load_graph(project(tmp_path, tools, "p"), root=tmp_path / "p")
    ident = graph.nix.sandbox_identity
    assert ident is not None
    expr = build_expr(graph, dict.fromkeys(graph.order, "k"), ["use"]).text
    assert f'{hostpaths.ATTRIBUTE} = "{ident}"' in expr
    assert "scopedImport" in expr
    assert (
        hostpaths.ATTRIBUTE
        not in build_expr(
            load_graph(project(tmp_path, None, "q"), root=tmp_path / "q"),
            dict.fromkeys(["use", "after"], "k"),
            ["use"],
        ).text
    )


def test_identity_follows_the_files_behind_the_paths(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    (tools / "bin").mkdir(parents=True)
    tool = tools / "bin" / "cc"
    tool.write_text("one\n")
    paths = [str(tools)]
    base = hostpaths.identity(paths)
    assert base == hostpaths.identity(paths)  # stable
    assert hostpaths.identity([]) is None
    tool.write_text("two\n")  # same size, new mtime
    edited = hostpaths.identity(paths)
    assert edited != base
    st = tool.stat()
    tool.write_text("six\n")
    os.utime(tool, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime set back: the ctime moved
    assert hostpaths.identity(paths) != edited
    now = hostpaths.identity(paths)
    tool.chmod(0o755)
    assert hostpaths.identity(paths) != now
    now = hostpaths.identity(paths)
    (tools / "bin" / "gcc").symlink_to("cc")
    assert hostpaths.identity(paths) != now
    now = hostpaths.identity(paths)
    assert hostpaths.identity([*paths, "/nonexistent?"]) != now  # the list itself counts
    assert hostpaths.identity([f"/opt/tools={tools}"]) != now


def test_a_declared_file_enters_by_its_content(tmp_path: Path) -> None:
    tool = tmp_path / "cc"
    tool.write_text("one\n")
    st = tool.stat()
    before = hostpaths.signature(str(tool))
    tool.write_text("two\n")
    os.utime(tool, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = hostpaths.signature(str(tool))
    assert before[1][-1] != after[1][-1]  # the content digest


def test_sources_as_nix_reads_them() -> None:
    assert hostpaths.source_of("/usr") == ("/usr", False)
    assert hostpaths.source_of("/bin/sh=/nix/store/x-busybox/bin/sh") == (
        "/nix/store/x-busybox/bin/sh",
        False,
    )
    assert hostpaths.source_of("/opt/x?") == ("/opt/x", True)
