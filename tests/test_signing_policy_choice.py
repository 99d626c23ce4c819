"""One signing policy from verify through decide, bundle and replay (real nix, pager candidate).

A tmp copy of the fixture fork holds its own signing policy at a non-default place
(trace/own/signing.toml: another name, version and coverage threshold). `trace verify --bundle
--signing-policy` with it allows and signs; `trace decide --signing` and `trace bundle
--signing-policy` with the same file allow from the cached builds; deciding or bundling with
another policy is refused ("verified under another signing policy"); the replay record names the
file and its sha256 and `verify-bundle --replay` rebuilds with it (another digest:
replay.pin-mismatch); `trace fork --policy trace/own` gates and decides with that same file.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from engine.cli import main
from engine.errors import InputError
from engine.evidence import PAYLOAD_DIR, SIGNATURE_FILE
from engine.evidence.replay import signing_policy_pin
from engine.signing.keys import keygen

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "fixtures" / "fork"
SHIPPED = REPO / "policy"
CAND = "trace/candidates/pager-last-page/candidate.toml"
PAGER_ID = "TRACE-2026-0002-pager"
OWN = "trace/own/signing.toml"  # not FORK/trace/policy: no default finds it


@dataclass
class World:
    base: Path
    fork: Path
    cand: Path
    own: Path
    key: Path
    lock: Path  # signer lock beside the shipped policies and the own one
    bundle: Path
    rc: int
    out: str


def own_policy_text() -> str:
    text = (SHIPPED / "signing.toml").read_text()
    for old, new in (
        ('name = "trace-signing"', 'name = "own-signing"'),
        ('version = "1.9.0"', 'version = "2.0.0"'),
        ('min_score = 0.8\nbelow_threshold = "c', 'min_score = 0.5\nbelow_threshold = "c'),
    ):
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


def cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(args))
    return rc, out.getvalue(), err.getvalue()


def payload(bundle: Path, path: str) -> Any:
    return json.loads((bundle / PAYLOAD_DIR / path).read_bytes())


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    base = tmp_path_factory.mktemp("policy-choice")
    fork = base / "fork"
    shutil.copytree(FIXTURE, fork, ignore=shutil.ignore_patterns(".trace", "result*"))
    own = fork / OWN
    own.parent.mkdir()
    own.write_text(own_policy_text())
    shutil.copy(SHIPPED / "reasons.toml", own.parent / "reasons.toml")
    key, _, _ = keygen(base / "keys" / "signer.key")
    lock = base / "lock"
    lock.mkdir()
    for f in SHIPPED.glob("*.toml"):
        shutil.copy(f, lock / f.name)
    shutil.copy(own, lock / "own-signing.toml")
    (lock / "signing-identity.json").write_text(
        json.dumps(
            {
                "schema": "trace.signing-identity/v1",
                "version": "1.0.0",
                "keys": [{"name": "signer", "public_key": "../keys/signer.key.pub"}],
            }
        )
    )
    bundle = base / "bundle"
    rc, out, err = cli(
        *("verify", str(fork / CAND), "--fork", str(fork), "-q"),
        *("--signing-policy", str(own), "--bundle", str(bundle), "--key", str(key)),
    )
    return World(
        base, fork, fork / CAND, own, key, lock / "signing-identity.json", bundle, rc, out + err
    )


def verify_bundle(world: World, bundle: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    rc, out, _ = cli("verify-bundle", str(bundle), "--identity", str(world.lock), "--json", *extra)
    return rc, json.loads(out)


@pytest.mark.nix
def test_the_same_policy_for_verify_decide_and_bundle_allows(world: World) -> None:
    assert world.rc == 0, world.out
    assert "signing policy: ALLOW (own-signing 2.0.0" in world.out
    assert (world.bundle / SIGNATURE_FILE).is_file()
    # the gates applied the own policy's thresholds and say so in their records
    coverage = payload(world.bundle, "gates/coverage.json")
    assert coverage["details"]["policy"]["name"] == "own-signing"
    assert coverage["details"]["policy"]["thresholds"] == {"min_score": 0.5}
    # the replay record names the file (relative to the fork) and its bytes
    replay = payload(world.bundle, "replay.json")
    digest = hashlib.sha256(world.own.read_bytes()).hexdigest()
    assert replay["signing_policy"] == {"path": OWN, "sha256": digest}

    # trace decide and trace bundle with the same file: allowed from the cached builds
    fork = ["--fork", str(world.fork)]
    rc, out, err = cli("decide", str(world.cand), *fork, "--signing", str(world.own), "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["decision"] == "allow" and doc["policy"]["name"] == "own-signing"
    again = world.base / "again"
    rc, out, err = cli(
        *("bundle", str(world.cand), *fork, "--signing-policy", str(world.own)),
        *("--out", str(again), "--key", str(world.key)),
    )
    assert rc == 0 and "ALLOW (own-signing 2.0.0" in out, out + err
    assert payload(again, "replay.json")["signing_policy"]["path"] == OWN

    # decide's record is bundled under the policy it was made with, and no other file (here: the
    # same thresholds in other bytes, so the gate steps' keys and records are the same)
    record = world.fork / ".trace" / "decisions" / f"{PAGER_ID}.json"
    decided = ["bundle", str(world.cand), *fork, "--decision", str(record)]
    rc, _, err = cli(*decided, "--signing-policy", str(world.own), "--out", str(world.base / "d"))
    assert rc == 0, err
    other = world.own.with_name("same-thresholds.toml")
    other.write_bytes(world.own.read_bytes() + b"# other bytes\n")
    rc, _, err = cli(*decided, "--signing-policy", str(other), "--out", str(world.base / "e"))
    assert rc == 2 and "the decision record was made under the signing policy" in err, err
    assert not (world.base / "e").exists()


@pytest.mark.nix
def test_another_policy_at_decide_or_bundle_is_refused(world: World) -> None:
    fork = ["--fork", str(world.fork)]
    rc, out, err = cli("decide", str(world.cand), *fork)  # the shipped policy
    assert rc == 2 and out == "", out
    assert "verified under another signing policy" in err, err
    assert "last applied own-signing 2.0.0" in err and "is trace-signing 1.9.0" in err
    for step in (
        "gate-coverage",
        "gate-detector",
        "gate-fault-site",
        "gate-fuzz",
        "gate-mutation",
        "gate-regression",
        "gate-scope",
        "gate-variants",
    ):
        assert step in err, err
    refused = world.base / "refused"
    rc, _, err = cli("bundle", str(world.cand), *fork, "--out", str(refused))
    assert rc == 2 and "verified under another signing policy" in err, err
    assert not refused.exists()

    # the specific message only when the policy is all that changed: a swapped patch is listed
    # among the other changes, the gates' policy with them
    patch = world.cand.parent / "fix.patch"
    original = patch.read_bytes()
    try:
        patch.write_bytes(original.replace(b"+    return (total + size - 1) // size", b"+    x"))
        rc, _, err = cli("decide", str(world.cand), *fork)
    finally:
        patch.write_bytes(original)
    assert rc == 2 and "verified under another signing policy" not in err, err
    assert "not verified, or its inputs changed since" in err
    assert "param 'patches' changed" in err and "param 'policy' changed" in err


@pytest.mark.nix
def test_the_custom_policy_bundle_replays_and_a_changed_policy_does_not(world: World) -> None:
    rc, doc = verify_bundle(world, world.bundle, "--fork", str(world.fork), "--replay")
    assert rc == 0 and doc["passed"], doc
    replay = next(c for c in doc["checks"] if c["name"] == "replay")
    assert replay["ok"] and "judged again" in replay["detail"], replay

    original = world.own.read_bytes()
    try:
        world.own.write_bytes(original + b"# edited after the bundle was made\n")
        rc, doc = verify_bundle(world, world.bundle, "--fork", str(world.fork), "--replay")
    finally:
        world.own.write_bytes(original)
    assert rc == 1 and doc["reasons"] == ["replay.pin-mismatch"], doc
    pins = next(c for c in doc["checks"] if c["reason"] == "replay.pin-mismatch")
    assert pins["detail"].startswith(f"{OWN}: sha256 "), pins


def test_a_policy_a_replay_could_not_name_is_refused_before_building(tmp_path: Path) -> None:
    assert signing_policy_pin(SHIPPED / "signing.toml", FIXTURE).path == "trace:policy/signing.toml"
    outside = tmp_path / "signing.toml"
    outside.write_text(own_policy_text())
    with pytest.raises(InputError) as exc:
        signing_policy_pin(outside, FIXTURE)
    assert "outside the fork" in exc.value.message
    # `trace verify --bundle` refuses before anything is loaded or built
    state, out = tmp_path / "state", tmp_path / "bundle"
    rc, _, err = cli(
        *("verify", str(FIXTURE / CAND), "--fork", str(FIXTURE), "--state-dir", str(state)),
        *("-q", "--bundle", str(out), "--signing-policy", str(outside)),
    )
    assert rc == 2 and "a bundle's replay record could not name it" in err, err
    assert not state.exists() and not out.exists()


def _git(fork: Path, *args: str) -> None:
    env = ["-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(["git", "-C", str(fork), *env, *args], check=True, capture_output=True)


@pytest.mark.nix
def test_trace_fork_gates_and_decides_with_the_same_policy_file(world: World) -> None:
    """`--policy trace/own` (not the default trace/policy, which the gates' default would look
    for): the gates apply the merged signing policy's source, the decision allows under it, and
    the replay record names it."""
    _git(world.fork, "init", "-q")
    _git(world.fork, "add", "--", ".", ":(exclude).trace")
    _git(world.fork, "commit", "-q", "-m", "fixture fork")
    rc, out, err = cli(
        *("fork", "pager-last-page", "--fork", str(world.fork), "--policy", "trace/own"),
        *("--key", str(world.key), "--json", "-q"),
    )
    report = json.loads(out)
    (row,) = report["candidates"]
    assert rc == 0 and row["decision"] == "allow" and row["signed"] == "key", (row, err)
    bundle = Path(row["bundle"])
    assert payload(bundle, "decisions/signing.json")["policy"]["name"] == "own-signing"
    assert payload(bundle, "gates/mutation.json")["details"]["policy"]["name"] == "own-signing"
    digest = hashlib.sha256(world.own.read_bytes()).hexdigest()
    assert payload(bundle, "replay.json")["signing_policy"] == {"path": OWN, "sha256": digest}
    rc, doc = verify_bundle(world, bundle, "--fork", str(world.fork), "--replay")
    assert rc == 0 and doc["passed"], doc


@pytest.mark.nix  # builds (found by the fast tier's build guard, issue 30)
def test_decide_and_bundle_default_to_the_policy_verify_used(tmp_path: Path) -> None:
    """A fork's own trace/policy/signing.toml is the default for verify, decide and bundle alike
    (its catalogue may be the shipped one, named `trace:policy/reasons.toml`)."""
    fork = tmp_path / "fork"
    shutil.copytree(FIXTURE, fork, ignore=shutil.ignore_patterns(".trace", "result*"))
    own = fork / "trace" / "policy" / "signing.toml"
    own.parent.mkdir(parents=True)
    text = own_policy_text().replace(
        'catalogue = "reasons.toml"', 'catalogue = "trace:policy/reasons.toml"'
    )
    assert 'catalogue = "trace:policy/reasons.toml"' in text
    own.write_text(text)
    cand = fork / CAND
    rc, out, err = cli("verify", str(cand), "-q")
    assert rc == 0, out + err
    rc, out, err = cli("decide", str(cand))
    assert rc == 0 and "ALLOW" in out and "own-signing 2.0.0" in out, out + err
    rc, out, err = cli("bundle", str(cand), "--out", str(tmp_path / "b"))
    assert rc == 0, out + err
    assert payload(tmp_path / "b", "decisions/signing.json")["policy"]["name"] == "own-signing"
