"""engine/plainfile.py takes a whole pipeline file without pydantic only where pydantic's strict
PipelineFile would accept it and give back the very same values (the `[nix]` keys it set
included, which the merge over included files reads); anything else is left to pydantic, whose
answer and message stay the only ones a user sees. Pure logic: files drawn as TOML gives them
(tomli's types), compared with PipelineFile.model_validate of the same file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tomli
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from engine.graph import load_graph
from engine.plainfile import PlainFile, plain_file
from engine.spec import PipelineFile
from tests.tomlvalues import toml_values

VALUES = toml_values(text=6, ints=(-2, 3), leaves=5)
NAMES = st.one_of(st.sampled_from(["a", "b_1", "c-d", "_e"]), st.text(max_size=4))


def _maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly the right shape, sometimes any TOML value: near misses of every key."""
    return st.one_of(strategy, strategy, VALUES)


NIX = st.fixed_dictionaries(
    {},
    optional={
        "package_set": _maybe(st.one_of(st.text(max_size=4), st.just({"var": "fork.root"}))),
        "package_set_exclude": _maybe(st.lists(st.text(max_size=4), max_size=2)),
        "extra_sandbox_paths": _maybe(st.lists(st.text(max_size=4), max_size=2)),
        "options": _maybe(
            st.dictionaries(
                st.sampled_from(["cores", "max-jobs", "timeout", "x"]),
                st.sampled_from(["0", "1", "2", "auto", "-1", "²", "a", ""]),
                max_size=2,
            )
        ),
        "jobs": _maybe(st.integers(-1, 3)),
        "colour": VALUES,
    },
)
PARAM = st.fixed_dictionaries(
    {},
    optional={
        "type": _maybe(
            st.sampled_from(
                ["string", "int", "bool", "float", "path", "strings", "paths", "list", "String"]
            )
        ),
        "default": VALUES,
        "required": _maybe(st.booleans()),
        "description": _maybe(st.text(max_size=3)),
        "x": VALUES,
    },
)
KIND = st.fixed_dictionaries(
    {},
    optional={
        "template": _maybe(st.text(max_size=5)),
        "description": _maybe(st.text(max_size=3)),
        "params": _maybe(st.dictionaries(st.text(max_size=3), PARAM, max_size=2)),
        "inputs": _maybe(st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2)),
        "check": _maybe(st.booleans()),
        "repeat": VALUES,
    },
)
STEP = st.fixed_dictionaries(
    {"kind": _maybe(st.text(max_size=3))},
    optional={
        "needs": _maybe(st.lists(st.text(max_size=3), max_size=2)),
        "inputs": _maybe(st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2)),
        "params": _maybe(st.dictionaries(st.text(max_size=3), VALUES, max_size=2)),
        "repeat": st.integers(0, 3),
    },
)
FILES = st.fixed_dictionaries(
    {},
    optional={
        "version": _maybe(st.sampled_from([1, 1.0, True, 2, "1"])),
        "include": _maybe(st.lists(st.text(max_size=4), max_size=2)),
        "nix": _maybe(NIX),
        "kinds": _maybe(st.dictionaries(NAMES, KIND, max_size=2)),
        "steps": _maybe(st.dictionaries(NAMES, STEP, max_size=3)),
        "extra": VALUES,
    },
)


# right shapes throughout (names, types, constraints still drawn): plain files drawn often
SHAPED = st.fixed_dictionaries(
    {"version": st.just(1)},
    optional={
        "include": st.lists(st.text(max_size=4), max_size=2),
        "nix": st.fixed_dictionaries(
            {},
            optional={
                "package_set": st.text(max_size=3),
                "extra_sandbox_paths": st.lists(st.text(max_size=4), max_size=2),
                "options": st.dictionaries(
                    st.sampled_from(["cores", "max-jobs", "timeout"]),
                    st.sampled_from(["0", "1", "auto"]),
                    max_size=2,
                ),
                "jobs": st.integers(0, 3),
            },
        ),
        "kinds": st.dictionaries(
            NAMES,
            st.fixed_dictionaries(
                {"template": st.text(max_size=3)},
                optional={
                    "params": st.dictionaries(
                        st.text(max_size=3),
                        st.fixed_dictionaries(
                            {"type": st.sampled_from(["string", "int", "paths", "x"])},
                            optional={"default": VALUES, "required": st.booleans()},
                        ),
                        max_size=2,
                    ),
                    "check": st.booleans(),
                },
            ),
            max_size=2,
        ),
        "steps": st.dictionaries(
            NAMES, st.fixed_dictionaries({"kind": st.text(max_size=3)}), max_size=3
        ),
    },
)


def _pydantic(raw: dict[str, Any]) -> PipelineFile | None:
    try:
        return PipelineFile.model_validate(raw)
    except ValidationError:
        return None


def _dump(plain: PlainFile) -> dict[str, Any]:
    """A PlainFile as `model_dump()` gives the PipelineFile of the same file."""

    def fields(obj: Any, **extra: Any) -> dict[str, Any]:
        return {f: getattr(obj, f) for f in obj.FIELDS} | extra

    nix = plain.nix
    return {
        "version": plain.version,
        "include": plain.include,
        "nix": None if nix is None else fields(nix),
        "kinds": {
            name: fields(k, params={p: fields(v) for p, v in k.params.items()})
            for name, k in plain.kinds.items()
        },
        "steps": {sid: fields(s, repeat=1) for sid, s in plain.steps.items()},
    }


