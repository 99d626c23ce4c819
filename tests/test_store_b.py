"""Issue 28: a second Nix store, for real. Machine A verifies a candidate in this machine's store
and `trace push`es its results to a signed `file://` binary cache; machine B is the same trace
in a mount namespace whose `/nix` is an empty directory (its own store and database: nothing A
built is there), trusting A's cache key in its machine config. B builds nothing: every step is
substituted from the cache, its determinism claims are taken (`checked_on` = `claim:...`) and the
verdict is A's. With the claims' signatures stripped from the cache (Nix still substitutes a
content-addressed claim unsigned; trace checks the signature itself) no claim is taken and B
re-runs those `--check` rebuilds itself. docs/machines.md says how to try it by hand."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "fixtures" / "fork"
CAND = "trace/candidates/pager-last-page/candidate.toml"
TIMEOUT = 1800

pytestmark = pytest.mark.nix


def _trace(*args: str, env: dict[str, str] | None = None, store: Path | None = None) -> Any:
    """`trace ARGS` (its JSON); with `store`, in a mount namespace whose /nix is `store`."""
    cmd = [sys.executable, "-m", "engine.cli", *args]
    if store is not None:
        inner = f'mount --bind {store} /nix && exec "$@"'
        cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", inner, "sh", *cmd]
    proc = subprocess.run(
        cmd,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def _in_store(store: Path, *cmd: str) -> str:
    inner = f'mount --bind {store} /nix && exec "$@"'
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", inner, "sh", *cmd],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    ).stdout


def _strip_signatures(cache: Path, paths: list[str]) -> None:
    """Remove the `Sig:` lines of these store paths' narinfo files in a file:// cache."""
    for path in paths:
        info = cache / f"{Path(path).name.split('-', 1)[0]}.narinfo"
        lines = info.read_text().splitlines(keepends=True)
        info.write_text("".join(ln for ln in lines if not ln.startswith("Sig:")))


@pytest.fixture(scope="module")
def machine_a(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs unshare and root (a mount namespace over /nix)")
    base = tmp_path_factory.mktemp("store-b")
    fork = base / "fork"
    shutil.copytree(FIXTURE, fork, ignore=shutil.ignore_patterns(".trace", "result*"))
    sec, pub = base / "a.sec", base / "a.pub"
    subprocess.run(
        ["nix-store", "--generate-binary-cache-key", "machine-a", str(sec), str(pub)],
        check=True,
        timeout=60,
    )
    cand = str(fork / CAND)
    a = _trace("verify", cand, "--fork", str(fork), "--state-dir", str(base / "A"), "--json")
    cache = base / "cache"
    pushed = _trace(
        "push", "--state-dir", str(base / "A"), "--to", f"file://{cache}", "--key", str(sec),
        "--json",
    )  # fmt: skip
    return {"base": base, "fork": fork, "cand": cand, "a": a, "cache": cache, "pub": pub,
            "pushed": pushed}  # fmt: skip


@pytest.mark.parametrize("claims", ["signed", "stripped"])
def test_machine_b_with_an_empty_store_substitutes_everything(
    machine_a: dict[str, Any], claims: str
) -> None:
    base: Path = machine_a["base"] / claims
    cache: Path = machine_a["cache"]
    if claims == "stripped":
        cache = base / "cache"
        shutil.copytree(machine_a["cache"], cache)
        _strip_signatures(cache, machine_a["pushed"]["claims"])
    store = base / "store" / "nix"
    (store / "store").mkdir(parents=True)
    (store / "var" / "nix").mkdir(parents=True)
    assert _in_store(store, "ls", "-A", "/nix/store") == "", "B's store starts empty"
    config = base / "machine-b.toml"
    config.write_text(
        f'substituters = ["file://{cache}"]\n'
        f"trusted-public-keys = [{json.dumps(machine_a['pub'].read_text().strip())}]\n"
    )
    b = _trace(
        "verify", machine_a["cand"], "--fork", str(machine_a["fork"]),
        "--state-dir", str(base / "B"), "--json",
        env={"TRACE_MACHINE_CONFIG": str(config)}, store=store,
    )  # fmt: skip
    a_steps, b_steps = machine_a["a"]["steps"], b["steps"]
    statuses = Counter(s["status"] for s in b_steps.values())
    assert statuses["built"] == 0 and statuses["substituted"] == len(a_steps), statuses
    assert {k: s["drv"] for k, s in b_steps.items()} == {k: s["drv"] for k, s in a_steps.items()}, (
        "the same derivations"
    )
    assert b["passed"] == machine_a["a"]["passed"] and b["reasons"] == machine_a["a"]["reasons"]
    taken = [k for k, s in b_steps.items() if str(s.get("checked_on")).startswith("claim:")]
    checked = [k for k, s in a_steps.items() if s.get("checked_on")]
    assert checked, "A made determinism claims"
    if claims == "signed":
        assert sorted(taken) == sorted(checked), "every claim taken, no --check rebuild"
    else:
        assert taken == [], "an unsigned claim is never taken"
        assert all(b_steps[k].get("checked_on") == "local" for k in checked), b_steps
