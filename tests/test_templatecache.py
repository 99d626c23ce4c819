"""Compiled templates kept between processes (engine/templatecache.py, engine/render.py): a
second process loads the code instead of compiling; a cached code object is used only when its
MAC checks out and its name digests the template's text, name, jinja2's version, the bytecode
magic and the environment's options; anything else is compiled afresh, never a wrong render."""

from __future__ import annotations

import marshal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from engine import render, templatecache

TEXT = 'pkgs.runCommand {{ step.id | store_name }} { note = {{ params.note }}; } "x"\n'
CTX: dict[str, Any] = {"step": {"id": "s"}, "params": {"note": 'a"b'}}


@pytest.fixture
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.setattr(render, "_COMPILED", {})
    return tmp_path


def _key(text: str = TEXT, name: str = "t.nix.j2") -> str:
    import jinja2

    return templatecache.name(text, name, jinja2.__version__, render.ENV_OPTIONS)


def test_a_second_compile_loads_the_stored_code(state_home: Path, monkeypatch: Any) -> None:
    first = render.render(TEXT, "t.nix.j2", CTX)
    assert first == 'pkgs.runCommand "s" { note = "a\\"b"; } "x"\n'
    assert (state_home / "trace" / "templates" / _key()).is_file()
    render._COMPILED.clear()  # as in a new process

    def no_compile(*a: Any, **k: Any) -> Any:
        raise AssertionError("compiled although its code was stored")

    monkeypatch.setattr(render.environment(), "compile", no_compile)
    assert render.render(TEXT, "t.nix.j2", CTX) == first


def test_a_forged_or_torn_entry_is_compiled_afresh(state_home: Path) -> None:
    """Adversarial: code for another template written under this template's name, with a MAC
    made without the user's secret, then a file cut short: neither is ever run."""
    render.render(TEXT, "t.nix.j2", CTX)
    other = render.environment().compile('"forged {{ params.note }}"\n')
    path = state_home / "trace" / "templates" / _key()
    payload = marshal.dumps(other)
    path.write_bytes(templatecache._mac(b"x" * 32, _key(), payload).encode() + payload)
    assert templatecache.load(_key()) is None
    render._COMPILED.clear()
    assert "forged" not in render.render(TEXT, "t.nix.j2", CTX)
    path.write_bytes(path.read_bytes()[:80])  # torn
    assert templatecache.load(_key()) is None
    render._COMPILED.clear()
    assert render.render(TEXT, "t.nix.j2", CTX).startswith('pkgs.runCommand "s"')


def test_the_name_digests_what_the_code_depends_on() -> None:
    import jinja2

    base = _key()
    assert len({base, _key(TEXT + " "), _key(name="u.nix.j2")}) == 3
    assert templatecache.name(TEXT, "t.nix.j2", "0.0", render.ENV_OPTIONS) != base
    assert templatecache.name(TEXT, "t.nix.j2", jinja2.__version__, "other") != base


def test_an_edited_template_is_never_rendered_from_the_old_code(state_home: Path) -> None:
    """Two processes in a row, the template edited between them: the second renders the edit
    (the cache is keyed by text), and a third (unchanged text) renders it from the cache."""
    script = (
        "import sys; from engine import render; "
        "print(render.render(sys.argv[1], 't.nix.j2', {'params': {'note': 'n'}}), end='')"
    )
    env = {"XDG_STATE_HOME": str(state_home), "PATH": "/usr/bin:/bin"}

    def run(text: str) -> str:
        out = subprocess.run(
            [sys.executable, "-c", script, text], env=env, capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
        return out.stdout

    assert run("a {{ params.note }}\n") == 'a "n"\n'
    assert run("b {{ params.note }}\n") == 'b "n"\n'
    assert len(list((state_home / "trace" / "templates").iterdir())) == 2
    assert run("b {{ params.note }}\n") == 'b "n"\n'