def _check_same(raw: dict[str, Any]) -> bool:
    """Whether `raw` was taken without pydantic; if so, pydantic must give the same file."""
    plain = plain_file(raw)
    if plain is None:
        return False
    spec = _pydantic(raw)
    assert spec is not None, f"taken without pydantic, refused by it: {raw!r}"
    assert _dump(plain) == spec.model_dump(), (raw, _dump(plain), spec.model_dump())
    if plain.nix is not None:  # what a merge over the included files takes from each
        assert spec.nix is not None
        assert plain.nix.set_fields() == spec.nix.model_dump(exclude_unset=True)
    return True


@settings(max_examples=600, deadline=None)
@given(raw=st.one_of(FILES, SHAPED))
def test_a_plain_file_is_one_pydantic_accepts_with_the_same_values(raw: dict[str, Any]) -> None:
    _check_same(raw)


def _toml_files() -> list[Path]:
    root = Path(__file__).resolve().parent.parent
    return sorted(p for d in ("graphs", "tests", "nix", "docs") for p in (root / d).rglob("*.toml"))


def test_the_project_s_own_pipeline_files_agree() -> None:
    """Every pipeline file the project ships or tests with: plain or not, the same answer."""
    taken = set()
    for path in _toml_files():
        raw = tomli.loads(path.read_text())
        if ("steps" in raw or "kinds" in raw) and _check_same(raw):
            taken.add(path.relative_to(path.parents[1]).as_posix())
    # the example and a fork's own steps are plain; verify.toml's `{ var = ... }`s are not
    assert {"graphs/example.toml", "trace/steps.toml"} <= taken, taken


@pytest.mark.parametrize(
    "toml",
    [
        'version = 1\n[kinds.k]\ntemplate = "t"\n[steps.s]\nkind = "k"',
        '[nix]\npackage_set = "pkgs"\nextra_sandbox_paths = ["/usr"]\noptions = { cores = "0" }\n'
        'jobs = 2\n[kinds.k]\ntemplate = "t"\nparams = { n = { type = "int", default = 3 } }',
        'include = ["other.toml"]\n[steps.s]\nkind = "k"\nneeds = ["t"]\ncheck = true',
    ],
)
def test_plainly_valid_files_are_taken_as_pydantic_gives_them(toml: str) -> None:
    assert _check_same(tomli.loads(toml))


@pytest.mark.parametrize(
    "toml",
    [
        "version = true",  # strict: the integer 1 only
        'version = 1\n[nix]\npackage_set = { var = "fork.root" }',  # a VarRef
        '[nix]\npackage_set = ""',  # min_length
        "[nix]\njobs = 0",
        '[nix]\noptions = { max-jobs = "0" }',
        '[nix]\noptions = { cores = "²" }',  # a digit, not an ASCII number
        '[kinds.k]\ntemplate = "t"\nparams = { n = { type = "list" } }',
        '[kinds.k]\ndescription = "no template"',
        '[kinds."bad name"]\ntemplate = "t"',
        '[steps.s]\nkind = "k"\nrepeat = 2',
        '[steps."9s"]\nkind = "k"',
        'colour = "red"',
    ],
)
def test_anything_else_is_left_to_pydantic(toml: str) -> None:
    assert plain_file(tomli.loads(toml)) is None


def test_a_plain_graph_loads_as_the_validated_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same graph, its files plain or forced through pydantic: the same Graph."""
    (tmp_path / "t.nix.j2").write_text(
        "pkgs.runCommand {{ step.id | store_name }} {} ''touch $out''\n"
    )
    (tmp_path / "inc.toml").write_text(
        'version = 1\n[nix]\noptions = { cores = "1" }\nextra_sandbox_paths = ["/a"]\n'
        '[kinds.k]\ntemplate = "t.nix.j2"\nparams = { n = { type = "int", default = 1 } }\n'
    )
    (tmp_path / "g.toml").write_text(
        'version = 1\ninclude = ["inc.toml"]\n[nix]\njobs = 2\nextra_sandbox_paths = ["/b"]\n'
        '[steps.a]\nkind = "k"\n[steps.b]\nkind = "k"\nneeds = ["a"]\nparams = { n = 2 }\n'
    )
    plain = load_graph(tmp_path / "g.toml", root=tmp_path)
    monkeypatch.setattr("engine.graphfile.plain_file", lambda raw: None)
    validated = load_graph(tmp_path / "g.toml", root=tmp_path)
    assert plain == validated
    assert plain.nix.extra_sandbox_paths == ["/a", "/b"] and plain.nix.jobs == 2


def test_a_first_run_of_a_plain_graph_imports_no_pydantic(tmp_path: Path) -> None:
    """`trace plan` of a plainly valid graph (no state, nothing cached) loads it without
    pydantic: its import and schema were most of a first run's own time (issue 30)."""
    (tmp_path / "t.nix.j2").write_text(
        "pkgs.runCommand {{ step.id | store_name }} {} ''touch $out''\n"
    )
    (tmp_path / "g.toml").write_text(
        'version = 1\n[kinds.k]\ntemplate = "t.nix.j2"\n[steps.a]\nkind = "k"\n'
    )
    probe = (
        "import sys; from engine.cli import main; rc = main(sys.argv[1:]); "
        "print(rc, 'pydantic' in sys.modules)"
    )
    args = ["plan", str(tmp_path / "g.toml"), "--root", str(tmp_path), "--no-eval"]
    proc = subprocess.run(
        [sys.executable, "-c", probe, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.stdout.splitlines()[-1] == "0 False", proc.stdout + proc.stderr
