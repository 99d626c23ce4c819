"""verify-bundle on hostile bundles never hangs, never crashes, never reads without bounds
(issue 11, item 5). Each case runs `trace verify-bundle` in a subprocess whose timeout is the
bound (a FIFO read would block forever): it must exit non-zero with known reason codes and no
traceback. Then hypothesis mutates a signed bundle (bytes, names, file types, sizes, structure).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.audit.reasons import REASONS
from engine.evidence import PAYLOAD_DIR, SIGNATURE_FILE, STATEMENT_FILE
from engine.evidence.statement import PAYLOAD_TYPE
from engine.signing.keymode import sign_with_key
from engine.signing.keys import keygen, load_private_key
from tests.enginekit import verify_bundle_process
from tests.test_bundle_verify import entries, key_bundle, write_policy
from tests.tiers import repeats

BOUND = 60  # seconds: a hang is a failure, not a slow test


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    base = tmp_path_factory.mktemp("hostile")
    key, _, _ = keygen(base / "keys" / "k.key")
    bundle = key_bundle(base / "bundle", key, entries())
    identity = base / "policy" / "signing-identity.json"
    identity.parent.mkdir()
    write_policy(identity, keys=[{"name": "k", "public_key": str(key) + ".pub"}])
    return bundle, identity, key


def verify(bundle: Path, identity: Path) -> tuple[int, dict[str, object] | None, str]:
    rc, out, err = verify_bundle_process(bundle, identity, timeout=BOUND)
    try:
        doc = json.loads(out)
    except ValueError:
        doc = None
    return rc, doc, err


def refused(bundle: Path, identity: Path) -> set[str]:
    rc, doc, err = verify(bundle, identity)
    assert "Traceback" not in err, err
    assert rc != 0, doc
    assert doc is not None, err
    reasons = set(doc["reasons"])  # type: ignore[arg-type]
    assert reasons and reasons <= set(REASONS), reasons
    return reasons


def copy(signed: tuple[Path, Path, Path], tmp: Path) -> Path:
    out = tmp / "b"
    shutil.copytree(signed[0], out, symlinks=True)
    return out


def resign(bundle: Path, key: Path, edit: Callable[[dict[str, object]], None]) -> None:
    """Change the statement and sign it again with the trusted key (a hostile signer)."""
    doc = json.loads((bundle / STATEMENT_FILE).read_bytes())
    edit(doc)
    raw = json.dumps(doc).encode()
    (bundle / STATEMENT_FILE).write_bytes(raw)
    sig = sign_with_key(raw, PAYLOAD_TYPE, load_private_key(key))
    (bundle / SIGNATURE_FILE).write_text(sig)


def test_the_untouched_bundle_verifies(signed: tuple[Path, Path, Path]) -> None:
    rc, doc, err = verify(signed[0], signed[1])
    assert rc == 0 and doc is not None and doc["passed"], (doc, err)


def test_statement_as_fifo_does_not_hang(signed: tuple[Path, Path, Path], tmp_path: Path) -> None:
    b = copy(signed, tmp_path)
    (b / STATEMENT_FILE).unlink()
    os.mkfifo(b / STATEMENT_FILE)
    assert refused(b, signed[1]) == {"bundle.not-regular"}


def test_statement_to_dev_zero(signed: tuple[Path, Path, Path], tmp_path: Path) -> None:
    b = copy(signed, tmp_path)
    (b / STATEMENT_FILE).unlink()
    (b / STATEMENT_FILE).symlink_to("/dev/zero")
    assert refused(b, signed[1]) == {"bundle.not-regular"}


def test_a_huge_signature_file_is_capped(signed: tuple[Path, Path, Path], tmp_path: Path) -> None:
    b = copy(signed, tmp_path)
    with open(b / SIGNATURE_FILE, "r+b") as fh:
        fh.truncate(1 << 30)  # sparse: 1 GiB that costs no disk
    assert "bundle.too-large" in refused(b, signed[1])


def test_deep_nesting_is_bounded(signed: tuple[Path, Path, Path], tmp_path: Path) -> None:
    b = copy(signed, tmp_path)
    d = b / PAYLOAD_DIR
    made = []
    try:
        for _ in range(1100):
            d = d / "d"
            os.mkdir(d)
            made.append(d)
        assert "bundle.too-deep" in refused(b, signed[1])
    finally:  # deepest first: pytest's own recursive cleanup of old temp dirs would overflow
        for path in reversed(made):
            os.rmdir(path)


def test_a_symlinked_subject_says_symlink(signed: tuple[Path, Path, Path], tmp_path: Path) -> None:
    b = copy(signed, tmp_path)
    target = b / PAYLOAD_DIR / "advisory.json"
    outside = tmp_path / "advisory.json"
    shutil.copy(target, outside)
    target.unlink()
    target.symlink_to(outside)
    rc, doc, _ = verify(b, signed[1])
    assert rc == 1 and doc is not None
    assert doc["reasons"] == ["bundle.not-regular"], doc
    assert "advisory.json is a symlink" in json.dumps(doc)


def test_an_empty_extra_directory_fails(signed: tuple[Path, Path, Path], tmp_path: Path) -> None:
    b = copy(signed, tmp_path)
    (b / PAYLOAD_DIR / "smuggled").mkdir()
    assert refused(b, signed[1]) == {"subject.extra-file"}


def test_duplicate_subjects(signed: tuple[Path, Path, Path], tmp_path: Path) -> None:
    b = copy(signed, tmp_path)

    def dupe(doc: dict[str, object]) -> None:
        subjects = doc["subject"]
        assert isinstance(subjects, list)
        wrong = {"name": subjects[0]["name"], "digest": {"sha256": "0" * 64}}
        subjects.insert(0, wrong)  # the wrong digest first

    resign(b, signed[2], dupe)
    assert "subject.duplicate" in refused(b, signed[1])


@pytest.mark.parametrize("name", ["../outside.txt", "/etc/passwd", "a/./b", "x\x00y"])
def test_unsafe_subject_names(signed: tuple[Path, Path, Path], tmp_path: Path, name: str) -> None:
    b = copy(signed, tmp_path)

    def add(doc: dict[str, object]) -> None:
        subjects = doc["subject"]
        assert isinstance(subjects, list)
        subjects.append({"name": name, "digest": {"sha256": "0" * 64}})

    resign(b, signed[2], add)
    assert "subject.unsafe-name" in refused(b, signed[1])


def test_an_unknown_media_type(signed: tuple[Path, Path, Path], tmp_path: Path) -> None:
    b = copy(signed, tmp_path)
    doc = json.loads((b / SIGNATURE_FILE).read_text())
    doc["mediaType"] = "application/vnd.dev.sigstore.bundle.v9+json"
    (b / SIGNATURE_FILE).write_text(json.dumps(doc))
    assert refused(b, signed[1]) == {"signature.malformed"}


def _flip(p: Path, at: int) -> bool:
    data = bytearray(p.read_bytes())
    if data:
        data[at % len(data)] ^= 0x01
        p.write_bytes(bytes(data))
    return bool(data)


def _mutate(root: Path, action: str, pick: int, at: int) -> bool:
    """Mutate one file of the bundle; False when nothing changed."""
    files = sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())
    target = files[pick % len(files)]
    if action == "flip":
        return _flip(target, at)
    if action == "truncate":
        size = target.stat().st_size
        if not size:
            return False
        target.write_bytes(target.read_bytes()[: at % size])
    elif action == "append":
        with open(target, "ab") as fh:
            fh.write(b"\n{}" * (1 + at % 5))
    elif action == "delete":
        target.unlink()
    elif action == "fifo":
        target.unlink()
        os.mkfifo(target)
    elif action == "zero":
        target.unlink()
        target.symlink_to("/dev/zero")
    elif action == "dir":
        target.unlink()
        target.mkdir()
    elif action == "rename":
        target.rename(target.with_name(target.name + ".."))
    elif action == "sparse":
        with open(target, "r+b") as fh:
            fh.truncate(1 << 31)
    return True


@settings(
    max_examples=repeats(15, 5),  # the fast tier: 5 (tests/tiers.py)
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    action=st.sampled_from(
        ["flip", "truncate", "append", "delete", "fifo", "zero", "dir", "rename", "sparse"]
    ),
    pick=st.integers(0, 1000),
    at=st.integers(0, 1 << 16),
)
def test_hostile_mutations_are_refused_with_a_known_code(
    signed: tuple[Path, Path, Path], tmp_path_factory: pytest.TempPathFactory, action: str,
    pick: int, at: int,
) -> None:  # fmt: skip
    b = copy(signed, tmp_path_factory.mktemp("m"))
    if _mutate(b, action, pick, at):  # (a flip of an empty file changes nothing)
        refused(b, signed[1])


def test_the_statement_must_agree_with_the_replay_record(
    signed: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """Offline: the fields the statement took from replay.json are cross-checked (a re-signed
    statement naming another graph digest than the bundled replay record is refused)."""
    b = copy(signed, tmp_path)

    def other_graph(doc: dict[str, object]) -> None:
        bd = doc["predicate"]["buildDefinition"]  # type: ignore[index]
        bd["externalParameters"]["graph"]["sha256"] = "c" * 64

    resign(b, signed[2], other_graph)
    rc, doc, _ = verify(b, signed[1])
    assert rc == 1 and doc is not None and doc["reasons"] == ["records.disagree"], doc
    assert "externalParameters differ from replay.json" in json.dumps(doc)


def test_replay_outside_git_says_so(tmp_path: Path) -> None:
    """`--replay` in a directory that is not a git checkout named "at None" before."""
    from engine.audit.replay import _pin_problems
    from engine.evidence.replay import FilePin, ForkPin, ReplayRecord

    (tmp_path / "c.toml").write_text("x")
    (tmp_path / "g.toml").write_text("y")
    rec = ReplayRecord(
        engine_version="0",
        nix_version="nix",
        system="x86_64-linux",
        candidate=FilePin(path="c.toml", sha256="0" * 64),
        graph=FilePin(path="g.toml", sha256="0" * 64),
        package_set=ForkPin(path=".", commit="a" * 40, tree="b" * 40, dirty=False),
    )
    problems = _pin_problems(rec, tmp_path)
    shown = "; ".join(problems)
    assert "None" not in shown and "is not a git checkout" in shown, problems
    assert "a" * 40 in shown


def test_an_unsigned_keyid_that_is_not_the_hint(
    signed: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    b = copy(signed, tmp_path)
    doc = json.loads((b / SIGNATURE_FILE).read_text())
    doc["dsseEnvelope"]["signatures"][0]["keyid"] = "0" * 64
    (b / SIGNATURE_FILE).write_text(json.dumps(doc))
    rc, verdict, _ = verify(b, signed[1])
    assert rc == 1 and verdict is not None and verdict["reasons"] == ["signature.malformed"]
    assert "is not the key hint" in json.dumps(verdict)
