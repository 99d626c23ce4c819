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
from engine.graphtypes import NixConfig
from engine.machine import Machine
from engine.nix import Nix, check_groups, store_uri
from tests.enginekit import make_project

pytestmark = pytest.mark.nix

SSHD = Path("/usr/sbin/sshd")
SYSTEM = "x86_64-linux"


@dataclass
class Remote:
    base: Path
    ssh_config: Path

    def machine(self, name: str) -> tuple[str, Path]:
        """A builder spec's store URI for machine NAME and its store root.

        The machine has a Nix configuration of its own (NIX_CONF_DIR), as a builder does: the
        sandbox on, no substituters, and the host paths the fixture fork's builds use (its
        trace.toml's extra-sandbox-paths: a builder must provide what the builds need)."""
        root = self.base / f"store-{name}"
        conf = self.base / f"conf-{name}"
        conf.mkdir(exist_ok=True)
        (conf / "nix.conf").write_text(
            "sandbox = true\nsubstituters =\nextra-sandbox-paths = /usr /lib64 /bin /lib\n"
        )
        program = self.base / f"daemon-{name}"
        program.write_text(
            f'#!/bin/sh\nNIX_CONF_DIR="{conf}" exec nix-daemon --store "{root}" "$@"\n'
        )
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
    """Every build on `first` (max-jobs = 0: none here); both machines are check builders, and a
    step is --checked on the one that did NOT build it."""
    first, first_root = remote.machine("first")
    second, second_root = remote.machine("second")
    graph = project(tmp_path / "p")
    machine = (
        f'builders = ["{first} {SYSTEM} - 2 1"]\nmax-jobs = 0\n'
        f'check-builders = ["{first} {SYSTEM}", "{second} {SYSTEM}"]\n'
    )
    steps = run(graph, tmp_path / "state", machine, remote, monkeypatch)
    assert {s["built_on"] for s in steps.values()} == {first}
    for sid in ("b", "coin"):
        assert (steps[sid]["built_on"], steps[sid]["checked_on"]) == (first, second), sid
        assert (first_root / steps[sid]["out"].lstrip("/")).exists()
        assert (second_root / steps[sid]["out"].lstrip("/")).exists()
    assert steps["b"]["deterministic"] is True and steps["coin"]["deterministic"] is False
    # the next run's cached results still say where they were made and checked
    again = run(graph, tmp_path / "state", machine, remote, monkeypatch)
    assert {s["status"] for s in again.values()} == {"cached"}
    assert again["b"]["built_on"] == first and again["b"]["checked_on"] == second


def test_check_rebuilds_go_to_a_check_builder_that_did_not_build_the_step() -> None:
    a, b, c = (f"ssh-ng://{h} {SYSTEM}" for h in "abc")
    drvs = [f"/nix/store/{i:032d}-s.drv" for i in range(40)]
    # built on a: never checked on a
    assert set(check_groups(drvs, [a, b], dict.fromkeys(drvs, "ssh-ng://a"))) == {b}
    # built here: spread over every check builder, the same way on every run
    spread = check_groups(drvs, [a, b, c], dict.fromkeys(drvs, "local"))
    assert set(spread) == {a, b, c} and sum(map(len, spread.values())) == len(drvs)
    assert spread == check_groups(drvs, [a, b, c], {})
    # one check builder, which built it too: checked there (the best there is)
    assert check_groups(drvs[:1], [a], {drvs[0]: "ssh-ng://a"}) == {a: drvs[:1]}


def test_max_jobs_zero_sends_builds_and_checks_to_the_builders() -> None:
    spec = f"ssh-ng://a {SYSTEM}"
    machine = Machine(builders=[spec], max_jobs=0)
    assert machine.check_pool() == [spec]
    assert Nix(NixConfig(jobs=3), machine=machine).jobs == 0  # the machine's over a pipeline's
    assert Nix(NixConfig(), 2, machine=machine).jobs == 2  # -j over the machine's
    checking = Machine(builders=[spec], check_builders=["b"])
    assert checking.check_pool() == ["b"] and Machine(builders=[spec]).check_pool() == []


def test_the_store_uri_of_a_builder_spec() -> None:
    assert store_uri("ssh-ng://b x86_64-linux - 2 1") == "ssh-ng://b"
    assert store_uri("ssh-ng://b x86_64-linux /k/id 2") == "ssh-ng://b?ssh-key=/k/id"
    assert store_uri("ssh-ng://b?remote-program=/p x86_64-linux /k") == (
        "ssh-ng://b?remote-program=/p&ssh-key=/k"
    )


# ---- a whole verify on a remote builder ----

FORK = Path(__file__).resolve().parent / "fixtures" / "fork"
CAND = "trace/candidates/pager-last-page/candidate.toml"


