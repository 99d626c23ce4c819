"""Issue 14 (fork half): the authenticated verdict memo (engine/fork/memo.py).

A `trace fork` no-op reuses the verdict of the last full trusted run of a candidate without
starting Nix, and only when its memo entry is authentic (HMAC under a key outside the state
directory) and nothing the verdict was made from changed. The state directory is untrusted (a CI
cache, a PR): editing a memo entry, copying one from another candidate, swapping a verdict, or
bringing a state directory to a machine with another key must each fall back to the full path and
give the honest verdict. Process counts by the PATH shim of tests/test_fork_once.py; no timings.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.fork import memo
from engine.fork.config import ForkConfig
from engine.fork.outcome_table import Outcome
from tests.test_flake_fork import fixture_fork
from tests.test_fork_once import _fork_run, calls, shim

NIX = ("nix ", "nix-instantiate ", "nix-store ", "nix-build ")
HEAVY = ("pydantic", "sigstore", "rich", "networkx", "cryptography", "jinja2", "plumbum", "tomli")


def nix_calls(log: Path) -> list[str]:
    return [c for c in calls(log) if c.startswith(NIX)]


# ---- unit: the key and the entry, with files standing in for a run ----------------------------


def _cfg(tmp: Path) -> ForkConfig:
    root = tmp / "fork"
    (root / "trace" / "candidates" / "a").mkdir(parents=True)
    (root / "trace" / "candidates" / "b").mkdir(parents=True)
    return ForkConfig(
        root=root,
        package_set=root,
        config=root / "trace",
        candidates=root / "trace" / "candidates",
        steps=None,
        policy=None,
        state=root / ".trace",
        bundles=root / ".trace" / "bundles",
    )


def _old(path: Path, text: str) -> Path:
    """A file written, then aged: a run that began now does not see it as racily new."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _wrote(cfg: ForkConfig, cid: str, decision: str) -> None:
    (cfg.bundles / cid).mkdir(parents=True, exist_ok=True)
    (cfg.bundles / cid / "statement.json").write_text(json.dumps({"decision": decision}))
    for sub in ("verify", "decisions"):
        (cfg.state / sub).mkdir(parents=True, exist_ok=True)
        (cfg.state / sub / f"{cid}.json").write_text(decision)


def _run(cfg: ForkConfig, key: bytes, policy: Path, began_ns: int | None = None) -> memo.Run:
    return memo.Run(
        cfg,
        key,
        head=("c0ffee", "7ree"),
        dirty=False,
        policy=policy,
        signing={"mode": "no"},
        began_ns=began_ns,
    )


@pytest.fixture
def world(tmp_path: Path) -> tuple[ForkConfig, Path, dict[str, Path], Path]:
    cfg = _cfg(tmp_path)
    policy = tmp_path / "policy"
    _old(policy / "signing.toml", "version = 1\n")
    files = {n: _old(cfg.candidates / n / "candidate.toml", f'id = "ID-{n}"\n') for n in ("a", "b")}
    out = _old(tmp_path / "store" / "out-a", "outcome\n")
    return cfg, policy, files, out


def _outcome(file: Path, cid: str, decision: str) -> Outcome:
    return Outcome(
        candidate=cid,
        file=str(file),
        verified=decision == "allow",
        decision=decision,  # type: ignore[arg-type]
        built=3,
        steps=["a", "b", "c"],
    )


def _record(
    cfg: ForkConfig, policy: Path, key: bytes, file: Path, cid: str, decision: str, out: Path
) -> None:
    """A full trusted run's `remember` + `commit`, began long after the files were written."""
    _wrote(cfg, cid, decision)
    run = _run(cfg, key, policy, began_ns=time.time_ns() + 10**10)
    run.remember(file, _outcome(file, cid, decision), [(file.parent, ())], [str(out)])
    assert run.commit() == 1


def _misses(cfg: ForkConfig, key: bytes, policy: Path, file: Path, why: str) -> None:
    """A new run does not answer `file` from its memo entry, for the reason `why`."""
    run = _run(cfg, key, policy)
    assert run.lookup(file, lambda: False) is None
    assert why in run.misses[str(file)], run.misses


