"""Shared by the flake tests: a copy of trace's flake (the files git would see) and the nixpkgs
stand-in (tests/fixtures/flake-standin) made ready for this machine."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
STANDIN = REPO / "tests" / "fixtures" / "flake-standin"
FORK_FIXTURE = REPO / "tests" / "fixtures" / "fork"
NIX_TIMEOUT = 600

GIT_ENV = {
    "GIT_AUTHOR_NAME": "fork",
    "GIT_AUTHOR_EMAIL": "fork@example.invalid",
    "GIT_COMMITTER_NAME": "fork",
    "GIT_COMMITTER_EMAIL": "fork@example.invalid",
}


def run(cmd: list[str], cwd: Path, **kw: Any) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **GIT_ENV, **kw.pop("env", {})}
    env.pop("TRACE_DATA_DIR", None)
    env.pop("TRACE_CLI", None)
    return subprocess.run(
        cmd, cwd=cwd, capture_output=True, text=True, timeout=NIX_TIMEOUT, env=env, **kw
    )


def ok(cmd: list[str], cwd: Path, **kw: Any) -> str:
    proc = run(cmd, cwd, **kw)
    assert proc.returncode == 0, f"{cmd} failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
    return proc.stdout


def copy_flake_src(dest: Path) -> Path:
    """The files of this checkout git would commit (tracked, and untracked but not ignored), as
    they are in the work tree: a `path:` flake of the checkout would copy .venv into the store."""
    listed = ok(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], REPO)
    for rel in filter(None, listed.split("\0")):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


# the engine's dependencies, by their nixpkgs names (the stand-in checks some majors)
DEPENDENCIES = ("sigstore", "pydantic", "cryptography", "rich", "networkx", "jinja2", "plumbum")


def host_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found: dict[str, str] = {}
    for name in DEPENDENCIES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


def make_standin(dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    """The nixpkgs stand-in, given this environment's Python (host.json) and the host's busybox
    (bootstrap/busybox): pure flake evaluation may read neither from where they are."""
    for f in STANDIN.glob("*.nix"):
        shutil.copy2(f, dest / f.name)
    (dest / "bootstrap").mkdir()
    busybox = next(p for p in (Path("/usr/bin/busybox"), Path("/bin/busybox")) if p.exists())
    shutil.copy2(busybox, dest / "bootstrap" / "busybox")
    host = {
        "python": os.path.realpath(sys.executable),
        "sitePackages": [sysconfig.get_paths()["purelib"]],
        "bin": [str(Path(sys.executable).parent)],
        "versions": host_versions(),
    }
    (dest / "host.json").write_text(json.dumps(host, indent=2))
    return dest


def sandbox_paths() -> str:
    """What a build that runs the stand-in's trace needs to see: the host's Python and the test
    environment's site-packages (the stand-in wraps them instead of building its own)."""
    venv = Path(sysconfig.get_paths()["purelib"]).resolve()
    prefix = Path(os.path.realpath(sys.executable)).parent.parent
    paths = {"/usr", "/lib", "/lib64", "/bin", str(prefix), str(venv)}
    return " ".join(sorted(p for p in paths if Path(p).exists()))
