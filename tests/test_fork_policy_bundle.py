"""A bundle decided under the fork's own signing policy verifies against that fork's file by
sha256 (issue 11, item 6): before, it always failed `policy.unknown-version`.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from engine.evidence import SIGNATURE_FILE
from engine.signing.keys import keygen
from tests.enginekit import cli
from tests.test_bundle_verify import write_policy

pytestmark = pytest.mark.nix

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "fixtures" / "fork"
CAND = "trace/candidates/pager-last-page/candidate.toml"


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    base = tmp_path_factory.mktemp("forkpolicy")
    fork = base / "fork"
    shutil.copytree(FIXTURE, fork, ignore=shutil.ignore_patterns(".trace", "result*"))
    own = fork / "trace" / "policy"
    own.mkdir()
    shutil.copy(REPO / "policy" / "reasons.toml", own / "reasons.toml")
    text = (REPO / "policy" / "signing.toml").read_text()
    shipped = re.search(r'^version = "[^"]+"', text, re.M)
    assert shipped is not None, "the shipped signing policy names its version"
    (own / "signing.toml").write_text(text.replace(shipped.group(0), 'version = "1.0.7"', 1))
    key, _, _ = keygen(base / "keys" / "k.key")
    identity = base / "reviewer" / "signing-identity.json"  # the reviewer's shipped copies
    identity.parent.mkdir()
    write_policy(identity, keys=[{"name": "k", "public_key": str(key) + ".pub"}])
    out = base / "bundle"
    rc, stdout, err = cli(
        "verify", str(fork / CAND), "--fork", str(fork), "-q", "--bundle", str(out),
        "--key", str(key), "--signing-policy", str(own / "signing.toml"),
    )  # fmt: skip
    assert rc == 0 and "trace-signing 1.0.7" in stdout, stdout + err
    assert (out / SIGNATURE_FILE).is_file()
    return fork, out, identity


def _verify(bundle: Path, identity: Path, *extra: str) -> dict[str, object]:
    rc, out, err = cli("verify-bundle", str(bundle), "--identity", str(identity), "--json", *extra)
    doc = json.loads(out)
    assert (rc == 0) == doc["passed"], err
    return doc


def test_the_fork_policy_verifies_against_the_fork_file(made: tuple[Path, Path, Path]) -> None:
    fork, bundle, identity = made
    doc = _verify(bundle, identity)  # without the fork: the version is unknown here
    assert doc["reasons"] == ["policy.unknown-version"], doc
    doc = _verify(bundle, identity, "--fork", str(fork))
    assert doc["passed"], doc


def test_a_changed_fork_policy_fails_by_digest(
    made: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    fork, bundle, identity = made
    other = tmp_path / "fork"
    shutil.copytree(fork, other, ignore=shutil.ignore_patterns(".trace"))
    policy = other / "trace" / "policy" / "signing.toml"
    policy.write_text(policy.read_text().replace("min_runs = 3", "min_runs = 1"))
    doc = _verify(bundle, identity, "--fork", str(other))
    assert "policy.digest-mismatch" in doc["reasons"], doc


def test_the_provenance_names_real_digests(made: tuple[Path, Path, Path]) -> None:
    """Item 7: each resolvedDependencies digest is the sha256 of what its (absolute) uri names;
    the step key goes under its own name; start and finish are real times."""
    import hashlib
    from urllib.parse import urlparse

    from engine.paths import data_dir

    fork, bundle, _ = made
    statement = json.loads((bundle / "statement.json").read_bytes())
    predicate = statement["predicate"]
    assert predicate["buildDefinition"]["buildType"] == "urn:trace:build-type:verify:v1"
    assert predicate["runDetails"]["builder"]["id"] == "urn:trace:builder:cli"
    meta = predicate["runDetails"]["metadata"]
    assert meta["startedOn"] < meta["finishedOn"], meta
    deps = predicate["buildDefinition"]["resolvedDependencies"]
    steps = 0
    for dep in deps:
        uri = dep["uri"]
        assert urlparse(uri).scheme in ("file", "urn"), uri
        if uri.startswith("file://"):
            data = Path(uri.removeprefix("file://")).read_bytes()
            assert dep["digest"] == {"sha256": hashlib.sha256(data).hexdigest()}, dep
            assert len(dep["annotations"]["trace.stepKey"]) == 64
            steps += 1
        elif dep["name"] == "package-set":
            assert set(dep["digest"]) <= {"gitCommit", "gitTree"}
        else:
            rel = uri.removeprefix("urn:trace:fork:").removeprefix("urn:trace:engine:")
            base = fork if uri.startswith("urn:trace:fork:") else data_dir()
            assert dep["digest"] == {
                "sha256": hashlib.sha256((base / rel).read_bytes()).hexdigest()
            }
    assert steps >= 5


def test_the_bundle_carries_the_policy_it_was_decided_under(
    made: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """The fork's signing policy and its catalogue travel in the bundle byte for byte (signed:
    they are subjects); a lock that accepts the fork's version, with no file of it here and no
    fork at hand, re-runs the decision offline from the bundled bytes (before: not re-run)."""
    import hashlib

    fork, bundle, _ = made
    own = fork / "trace" / "policy"
    carried = bundle / "payload" / "policy" / "signing.toml"
    assert carried.read_bytes() == (own / "signing.toml").read_bytes()
    assert (bundle / "payload" / "policy" / "reasons.toml").is_file()
    decision = json.loads((bundle / "payload" / "decisions" / "signing.json").read_bytes())
    assert decision["policy"]["digest"] == hashlib.sha256(carried.read_bytes()).hexdigest()
    subjects = json.loads((bundle / "statement.json").read_bytes())["subject"]
    assert "policy/signing.toml" in {s["name"] for s in subjects}

    lock = tmp_path / "lock" / "signing-identity.json"
    lock.parent.mkdir()
    key = bundle.parent / "keys" / "k.key.pub"
    write_policy(
        lock, versions={"trace-signing": ["1.0.7"]}, keys=[{"name": "k", "public_key": str(key)}]
    )
    doc = _verify(bundle, lock)
    assert doc["passed"], doc
    rerun = next(c for c in doc["checks"] if c["name"] == "signing decision re-run")  # type: ignore[union-attr]
    assert rerun["ok"] and not rerun["detail"].startswith("not re-run"), rerun


def test_a_bundled_policy_that_is_not_the_decisions_disagrees(
    made: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """A producer that bundles another policy than the one the decision names (the records
    checks, offline; a changed file after signing already fails its subject digest)."""
    from engine.audit.consistency import record_checks
    from engine.evidence.statement import Statement

    _, bundle, _ = made
    copy = tmp_path / "b"
    shutil.copytree(bundle, copy)
    policy = copy / "payload" / "policy" / "signing.toml"
    policy.write_text(policy.read_text().replace("min_runs = 3", "min_runs = 1"))
    statement = Statement.model_validate_json((copy / "statement.json").read_bytes())
    checks = record_checks(statement, copy / "payload", [])
    bad = [c for c in checks if not c.ok]
    assert [c.reason for c in bad] == ["records.disagree"], checks
    assert "policy/signing.toml" in bad[0].detail
