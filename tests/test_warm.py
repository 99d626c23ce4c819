"""Warm `trace verify --bundle` and `trace decide` (engine/fork/warm.py): a repeat with nothing
changed replays the authenticated memo; a changed patch, policy, index or memo entry never
serves a stale or forged result.

Unit tests drive the memo over plain files; the integration tests run the real commands on a
copy of the fixture fork (real nix builds) and make the full path fail loudly when it is taken
where the warm one must be (and the reverse)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import engine.cli.decide as decide_cli
import engine.cli.verify as verify_cli
from engine.fork import warm
from engine.signing.keys import keygen
from tests.enginekit import cli

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "fixtures" / "fork"
CAND = "trace/candidates/pager-last-page/candidate.toml"
PAST = 1_600_000_000_000_000_000


# ---- unit: the memo over plain files ----------------------------------------------------------


def _old(path: Path) -> None:
    """Make `path` older than the racy window (its ctime stays now: only mtime is set)."""
    os.utime(path, ns=(PAST, PAST))


@pytest.fixture
def files(tmp_path: Path) -> Iterator[tuple[Path, Path, argparse.Namespace]]:
    fork, state = tmp_path / "fork", tmp_path / "fork" / ".trace"
    state.mkdir(parents=True)
    (fork / "patch.diff").write_text("- a\n+ b\n")
    (fork / "policy.toml").write_text("min = 3\n")
    args = argparse.Namespace(candidate=fork / "patch.diff", signing=fork / "policy.toml")
    yield fork, state, args


def _remember(w: warm.Warm, fork: Path, out: Path, text: str = "ALLOW\n") -> bool:
    out.write_text("decision record\n")
    reads = [(str(fork / "patch.diff"), ())]
    return w.remember(reads, [str(fork)], [out], (text, ""), 0)


def _memo(fork: Path, state: Path, args: argparse.Namespace) -> warm.Warm:
    got = warm.open_memo("decide", args, fork, state)
    assert got is not None
    # the run began "later" than every file here was written: nothing is racily new
    got.began_ns = time.time_ns() + 10 * warm.RACY_NS
    return got


def test_a_repeat_with_nothing_changed_is_served(
    files: tuple[Path, Path, argparse.Namespace],
) -> None:
    fork, state, args = files
    assert _remember(_memo(fork, state, args), fork, state / "d.json")
    body, why = _memo(fork, state, args).lookup()
    assert body is not None, why
    assert body["stdout"] == "ALLOW\n" and body["status"] == 0


@pytest.mark.parametrize("edit", ["cp -p", "rename over", "truncate and restore", "policy"])
def test_an_edited_input_is_never_served(
    files: tuple[Path, Path, argparse.Namespace], tmp_path: Path, edit: str
) -> None:
    fork, state, args = files
    patch = fork / "patch.diff"
    assert _remember(_memo(fork, state, args), fork, state / "d.json")
    if edit == "cp -p":  # other content, the very same mtime
        other = tmp_path / "other"
        other.write_text("- a\n+ c\n")
        shutil.copy2(patch, tmp_path / "keep")
        os.utime(other, ns=(patch.stat().st_atime_ns, patch.stat().st_mtime_ns))
        subprocess.run(["cp", "-p", str(other), str(patch)], check=True)
    elif edit == "rename over":
        new = fork / "new"
        new.write_text(patch.read_text())  # same bytes, another inode
        os.replace(new, patch)
    elif edit == "truncate and restore":
        st = patch.stat()
        text = patch.read_bytes()
        patch.write_bytes(b"")
        patch.write_bytes(text)
        os.utime(patch, ns=(st.st_atime_ns, st.st_mtime_ns))
    else:  # an option's file: the signing policy
        (fork / "policy.toml").write_text("min = 1\n")
    body, why = _memo(fork, state, args).lookup()
    assert body is None and why, edit


def test_another_command_line_or_day_is_not_served(
    files: tuple[Path, Path, argparse.Namespace], monkeypatch: pytest.MonkeyPatch
) -> None:
    fork, state, args = files
    assert _remember(_memo(fork, state, args), fork, state / "d.json")
    other = argparse.Namespace(**{**vars(args), "signing": fork / "patch.diff"})
    assert _memo(fork, state, other).lookup()[0] is None
    monkeypatch.setenv("NIX_CONFIG", os.environ.get("NIX_CONFIG", "") + "\ncores = 7\n")
    assert _memo(fork, state, args).lookup()[0] is None


def test_a_forged_or_copied_entry_is_not_authentic(
    files: tuple[Path, Path, argparse.Namespace], tmp_path: Path
) -> None:
    fork, state, args = files
    w = _memo(fork, state, args)
    assert _remember(w, fork, state / "d.json", "DENY\n")
    doc = json.loads(w.where.read_text())
    doc["body"]["stdout"], doc["body"]["status"] = "ALLOW\n", 0
    w.where.write_text(json.dumps(doc))
    body, why = _memo(fork, state, args).lookup()
    assert body is None and "not authentic" in why
    # an entry made under another key (whoever writes the state dir has no key)
    other = tmp_path / "other.key"
    other.write_bytes(os.urandom(32))
    other.chmod(0o600)
    forged = warm.Warm("decide", fork, state, other.read_bytes(), w.context, w.began_ns, w.slot)
    assert _remember(forged, fork, state / "d.json")
    assert _memo(fork, state, args).lookup()[0] is None


def test_a_written_file_edited_or_an_output_gone_is_not_served(
    files: tuple[Path, Path, argparse.Namespace],
) -> None:
    fork, state, args = files
    out = state / "d.json"
    assert _remember(_memo(fork, state, args), fork, out)
    out.write_text("decision record, edited\n")
    assert "not the one it wrote" in _memo(fork, state, args).lookup()[1]
    w = _memo(fork, state, args)
    reads = [(str(fork / "patch.diff"), ())]
    assert w.remember(reads, [str(fork / "gone")], [out], ("x", ""), 0)
    assert "no longer in the store" in _memo(fork, state, args).lookup()[1]


def test_a_racily_new_read_or_an_error_is_not_memoised(
    files: tuple[Path, Path, argparse.Namespace],
) -> None:
    fork, state, args = files
    w = warm.open_memo("decide", args, fork, state)
    assert w is not None
    w.began_ns = time.time_ns()  # patch.diff was written just now: racily clean
    assert not _remember(w, fork, state / "d.json")
    _old(fork / "patch.diff")
    w2 = _memo(fork, state, args)
    reads = [(str(fork / "patch.diff"), ())]
    assert not w2.remember(reads, [], [state / "d.json"], ("", "error"), 2)
    assert not w2.where.exists()


def test_no_key_or_keyless_signing_means_no_memo(
    files: tuple[Path, Path, argparse.Namespace], monkeypatch: pytest.MonkeyPatch
) -> None:
    fork, state, args = files
    keyless = argparse.Namespace(**vars(args), sign=True)
    assert warm.open_memo("verify", keyless, fork, state) is None
    for asked in ({"rebuild": ["post-fix"]}, {"rebuild_all": True}, {"otel": "spans.jsonl"}):
        again = argparse.Namespace(**vars(args), **asked)  # a run that must really run
        assert warm.open_memo("verify", again, fork, state) is None, asked
    monkeypatch.setenv("TRACE_MEMO_KEY", "")
    assert warm.open_memo("decide", args, fork, state) is None
    inside = state / "memo.key"  # a key inside the state dir: whoever writes there could forge
    inside.write_bytes(os.urandom(32))
    inside.chmod(0o600)
    monkeypatch.setenv("TRACE_MEMO_KEY", str(inside))
    assert warm.open_memo("decide", args, fork, state) is None


# ---- integration: the real commands on the fixture fork ---------------------------------------


@dataclass
class World:
    fork: Path
    cand: Path
    key: Path
    bundle: Path


def _copy_old(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".trace", "result*"))
    for p in [dst, *dst.rglob("*")]:
        os.utime(p, ns=(PAST, PAST), follow_symlinks=False)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    base = tmp_path_factory.mktemp("warm")
    fork = base / "fork"
    _copy_old(FIXTURE, fork)
    key, _, _ = keygen(base / "keys" / "signer.key")
    time.sleep(1.1)  # every file older than the racy window of the first run
    return World(fork, fork / CAND, key, base / "bundle")


def _verify_args(w: World) -> list[str]:
    return ["verify", str(w.cand), "--fork", str(w.fork), "-q", "--bundle", str(w.bundle)]


def _full_path_forbidden(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*_: object) -> object:
        raise AssertionError("the full path ran where the warm one must")

    monkeypatch.setattr(verify_cli, "_verify", boom)
    monkeypatch.setattr(decide_cli, "_decide", boom)


@pytest.mark.nix
def test_warm_verify_bundle_and_decide_replay_and_a_changed_patch_does_not(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a plain verify first: it makes the state dir inside the fork (the fork's mtime moves
    # during that run, so it would be racily new for a memo)
    rc, out, err = cli("verify", str(world.cand), "--fork", str(world.fork), "-q")
    assert rc == 0, out + err
    time.sleep(1.1)  # a precondition (the fork's mtime older than the racy margin), not a timing
    first = cli(*_verify_args(world), "--key", str(world.key))
    assert first[0] == 0 and "signed (key)" in first[1], first
    decided = cli("decide", str(world.cand), "--fork", str(world.fork))
    assert decided[0] == 0 and "ALLOW" in decided[1], decided
    with monkeypatch.context() as m:
        _full_path_forbidden(m)
        for args, then in (
            ([*_verify_args(world), "--key", str(world.key)], first),
            (["decide", str(world.cand), "--fork", str(world.fork)], decided),
        ):
            rc, out, err = cli(*args)
            assert (rc, out) == then[:2] and err == then[2] + warm.REPLAYED, err
    # a process of its own (its time, goal <= 0.5 s, is bench/warm_bench.py's row, not a test's)
    proc = subprocess.run(
        [sys.executable, "-m", "engine.cli", "decide", str(world.cand), "--fork", str(world.fork)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (proc.returncode, proc.stdout) == (0, decided[1]), proc.stderr
    assert proc.stderr.endswith(warm.REPLAYED), proc.stderr
    # the patch swapped for another (same size and mtime): never the memoised ALLOW
    patch = world.cand.parent / "fix.patch"
    text = patch.read_text()
    st = patch.stat()
    swapped = text.replace("(total + size - 1)", "(total - 1 + size)")
    assert swapped != text and len(swapped) == len(text)
    patch.write_text(swapped)
    os.utime(patch, ns=(st.st_atime_ns, st.st_mtime_ns))
    try:
        rc, out, err = cli("decide", str(world.cand), "--fork", str(world.fork))
        assert rc == 2 and "not verified, or its inputs changed since" in err, out + err
    finally:
        patch.write_text(text)


@pytest.mark.nix
def test_a_forged_index_row_or_memo_entry_takes_the_full_path(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sqlite3

    cli(*_verify_args(world), "--key", str(world.key))
    decided = cli("decide", str(world.cand), "--fork", str(world.fork))
    assert decided[0] == 0, decided
    db = world.fork / ".trace" / "state.db"
    con = sqlite3.connect(db, isolation_level=None)
    (out,) = con.execute("SELECT outcome FROM results WHERE step_id = 'gate-scope'").fetchone()
    forged = json.dumps({**json.loads(out), "passed": False})
    con.execute("UPDATE results SET outcome = ? WHERE step_id = 'gate-scope'", (forged,))
    con.close()
    rc, stdout, err = cli("decide", str(world.cand), "--fork", str(world.fork))
    assert rc == 2 and "does not match the Nix store" in err, stdout + err
    # a memo entry edited to say something else is refused by its MAC: the full path runs
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("UPDATE results SET outcome = ? WHERE step_id = 'gate-scope'", (out,))
    con.close()
    assert cli("decide", str(world.cand), "--fork", str(world.fork))[:2] == decided[:2]
    entries = list((world.fork / ".trace" / "warm").glob("*.json"))
    for entry in entries:
        doc = json.loads(entry.read_text())
        doc["body"]["stdout"] = doc["body"]["stdout"].replace("ALLOW", "FORGED")
        entry.write_text(json.dumps(doc))
    calls: list[int] = []
    real = decide_cli._decide

    def counted(*a: object) -> object:
        calls.append(1)
        return real(*a)  # type: ignore[arg-type]

    monkeypatch.setattr(decide_cli, "_decide", counted)
    rc, stdout, _ = cli("decide", str(world.cand), "--fork", str(world.fork))
    assert rc == 0 and "FORGED" not in stdout and calls == [1]
