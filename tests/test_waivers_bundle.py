"""Signed waivers end to end with real nix on the fixture fork: `trace waive` signs one with a
maintainer's key, `trace verify --bundle` applies it and carries it (with the maintainers policy)
as payload files, verify-bundle re-verifies it from the bundle; a waiver edited, or swapped for
one signed with the bundle's own key, fails verify-bundle even when the whole bundle is signed
again (`waiver.invalid`)."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from engine.cli import main
from engine.evidence import PAYLOAD_DIR
from engine.evidence.payload import canonical_json
from engine.signing.keys import keygen
from tests.test_e2e_bundle import CAND, FIXTURE, PAGER_ID, REPO, World, resign, verify_bundle
from tests.waiverkit import hint_of, sign_waiver, write_maintainers

pytestmark = pytest.mark.nix

CODE = "coverage-not-measurable"
WAIVER = f"waivers/{CODE}.json"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    base = tmp_path_factory.mktemp("waivers")
    fork = base / "fork"
    shutil.copytree(FIXTURE, fork, ignore=shutil.ignore_patterns(".trace", "result*"))
    key, _, _ = keygen(base / "keys" / "signer.key")  # signs bundles (trace's key)
    alice, _, _ = keygen(base / "keys" / "alice.key")  # a maintainer
    policy = base / "policy"
    policy.mkdir()
    for f in (REPO / "policy").glob("*.toml"):
        shutil.copy(f, policy / f.name)
    identity = policy / "signing-identity.json"
    lock = {"schema": "trace.signing-identity/v1", "version": "1.0.0"}
    identity.write_text(
        json.dumps(lock | {"keys": [{"name": "signer", "public_key": "../keys/signer.key.pub"}]})
    )
    # the fork's own maintainers policy, where decide, bundle and verify-bundle --fork find it
    write_maintainers(fork / "trace" / "policy" / "maintainers.toml", {"alice": alice})
    cand = fork / CAND
    waive = ["waive", str(cand), CODE, "--justification", "a reviewer checked the change by hand"]
    with contextlib.redirect_stdout(io.StringIO()):
        assert main([*waive, "--key", str(alice)]) == 0
    folder = fork / "trace" / "policy" / "waivers"
    # the bundle's own signing key signs another: ignored, never bundled
    sign_waiver(folder, key, PAGER_ID, "fix-away-from-fault", patch="0" * 64)
    signed = base / "signed"
    cli = ["verify", str(cand), "--fork", str(fork), "-q", "--bundle", str(signed)]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main([*cli, "--key", str(key), "--waivers", str(folder)])
    return World(base, fork, cand, key, identity, identity, signed, rc, buf.getvalue())


def payload(bundle: Path, rel: str) -> Any:
    return json.loads((bundle / PAYLOAD_DIR / rel).read_bytes())


def test_the_signed_waiver_is_bundled_and_verifies(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    assert world.rc == 0, world.out
    d = payload(world.signed, "decisions/signing.json")
    assert [(u["waiver"]["reason"], u["status"]) for u in d["waivers"]] == [(CODE, "unused")]
    w = d["waivers"][0]["waiver"]
    assert (w["approved_by"], w["file"]) == ("alice", WAIVER)
    assert d["maintainers"]["path"] == "trace/policy/maintainers.toml"
    assert [i["why"] for i in d["ignored_waivers"]] == [
        "signed by the key that signs this bundle: a waiver needs a maintainer's signature"
    ]
    files = sorted(p.name for p in (world.signed / PAYLOAD_DIR / "waivers").iterdir())
    assert files == [f"{CODE}.json"]
    assert (world.signed / PAYLOAD_DIR / "policy" / "maintainers.toml").is_file()
    rc, doc = verify_bundle(capsys, world, world.signed, "--fork", str(world.fork))
    assert rc == 0 and doc["passed"], doc
    check = next(c for c in doc["checks"] if c["name"] == "signed waivers")
    assert check["ok"] and check["detail"] == f"{CODE} (unused, alice)", check


def _edit_waiver(files: dict[str, bytes]) -> None:
    """Change the signed statement's justification (the signature no longer covers it)."""
    doc = json.loads(files[WAIVER])
    env = doc["dsseEnvelope"]
    body = json.loads(base64.b64decode(env["payload"]))
    body["justification"] = "nobody reviewed anything; ship it regardless"
    env["payload"] = base64.b64encode(canonical_json(body)).decode()
    files[WAIVER] = canonical_json(doc)


def test_a_tampered_waiver_fails_verify_bundle(
    world: World, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # edited in place: the payload digest catches it
    copy = tmp_path / "copy"
    shutil.copytree(world.signed, copy)
    files: dict[str, bytes] = {WAIVER: (copy / PAYLOAD_DIR / WAIVER).read_bytes()}
    _edit_waiver(files)
    (copy / PAYLOAD_DIR / WAIVER).write_bytes(files[WAIVER])
    rc, doc = verify_bundle(capsys, world, copy, "--fork", str(world.fork))
    # (with a digest failing, the fork's policy files are not consulted: the fork's
    # maintainers policy then counts as unknown too)
    assert rc == 1 and "subject.digest-mismatch" in doc["reasons"], doc
    # edited and the whole bundle signed again with trace's key: the waiver itself fails
    forged = resign(world, tmp_path / "forged", _edit_waiver)
    rc, doc = verify_bundle(capsys, world, forged, "--fork", str(world.fork))
    assert rc == 1 and doc["reasons"] == ["waiver.invalid"], doc
    check = next(c for c in doc["checks"] if c["name"] == "signed waivers")
    assert "does not verify with alice's key" in check["detail"], check


def test_a_waiver_signed_with_the_bundle_key_fails_verify_bundle(
    world: World, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The bundle signer writes its own waiver (and a decision that names it consistently)."""
    own = sign_waiver(tmp_path / "own", world.key, PAGER_ID, CODE)
    raw = own.read_bytes()

    def swap(files: dict[str, bytes]) -> None:
        files[WAIVER] = raw
        d = json.loads(files["decisions/signing.json"])
        d["waivers"][0]["waiver"]["signer"] = hint_of(world.key)
        files["decisions/signing.json"] = canonical_json(d)

    forged = resign(world, tmp_path / "forged", swap)
    rc, doc = verify_bundle(capsys, world, forged, "--fork", str(world.fork))
    assert rc == 1 and doc["reasons"] == ["waiver.invalid"], doc
    check = next(c for c in doc["checks"] if c["name"] == "signed waivers")
    assert "signed by the key that signed this bundle" in check["detail"], check


def test_a_decision_listing_an_unbundled_waiver_fails_verify_bundle(
    world: World, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    def drop(files: dict[str, bytes]) -> None:
        del files[WAIVER]

    forged = resign(world, tmp_path / "forged", drop)
    rc, doc = verify_bundle(capsys, world, forged, "--fork", str(world.fork))
    assert rc == 1 and doc["reasons"] == ["waiver.invalid"], doc


def test_the_report_lists_the_waivers_for_audit(
    world: World, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "r.html"
    cli = ["report", str(world.signed), "--identity", str(world.identity), "-o", str(out)]
    assert main([*cli, "--fork", str(world.fork)]) == 0, capsys.readouterr()
    page = out.read_text()
    row = page.split(f'<tr data-waiver="{CODE}">', 1)[1].split("</tr>", 1)[0]
    assert "unused" in row and "alice" in row and WAIVER in row
    assert "a reviewer checked the change by hand" in row
    assert "IGNORED" in page and "signed by the key that signs this bundle" in page
