"""Issue 14 (fork half): `trace fork` asks once per run what it used to ask per candidate (the
Nix version and system, the git state, the package set's digest), and a run after a no-op still
sees every real change (an edit that keeps the mtime, a changed policy).

Counting is by a PATH shim: each of nix, nix-instantiate, nix-store and git logs its arguments and
then runs the real tool. Timings live in bench/fork_bench.py, never here."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import engine.hashing as hashing
from engine.fork.config import ForkConfig, Source
from engine.fork.once import RunOnce, head
from engine.hashing import StatCache, tree_digest
from tests.test_flake_fork import fixture_fork, git

TOOLS = ("nix", "nix-instantiate", "nix-store", "nix-build", "git")


def shim(dir_: Path, log: Path, *, fail: tuple[str, ...] = ()) -> dict[str, str]:
    """An environment whose PATH logs every call of TOOLS (those in `fail` exit 1 instead)."""
    dir_.mkdir(parents=True, exist_ok=True)
    for tool in TOOLS:
        real = shutil.which(tool)
        then = "exit 1" if tool in fail or real is None else f'exec {real} "$@"'
        script = dir_ / tool
        script.write_text(f'#!/bin/sh\necho "{tool} $*" >> {log}\n{then}\n')
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return {**os.environ, "PATH": f"{dir_}:{os.environ['PATH']}"}


def calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.is_file() else []


# ---- unit: one walk per run; a new run sees an edit that kept its mtime -----------------------


def test_a_tree_is_walked_once_per_run_and_a_new_run_sees_an_edit_that_kept_its_mtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = tmp_path / "pkgs"
    (tree / "a").mkdir(parents=True)
    for i in range(20):
        (tree / "a" / f"f{i}.c").write_text(f"int f{i} = {i};\n")
    old = tree / "a" / "f3.c"
    past = 1_600_000_000_000_000_000
    os.utime(old, ns=(past, past))  # old enough to be remembered (not racily clean)
    walks: list[Path] = []
    real_walk = hashing._walk

    def counting(root: Path, rel: str = "", exclude: frozenset[str] = frozenset()):  # type: ignore[no-untyped-def]
        if rel == "":
            walks.append(root)
        return real_walk(root, rel, exclude)

    monkeypatch.setattr(hashing, "_walk", counting)
    db = tmp_path / "state.db"
    import sqlite3

    conn = sqlite3.connect(db)
    run1 = StatCache.read_only(db, remember_trees=True)
    first = tree_digest(tree, run1, ["a/f0.c"])
    for _ in range(49):  # 50 candidates, one run
        assert tree_digest(tree, run1, ["a/f0.c"]) == first
    assert walks == [tree], "one package-set walk per run, whatever the candidate count"
    assert tree_digest(tree, run1) != first, "another exclude list is another digest"
    run1.flush(conn)
    conn.commit()

    # the attack: same size, same mtime, different bytes
    old.write_text(old.read_text().replace("3", "9"))
    os.utime(old, ns=(past, past))
    run2 = StatCache.read_only(db, remember_trees=True)
    assert tree_digest(tree, run2, ["a/f0.c"]) != first, "the next run rehashes (ctime moved)"
    # a cache made without remember_trees walks every time (every command but `trace fork`)
    plain = StatCache()
    walks.clear()
    tree_digest(tree, plain)
    tree_digest(tree, plain)
    assert len(walks) == 2


def test_head_is_one_git_process_and_none_before_the_first_commit(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q")
    assert head(repo) == (None, None)
    (repo / "x").write_text("x\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "x")
    commit, tree = head(repo)
    want = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD", "HEAD^{tree}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert [commit, tree] == want


def test_the_app_passes_the_nix_version_and_system_so_no_nix_process_is_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "fork"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "default.nix").write_text("{ }\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "x")
    log = tmp_path / "calls.log"
    env = shim(tmp_path / "bin", log, fail=("nix", "nix-instantiate", "nix-store"))
    monkeypatch.setenv("PATH", env["PATH"])
    cfg = ForkConfig(
        root=repo,
        package_set=repo,
        config=repo / "trace",
        candidates=repo / "trace" / "candidates",
        steps=None,
        policy=None,
        state=repo / ".trace",
        bundles=repo / ".trace" / "bundles",
        source=Source(
            store_path=Path("/nix/store/0000000000000000000000000000000-fork-source"),
            nar_hash=None,
            system="x86_64-linux",
            nix_version="nix (Nix) 2.8.0",
        ),
    )
    once = RunOnce(cfg)
    for _ in range(3):  # asked by every candidate, answered once
        host = once.host
    assert host.nix_version == "nix (Nix) 2.8.0" and host.system == "x86_64-linux"
    assert once.commit == host.commit is not None
    assert calls(log) == [f"git -C {repo} rev-parse HEAD^{{commit}} HEAD^{{tree}} --"]
    # without the app's values: asked once each (here the shimmed nix fails: "unknown")
    log.unlink()
    plain = RunOnce(ForkConfig(**{**cfg.__dict__, "source": None}))
    for _ in range(3):
        assert plain.host.nix_version == "unknown"
    nix = [c for c in calls(log) if not c.startswith("git ")]
    assert nix == ["nix --version", "nix-instantiate --eval --json -E builtins.currentSystem"]


# ---- integration: real runs of a fixture fork --------------------------------------------------

CANDIDATES = ("pager-last-page", "roster-wrong-field")
# the venv's own `trace` (beside the interpreter running the tests), not whatever PATH holds
TRACE = str(Path(sys.executable).parent / "trace")


def _fork_run(root: Path, env: dict[str, str], *names: str) -> dict[str, object]:
    proc = subprocess.run(
        [TRACE, "fork", "--no-sign", "--json", *names],
        cwd=root,
        env={k: v for k, v in env.items() if k not in ("TRACE_DATA_DIR", "TRACE_CLI")},
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    report: dict[str, object] = json.loads(proc.stdout)
    return report


def _replay(root: Path, cid: str) -> dict[str, object]:
    path = root / ".trace" / "bundles" / cid / "payload" / "replay.json"
    if not path.is_file():
        path = next((root / ".trace" / "bundles" / cid).rglob("replay*.json"))
    data: dict[str, object] = json.loads(path.read_text())
    return data


@pytest.mark.nix
def test_git_and_nix_host_questions_do_not_grow_with_the_candidates(tmp_path: Path) -> None:
    root = fixture_fork(tmp_path / "fork", {n: {} for n in CANDIDATES})
    log = tmp_path / "calls.log"
    env = shim(tmp_path / "bin", log)
    _fork_run(root, env, CANDIDATES[0])
    one = calls(log)
    log.unlink()
    _fork_run(root, env)  # both candidates (the first one a no-op now)
    two = calls(log)
    for run in (one, two):
        assert run.count("nix --version") == 1, run
        assert run.count("nix-instantiate --eval --json -E builtins.currentSystem") == 1, run
    gits = [c for c in two if c.startswith("git ")]
    assert len(gits) == len([c for c in one if c.startswith("git ")]) == 3, gits


@pytest.mark.nix
def test_a_run_after_a_no_op_sees_an_edit_that_kept_its_mtime_and_a_changed_policy(
    tmp_path: Path,
) -> None:
    root = fixture_fork(tmp_path / "fork", {CANDIDATES[0]: {}})
    env = shim(tmp_path / "bin", tmp_path / "calls.log")
    first = _fork_run(root, env)
    cid = first["candidates"][0]["candidate"]  # type: ignore[index]
    assert first["candidates"][0]["decision"] == "allow", first  # type: ignore[index]
    noop = _fork_run(root, env)
    assert noop["candidates"][0]["decision"] == "allow"  # type: ignore[index]
    digest = _replay(root, cid)["package_set"]["digest"]  # type: ignore[index]

    # a package file edited in place: same size, mtime put back, committed (a comment: the
    # derivation stays the same, only the package set's bytes differ)
    src = root / "pkgs" / "pager" / "default.nix"
    st = src.stat()
    text = src.read_text()
    assert "a small" in text
    src.write_text(text.replace("a small", "a SMALL", 1))
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert src.stat().st_size == st.st_size and src.stat().st_mtime_ns == st.st_mtime_ns
    git(root, "commit", "-qam", "edit keeping the mtime")
    _fork_run(root, env)
    assert _replay(root, cid)["package_set"]["digest"] != digest, "the edit was not seen"  # type: ignore[index]

    # the fork's own signing policy now refuses the route this candidate takes
    own = root / "trace" / "policy"
    own.mkdir(parents=True, exist_ok=True)
    text = (Path(__file__).parent.parent / "policy" / "signing.toml").read_text()
    version = re.search(r'^version = "[^"]+"', text, re.M)
    assert version is not None
    text = text.replace(version.group(0), 'version = "1.0.9"', 1)
    text = re.sub(
        r"^routes = \[.*\]$", 'routes = ["auto-merge-eligible"]', text, count=1, flags=re.M
    )
    (own / "signing.toml").write_text(text)
    git(root, "add", "-A")
    git(root, "commit", "-qm", "stricter policy")
    denied = _fork_run(root, env)
    row = denied["candidates"][0]  # type: ignore[index]
    assert row["decision"] == "deny", row


def test_the_redaction_memo_answers_as_the_rules_do_and_hands_out_fresh_counts() -> None:
    """A fork no-op redacts the same short strings thousands of times: they are memoised, which
    must change no answer (a secret is redacted on every call, not only on the first)."""
    from engine.evidence import redact

    secret = "token ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    for _ in range(3):
        out, counts = redact.redact_text(secret)
        assert out == redact._redact_text(secret, redact.RULES)[0]
        assert "ghp_A1b2" not in out and counts, out
        counts.clear()  # a caller's dict is its own
    long = "x" * redact.MEMO_CHARS + " " + secret  # longer strings are not kept, still redacted
    assert "ghp_A1b2" not in redact.redact_text(long)[0]


def test_the_oidc_token_is_looked_up_only_when_signing_is_about_to_happen_and_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The issue saw 0.18 s looking for an OIDC token on a run with nothing to sign: the signer
    asks only in `sign` (called for an allowed candidate), never for --no-sign or --key, and
    at most once per run however many candidates it signs."""
    import argparse

    from engine.errors import SigningError
    from engine.fork.one_candidate import Signer
    from engine.signing import oidc

    asked: list[str | None] = []

    def lookup(explicit: str | None, **_: object) -> str:
        asked.append(explicit)
        raise SigningError("no OIDC identity token: none given and no CI credential found")

    monkeypatch.setattr(oidc, "identity_token", lookup)

    def signer(**over: object) -> Signer:
        base: dict[str, object] = {
            "key": None,
            "identity_token": None,
            "trust_config": None,
            "no_sign": False,
        }
        return Signer(argparse.Namespace(**{**base, **over}))

    idle = signer()
    assert asked == [], "making the signer looks nothing up"
    off = signer(no_sign=True)
    assert off.sign(b"{}", Path("/nonexistent"))[1] == "no"
    assert asked == []
    for _ in range(3):  # three allowed candidates, one lookup
        sig, how, note = idle.sign(b"{}", Path("/nonexistent"))
        assert (sig, how) == (None, "no") and "no OIDC identity token" in note
    assert asked == [None]


@pytest.mark.nix
def test_one_package_set_walk_per_run_whatever_the_candidate_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue saw the package set's digest (2.45 s in a 40,000-file fork) redone per
    candidate: one `trace fork` run of two candidates walks the package set once."""
    from engine.cli import main

    root = fixture_fork(tmp_path / "fork", {n: {} for n in CANDIDATES})
    walks: list[Path] = []
    real_walk = hashing._walk

    def counting(base: Path, rel: str = "", exclude: frozenset[str] = frozenset()):  # type: ignore[no-untyped-def]
        if rel == "":
            walks.append(base)
        return real_walk(base, rel, exclude)

    monkeypatch.setattr(hashing, "_walk", counting)
    monkeypatch.delenv("TRACE_CLI", raising=False)
    rc = main(["fork", "--fork", str(root), "--no-sign", "--json", "-q"])
    report = json.loads(capsys.readouterr().out)
    assert rc in (0, 1), report
    assert [c["decision"] for c in report["candidates"]] != ["error", "error"], report
    assert len(report["candidates"]) == 2
    assert walks.count(root) == 1, walks