def _cli(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(list(args))
    return rc, out.getvalue()


def test_a_verify_runs_on_the_builder_with_the_verdict_of_a_local_one(
    remote: Remote, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fixture fork's candidate, verified on a machine that builds nothing itself
    (`max-jobs = 0`): every build runs on the builder (its own store has the output AND the
    build log, which only a build there writes), the determinism check is rebuilt there too,
    and the result, bundled, names the machines. Its outputs deleted here, the same candidate
    verified by this machine alone reaches the same verdict from the same derivations."""
    from engine.verify.cached import evidence_view
    from engine.verify_result import VerifyResult
    from tests.storekit import delete_outputs

    uri, root = remote.machine("verify")
    fork = tmp_path / "fork"
    shutil.copytree(FORK, fork, ignore=shutil.ignore_patterns(".trace", "result*"))
    (fork / "pkgs" / "pager" / "src" / "SALT").write_text(uuid.uuid4().hex + "\n")
    cand, state = str(fork / CAND), tmp_path / "remote-state"
    config = tmp_path / "machine.toml"
    config.write_text(f'builders = ["{uri} {SYSTEM} - 4 1"]\nmax-jobs = 0\n')
    monkeypatch.setenv("TRACE_MACHINE_CONFIG", str(config))
    monkeypatch.setenv("NIX_SSHOPTS", f"-F {remote.ssh_config}")
    with local.env(NIX_SSHOPTS=f"-F {remote.ssh_config}"):
        rc, out = _cli("verify", cand, "--fork", str(fork), "--state-dir", str(state), "--json")
        assert rc == 0, out
        there = VerifyResult.model_validate_json(out)
        rc, table = _cli("verify", cand, "--fork", str(fork), "--state-dir", str(state))
        assert rc == 0
    assert there.passed and there.deterministic is True
    built = {sid: s for sid, s in there.steps.items() if s.status == "built"}
    # the package builds, their runs, the gates' builds and runs all ran there
    ran = {"pre-fix", "post-fix", "pre-fix-run", "post-fix-run", "variant-pre", "variant-post"}
    ran |= {"tests-pre", "tests-post", "gate-variants", "gate-mutation", "expectation"}
    assert ran <= {sid.split("@")[0] for sid in built}, sorted(built)
    assert {s.built_on for s in built.values()} == {uri}
    for sid, step in built.items():
        assert step.out and (root / step.out.lstrip("/")).exists(), sid
        assert step.drv
        log = subprocess.run(
            ["nix-store", "--store", str(root), "--read-log", step.drv],
            capture_output=True,
            timeout=60,
        )
        assert log.returncode == 0, (sid, log.stderr)
    checked = {sid: s for sid, s in there.steps.items() if s.checked_on}
    assert "post-fix" in checked and {s.checked_on for s in checked.values()} == {uri}
    # the verify table names the machine (a cached re-run keeps where its results were made)
    assert f"built on: {uri}" in table and f"--check rebuilt on: {uri}" in table

    # bundled: the statement's runDetails name the machines; the payload does not
    rc, _ = _cli("keygen", str(tmp_path / "signer"))
    assert rc == 0
    bundle = tmp_path / "bundle"
    with local.env(NIX_SSHOPTS=f"-F {remote.ssh_config}"):  # its --check rebuild runs there too
        rc, out = _cli(
            "bundle", cand, "--fork", str(fork), "--state-dir", str(state), "--out", str(bundle),
            "--key", str(tmp_path / "signer"), "--today", "2026-12-01",
        )  # fmt: skip
    assert rc == 0, out
    statement = json.loads((bundle / "statement.json").read_text())
    where = {
        b["name"].removeprefix("machine:"): b["annotations"]
        for b in statement["predicate"]["runDetails"]["byproducts"]
    }
    assert where["post-fix"] == {"trace.builtOn": uri, "trace.checkedOn": uri}
    assert where["pre-fix"] == {"trace.builtOn": uri}
    assert "built_on" not in (bundle / "payload" / "verify-result.json").read_text()
    rc, out = _cli(
        "verify-bundle", str(bundle), "--key", str(tmp_path / "signer.pub"), "--fork", str(fork)
    )
    assert rc == 0, out

    # this machine alone: nothing remote, its own builds, the same verdict
    delete_outputs(state)
    monkeypatch.setenv("TRACE_MACHINE_CONFIG", "")
    rc, out = _cli(
        "verify", cand, "--fork", str(fork), "--state-dir", str(tmp_path / "local"), "--json"
    )
    assert rc == 0, out
    here = VerifyResult.model_validate_json(out)
    assert {s.built_on for s in here.steps.values() if s.status == "built"} == {"local"}
    assert {sid for sid, s in here.steps.items() if s.status == "built"} >= {"pre-fix", "post-fix"}
    assert evidence_view(here) == evidence_view(there)