def test_a_recorded_verdict_is_reused_and_every_forgery_falls_back(
    world: tuple[ForkConfig, Path, dict[str, Path], Path],
) -> None:
    cfg, policy, files, out = world
    key = os.urandom(32)
    _record(cfg, policy, key, files["a"], "ID-a", "allow", out)
    _record(cfg, policy, key, files["b"], "ID-b", "deny", out)
    run = _run(cfg, key, policy)
    hit = run.lookup(files["a"], lambda: False)
    assert hit is not None and hit.decision == "allow", run.misses
    assert (hit.built, hit.cached) == (0, 3), "a no-op built nothing: every step answered"
    assert run.lookup(files["b"], lambda: False) is not None

    where = {n: run._where(f) for n, f in files.items()}
    honest = {n: p.read_bytes() for n, p in where.items()}

    # 1. swap the verdict of the denied candidate in its memo entry
    doc = json.loads(honest["b"])
    doc["body"]["outcome"]["decision"] = "allow"
    where["b"].write_text(json.dumps(doc))
    _misses(cfg, key, policy, files["b"], "not authentic")
    # 2. copy the allowed candidate's entry over the denied one's
    where["b"].write_bytes(honest["a"])
    _misses(cfg, key, policy, files["b"], "not authentic")
    # 3. edit any other part of an entry (a read dropped: the MAC covers the whole body)
    doc = json.loads(honest["a"])
    doc["body"]["reads"] = []
    where["a"].write_text(json.dumps(doc))
    _misses(cfg, key, policy, files["a"], "not authentic")
    where["a"].write_bytes(honest["a"])
    where["b"].write_bytes(honest["b"])
    # 4. the same state directory on a machine with another key
    other = _run(cfg, os.urandom(32), policy)
    assert other.lookup(files["a"], lambda: False) is None
    assert "not authentic" in other.misses[str(files["a"])]
    # 5. an honest entry, but the policy changed since: stale (named), not "not authentic"
    policy.joinpath("signing.toml").write_text("version = 2\n")
    _misses(cfg, key, policy, files["a"], "stale: the policy changed")
    # ... and a forged claim to have been made under this very context is not authentic
    doc = json.loads(honest["a"])
    doc["context"] = _run(cfg, key, policy)._context
    where["a"].write_text(json.dumps(doc))
    _misses(cfg, key, policy, files["a"], "not authentic")
    # ... nor is an entry whose recorded context was edited to make its MAC check out
    doc = json.loads(honest["a"])
    doc["context"] = "0" * 64
    where["a"].write_text(json.dumps(doc))
    _misses(cfg, key, policy, files["a"], "not authentic")
    where["a"].write_bytes(honest["a"])
    policy.joinpath("signing.toml").write_text("version = 1\n")
    assert _run(cfg, key, policy).lookup(files["a"], lambda: False) is not None


def test_a_changed_input_a_changed_bundle_or_a_collected_output_falls_back(
    world: tuple[ForkConfig, Path, dict[str, Path], Path],
) -> None:
    cfg, policy, files, out = world
    key = os.urandom(32)
    _record(cfg, policy, key, files["a"], "ID-a", "allow", out)
    assert _run(cfg, key, policy).lookup(files["a"], lambda: False) is not None

    # the candidate edited in place, same size and mtime put back: the ctime moved
    st = files["a"].stat()
    files["a"].write_text(files["a"].read_text().replace("a", "z"))
    os.utime(files["a"], ns=(st.st_atime_ns, st.st_mtime_ns))
    assert files["a"].stat().st_size == st.st_size
    _misses(cfg, key, policy, files["a"], "changed")
    _record(cfg, policy, key, files["a"], "ID-a", "allow", out)
    # a file the run wrote: the bundle edited
    (cfg.bundles / "ID-a" / "statement.json").write_text('{"decision": "allow!"}')
    _misses(cfg, key, policy, files["a"], "bundle")
    _record(cfg, policy, key, files["a"], "ID-a", "allow", out)
    # ... or a file added to it
    (cfg.bundles / "ID-a" / "extra").write_text("x")
    _misses(cfg, key, policy, files["a"], "bundle")
    (cfg.bundles / "ID-a" / "extra").unlink()
    _record(cfg, policy, key, files["a"], "ID-a", "allow", out)
    # an output it relied on garbage-collected
    out.unlink()
    _misses(cfg, key, policy, files["a"], "no longer in the store")
    out.write_text("outcome\n")
    _record(cfg, policy, key, files["a"], "ID-a", "allow", out)
    # allowed, left unsigned, and a keyless identity turns up: sign it (the full path)
    run = _run(cfg, key, policy)
    assert run.lookup(files["a"], lambda: True) is None
    assert "keyless" in run.misses[str(files["a"])]


