"""Remote builders (issue 17) over `ssh-ng://` to a loopback sshd this test starts and stops.

Two "machines" behind one sshd (127.0.0.1, a free high port, a throwaway host key and user key):
each is `nix-daemon --stdio` on a store root of its own (`--store DIR`), so a build sent there
really runs there (its output appears under DIR) and a `--check` there really rebuilds. The
machine config's `builders` are used as they are; `check-builders` get the determinism checks,
so `deterministic` means two machines produced the same bits, and a nondeterministic step is
caught there (Nix 2.8's own build hook would pass it: see engine/nix.py `_check_on`).

Skipped, with the reason, only where sshd is not installed or does not start.
"""

from __future__ import annotations

import contextlib
import getpass
import io
import json
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from plumbum import local

from engine.cli import main
from engine.nix import store_uri
from tests.enginekit import make_project

pytestmark = pytest.mark.nix

SSHD = Path("/usr/sbin/sshd")
SYSTEM = "x86_64-linux"


@dataclass
class Remote:
    base: Path
    ssh_config: Path

    def machine(self, name: str) -> tuple[str, Path]:
        """A builder spec's store URI for machine NAME and its store root."""
        root = self.base / f"store-{name}"
        program = self.base / f"daemon-{name}"
        program.write_text(f'#!/bin/sh\nexec nix-daemon --store "{root}" "$@"\n')
        program.chmod(0o755)
        return f"ssh-ng://trace-builder?remote-program={program}", root


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def remote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Remote]:
    if not SSHD.exists():
        pytest.skip(f"{SSHD} is not installed (scripts/setup installs openssh-server)")
    base = tmp_path_factory.mktemp("builders")
    for name in ("host", "user"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(base / name)],
            check=True,
            timeout=30,
        )
    (base / "authorized_keys").write_text((base / "user.pub").read_text())
    port = _free_port()
    (base / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {base / 'host'}\n"
        f"AuthorizedKeysFile {base / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        f"StrictModes no\nPidFile {base / 'sshd.pid'}\n"
    )
    (base / "known_hosts").write_text(f"[127.0.0.1]:{port} {(base / 'host.pub').read_text()}")
    ssh_config = base / "ssh_config"
    ssh_config.write_text(
        f"Host trace-builder\n  HostName 127.0.0.1\n  Port {port}\n  User {getpass.getuser()}\n"
        f"  IdentityFile {base / 'user'}\n  UserKnownHostsFile {base / 'known_hosts'}\n"
        "  StrictHostKeyChecking yes\n  BatchMode yes\n  ConnectTimeout 10\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
    log = (base / "sshd.log").open("w")
    proc = subprocess.Popen(
        [str(SSHD), "-D", "-e", "-f", str(base / "sshd_config")], stdout=log, stderr=log
    )
    try:
        deadline = time.monotonic() + 15
        while True:
            if proc.poll() is not None:
                pytest.skip(f"sshd did not start: {(base / 'sshd.log').read_text()[-500:]}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if time.monotonic() > deadline:
                pytest.skip(f"sshd did not listen on 127.0.0.1:{port} within 15 s")
            time.sleep(0.1)
        probe = subprocess.run(
            ["ssh", "-F", str(ssh_config), "trace-builder", "nix-daemon", "--version"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert probe.returncode == 0, probe.stderr  # sshd is up: this must work
        yield Remote(base, ssh_config)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()
        for root in base.glob("store-*"):  # store roots are read-only: make them removable
            subprocess.run(["chmod", "-R", "u+w", str(root)], timeout=60)
            shutil.rmtree(root, ignore_errors=True)


NONDET_KIND = """
[kinds.coin]
template = "templates/coin.nix.j2"
check = true
[kinds.coin.params.message]
type = "string"
default = "x"
"""

COIN = """\
pkgs.runCommand {{ step.id | store_name }} { message = {{ params.message }}; } ''
  echo "$message" > $out
  cat /proc/sys/kernel/random/uuid >> $out
''
"""


def project(base: Path) -> Path:
    """text steps a -> b (b is a check step) and a nondeterministic check step `coin`."""
    salt = uuid.uuid4().hex
    graph = make_project(
        base,
        f'[steps.a]\nkind = "text"\nparams = {{ message = "{salt}" }}\n'
        '[steps.b]\nkind = "text"\nneeds = ["a"]\ncheck = true\n'
        f'[steps.coin]\nkind = "coin"\nparams = {{ message = "{salt}" }}\n',
    )
    (base / "templates" / "coin.nix.j2").write_text(COIN)
    text = graph.read_text()
    head, sep, steps = text.partition("[steps.a]")
    graph.write_text(head + NONDET_KIND + sep + steps)
    return graph


def run(
    graph: Path, state: Path, machine: str, remote: Remote, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    config = state.parent / f"{state.name}.machine.toml"
    config.write_text(machine)
    monkeypatch.setenv("TRACE_MACHINE_CONFIG", str(config))
    monkeypatch.setenv("NIX_SSHOPTS", f"-F {remote.ssh_config}")
    out = io.StringIO()
    # plumbum (engine/nix.py) runs commands with its own copy of the environment, made when it
    # was first imported: give it the ssh options too
    with local.env(NIX_SSHOPTS=f"-F {remote.ssh_config}"), contextlib.redirect_stdout(out):
        rc = main(
            ["run", str(graph), "--root", str(graph.parent), "--state-dir", str(state), "--json"]
        )
    assert rc == 0, out.getvalue()
    return dict(json.loads(out.getvalue())["steps"])


def test_builds_run_on_the_machines_builders(
    remote: Remote, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri, root = remote.machine("one")
    graph = project(tmp_path / "p")
    steps = run(
        graph, tmp_path / "state", f'builders = ["{uri} {SYSTEM} - 2 1"]\n', remote, monkeypatch
    )
    assert {s["status"] for s in steps.values()} == {"built"}
    for sid, step in steps.items():
        assert step["built_on"] == uri, sid
        # the build ran in that machine's store, and its output came back here
        assert (root / step["out"].lstrip("/")).exists(), sid
        assert Path(step["out"]).exists()


def test_the_check_rebuild_runs_on_another_machine_and_can_fail(
    remote: Remote, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri, root = remote.machine("two")
    graph = project(tmp_path / "p")
    steps = run(
        graph, tmp_path / "state", f'check-builders = ["{uri} {SYSTEM}"]\n', remote, monkeypatch
    )
    assert {s["built_on"] for s in steps.values()} == {"local"}  # built here ...
    assert steps["b"]["checked_on"] == uri  # ... rebuilt there, bit for bit
    assert steps["b"]["deterministic"] is True
    assert (root / steps["b"]["out"].lstrip("/")).exists()
    # a step whose output differs on every build is caught by the second machine
    assert steps["coin"]["checked_on"] == uri and steps["coin"]["deterministic"] is False
    assert steps["a"]["checked_on"] is None and steps["a"]["deterministic"] is None


def test_builders_and_check_builders_are_two_machines(
    remote: Remote, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, first_root = remote.machine("first")
    second, second_root = remote.machine("second")
    graph = project(tmp_path / "p")
    machine = f'builders = ["{first} {SYSTEM} - 2 1"]\ncheck-builders = ["{second} {SYSTEM}"]\n'
    steps = run(graph, tmp_path / "state", machine, remote, monkeypatch)
    b = steps["b"]
    assert (b["built_on"], b["checked_on"], b["deterministic"]) == (first, second, True)
    assert (first_root / b["out"].lstrip("/")).exists()
    assert (second_root / b["out"].lstrip("/")).exists()


def test_the_store_uri_of_a_builder_spec() -> None:
    assert store_uri("ssh-ng://b x86_64-linux - 2 1") == "ssh-ng://b"
    assert store_uri("ssh-ng://b x86_64-linux /k/id 2") == "ssh-ng://b?ssh-key=/k/id"
    assert store_uri("ssh-ng://b?remote-program=/p x86_64-linux /k") == (
        "ssh-ng://b?remote-program=/p&ssh-key=/k"
    )