def test_a_changed_tool_behind_a_sandbox_path_makes_the_entry_stale(
    world: tuple[ForkConfig, Path, dict[str, Path], Path], tmp_path: Path
) -> None:
    """The verdict was made with the tools [nix] extra_sandbox_paths exposed then: when they
    change (a compiler installed), the memo does not answer, and says why (issue 28)."""
    from engine import hostpaths

    cfg, policy, files, out = world
    key = os.urandom(32)
    tools = tmp_path / "tools"
    tools.mkdir()
    paths = [str(tools)]
    _wrote(cfg, "ID-a", "deny")
    run = _run(cfg, key, policy, began_ns=time.time_ns() + 10**10)
    outcome = _outcome(files["a"], "ID-a", "deny")
    run.remember(files["a"], outcome, [(files["a"].parent, ())], [str(out)],
                 (paths, hostpaths.identity(paths)))  # fmt: skip
    assert run.commit() == 1
    assert _run(cfg, key, policy).lookup(files["a"], lambda: False) is not None
    (tools / "gcc").write_text("#!/bin/sh\n")
    _misses(cfg, key, policy, files["a"], "stale: the files behind [nix] extra_sandbox_paths")


def test_a_file_modified_during_the_run_is_never_memoised(
    world: tuple[ForkConfig, Path, dict[str, Path], Path],
) -> None:
    """Racy-clean (as git's index): a read modified since one second before the run began may
    have changed after the run read it; its entry is not written (and an old one is dropped)."""
    cfg, policy, files, out = world
    key = os.urandom(32)
    _record(cfg, policy, key, files["a"], "ID-a", "allow", out)
    began = time.time_ns()
    files["a"].write_text('id = "ID-a"\n')  # the same bytes, written during the run
    run = _run(cfg, key, policy, began_ns=began)
    run.remember(files["a"], _outcome(files["a"], "ID-a", "allow"), [(files["a"].parent, ())], [])
    assert run.commit() == 0
    assert not run._where(files["a"]).exists()


def test_each_read_is_stamped_once_per_run_whatever_the_candidate_count(
    world: tuple[ForkConfig, Path, dict[str, Path], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One digest per run: the package-set tree every candidate reads is walked once."""
    cfg, policy, files, _ = world
    key = os.urandom(32)
    tree = _old(cfg.root / "pkgs" / "x" / "default.nix", "{ }\n").parent.parent
    for n, f in files.items():
        _wrote(cfg, f"ID-{n}", "allow")
        run = _run(cfg, key, policy, began_ns=time.time_ns() + 10**10)
        run.remember(f, _outcome(f, f"ID-{n}", "allow"), [(tree, ()), (f.parent, ())], [])
        assert run.commit() == 1
    stamped: list[Path] = []
    real = memo.stamp

    def counting(reads):  # type: ignore[no-untyped-def]
        stamped.extend(Path(p) for p, _ in reads)
        return real(reads)

    monkeypatch.setattr(memo, "stamp", counting)
    run = _run(cfg, key, policy)
    assert all(run.lookup(f, lambda: False) is not None for f in files.values()), run.misses
    assert stamped.count(tree) == 1, stamped


def test_the_key_lives_outside_the_state_dir_and_only_its_owner_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _cfg(tmp_path)
    monkeypatch.delenv(memo.KEY_ENV)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    key, why = memo.load_key(cfg)
    path = tmp_path / "xdg" / "trace" / "memo.key"
    assert key is not None and len(key) == 32, why
    assert path.stat().st_mode & 0o777 == 0o600
    assert memo.load_key(cfg)[0] == key, "made once, then read"
    path.chmod(0o644)
    key2, why = memo.load_key(cfg)
    assert key2 is None and "chmod 600" in why
    # a key committed into the fork, or restored with the state directory, is no key (also
    # when a symlinked folder leads there)
    (tmp_path / "link").symlink_to(cfg.root)
    for inside in (cfg.state / "memo.key", cfg.root / "memo.key", tmp_path / "link" / "k"):
        monkeypatch.setenv(memo.KEY_ENV, str(inside))
        key3, why = memo.load_key(cfg)
        assert key3 is None and "not inside the fork" in why, why
        assert not inside.exists()
    monkeypatch.setenv(memo.KEY_ENV, "")
    assert memo.load_key(cfg)[0] is None


# ---- integration: real `trace fork` runs of the fixture fork ------------------------------------

ALLOWED, DENIED = "pager-last-page", "roster-wrong-field"


@pytest.mark.nix
def test_a_fork_no_op_starts_no_nix_and_a_forged_memo_gets_the_honest_verdict(
    tmp_path: Path,
) -> None:
    root = fixture_fork(tmp_path / "fork", {ALLOWED: {}, DENIED: {}})
    log = tmp_path / "calls.log"
    env = shim(tmp_path / "bin", log)
    _fork_run(root, env)  # builds; its reads are too new to memoise (racy)
    honest = _fork_run(root, env)  # the full trusted path again: memoised
    decisions = {c["candidate"]: c["decision"] for c in honest["candidates"]}  # type: ignore[attr-defined]
    assert sorted(decisions.values()) == ["allow", "deny"], honest
    bundles = root / ".trace" / "bundles"
    before = {p: p.stat().st_mtime_ns for p in bundles.rglob("*")}

    log.unlink()
    noop = _fork_run(root, env)
    assert nix_calls(log) == [], "a fork no-op starts no Nix process"
    assert len([c for c in calls(log) if c.startswith("git ")]) == 3
    assert {c["candidate"]: c["decision"] for c in noop["candidates"]} == decisions  # type: ignore[attr-defined]
    assert {p: p.stat().st_mtime_ns for p in bundles.rglob("*")} == before, "nothing rewritten"
    # and imports none of the heavy libraries (the issue saw ~0.6 s of imports on a no-op)
    probe = (
        "import sys\nfrom engine.cli import main\nrc = main(['fork', '--no-sign', '--json'])\n"
        "print('HEAVY', sorted({m.split('.')[0] for m in sys.modules} & set(sys.argv[1:])), "
        "file=sys.stderr)\n"
    )
    log.unlink()
    proc = subprocess.run(
        [sys.executable, "-c", probe, *HEAVY],
        cwd=root,
        env={k: v for k, v in env.items() if k not in ("TRACE_DATA_DIR", "TRACE_CLI")},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert "HEAVY []" in proc.stderr, proc.stderr[-2000:]
    assert nix_calls(log) == [] and "verified in full" not in proc.stderr, proc.stderr

    entries = sorted((root / ".trace" / "fork" / "memo").glob("*.json"))
    assert len(entries) == 2
    by_decision = {json.loads(e.read_text())["body"]["outcome"]["decision"]: e for e in entries}
    denied_entry, allowed_entry = by_decision["deny"], by_decision["allow"]
    honest_bytes = denied_entry.read_bytes()

    def forged_run() -> None:
        log.unlink(missing_ok=True)
        report = _fork_run(root, env)
        got = {c["candidate"]: c["decision"] for c in report["candidates"]}  # type: ignore[attr-defined]
        assert got == decisions, "the honest verdict, whatever the memo said"
        assert nix_calls(log), "the forged entry was not believed: the full trusted path ran"

    # the denied candidate's verdict swapped to allow in its entry
    doc = json.loads(honest_bytes)
    doc["body"]["outcome"] |= {"decision": "allow", "decision_reasons": [], "verified": True}
    denied_entry.write_text(json.dumps(doc))
    forged_run()
    # the allowed candidate's entry copied over the denied one's
    shutil.copy(allowed_entry, denied_entry)
    forged_run()
    # the state directory brought to a machine with another key (its entries all honest there)
    env[memo.KEY_ENV] = str(tmp_path / "other-machine.key")
    forged_run()
    log.unlink()
    _fork_run(root, env)
    assert nix_calls(log) == [], "the full run under the new key memoised again"
