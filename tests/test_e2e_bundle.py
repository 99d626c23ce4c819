"""End to end with real nix on the fixture fork: verify -> route -> decide -> bundle -> sign ->
verify-bundle (key mode and keyless through the offline fake Sigstore), replay agreeing with the
real pipeline and disagreeing with forged records, and a signing-policy deny that signs nothing.

One module-scoped copy of tests/fixtures/fork; the pager candidate builds fast, and every later
command answers from the state dir's index.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import shutil
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from engine.cli import main
from engine.evidence import PAYLOAD_DIR, SIGNATURE_FILE, STATEMENT_FILE
from engine.evidence.bundle import INDEX_PATH, RESERVED, assemble, write_bundle
from engine.evidence.payload import PayloadEntry, canonical_diff, canonical_json
from engine.evidence.replay import ReplayRecord
from engine.evidence.statement import PAYLOAD_TYPE
from engine.signing.keymode import sign_with_key
from engine.signing.keys import keygen, load_private_key
from tests.sigstore_fake import TEST_ISSUER, shared
from tests.verified import VerifiedFork

POLICY_DIR = Path(__file__).resolve().parent.parent / "policy"


def shipped_version(name: str) -> str:
    """The [policy] version of a shipped policy file (bumped whenever it changes)."""
    return str(tomllib.loads((POLICY_DIR / name).read_text())["policy"]["version"])


pytestmark = pytest.mark.nix

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "fixtures" / "fork"
CAND = "trace/candidates/pager-last-page/candidate.toml"
PAGER_ID = "TRACE-2026-0002-pager"
SIGNER = "signer@trace.test"


@dataclass
class World:
    base: Path
    fork: Path
    cand: Path
    key: Path
    identity: Path
    deny_policy: Path
    signed: Path
    rc: int
    out: str


def payload_files(bundle: Path) -> dict[str, bytes]:
    payload = bundle / PAYLOAD_DIR
    return {
        p.relative_to(payload).as_posix(): p.read_bytes()
        for p in sorted(payload.rglob("*"))
        if p.is_file()
    }


def load(bundle: Path, path: str) -> Any:
    return json.loads((bundle / PAYLOAD_DIR / path).read_bytes())


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    base = tmp_path_factory.mktemp("e2e")
    fork = base / "fork"
    shutil.copytree(FIXTURE, fork, ignore=shutil.ignore_patterns(".trace", "result*"))
    key, _, _ = keygen(base / "keys" / "signer.key")
    # the signer lock beside copies of the shipped policy files (their versions are known)
    policy = base / "policy"
    policy.mkdir()
    for f in (REPO / "policy").glob("*.toml"):
        shutil.copy(f, policy / f.name)
    identity = policy / "signing-identity.json"
    identity.write_text(
        json.dumps(
            {
                "schema": "trace.signing-identity/v1",
                "version": "1.0.0",
                "keyless": [{"identity": SIGNER, "issuer": TEST_ISSUER}],
                "keys": [{"name": "signer", "public_key": "../keys/signer.key.pub"}],
            }
        )
    )
    # a signing policy that denies the pager fix: it asks for more reproducer runs than it has
    # (inside the fork, where a bundle's replay record can name it)
    strict = fork / "trace" / "strict"
    strict.mkdir()
    shutil.copy(REPO / "policy" / "reasons.toml", strict / "reasons.toml")
    text = (REPO / "policy" / "signing.toml").read_text()
    assert "min_runs = 3" in text
    (strict / "signing.toml").write_text(text.replace("min_runs = 3", "min_runs = 4"))

    signed = base / "signed"
    cand = fork / CAND
    cli = ["verify", str(cand), "--fork", str(fork), "-q", "--bundle", str(signed)]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main([*cli, "--key", str(key)])
    return World(
        base, fork, cand, key, identity, strict / "signing.toml", signed, rc, buf.getvalue()
    )


def verify_bundle(
    capsys: pytest.CaptureFixture[str], world: World, bundle: Path, *extra: str
) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    rc = main(["verify-bundle", str(bundle), "--identity", str(world.identity), "--json", *extra])
    return rc, json.loads(capsys.readouterr().out)


def test_trace_verify_bundle_signs_and_the_replay_agrees(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    assert world.rc == 0, world.out
    assert "PASS: every claim holds" in world.out
    assert f"signing policy: ALLOW (trace-signing {shipped_version('signing.toml')}" in world.out
    assert f"bundle: {world.signed} (" in world.out and "signed (key)" in world.out
    assert (world.signed / SIGNATURE_FILE).is_file()
    rc, doc = verify_bundle(capsys, world, world.signed, "--fork", str(world.fork), "--replay")
    assert rc == 0 and doc["passed"] and doc["mode"] == "key", doc
    replay = next(c for c in doc["checks"] if c["name"] == "replay")
    assert replay["ok"] and "judged again" in replay["detail"], replay
    # the run's per-step timings beside the payload: vouched for, never replayed (issue 31)
    timings = next(c for c in doc["checks"] if c["name"] == "step timings (informational)")
    assert timings["ok"] and timings["detail"].startswith("intact:"), timings
    steps = json.loads((world.signed / "timings.json").read_bytes())["steps"]
    assert {"pre-fix", "post-fix", "pre-fix-run@1"} <= {s["step"] for s in steps}
    # built here (a bar from its start to its end) or not (the store had it: a mark)
    assert all(s["end"] >= s["start"] >= 0 for s in steps), steps
    # (a step whose .drv another step shares gets Nix's start line once: a mark, too)
    built = [s["ends"] for s in steps if s["status"] == "built"]
    assert set(built) <= {"registered", "bound", "instant"}, steps
    assert all(s["ends"] == "instant" for s in steps if s["status"] != "built"), steps
    assert "timings.json" not in payload_files(world.signed)


def test_the_bundle_holds_every_claim_link_by_link(world: World) -> None:
    b = world.signed
    files = payload_files(b)
    result = load(b, "verify-result.json")
    assert result["candidate"] == PAGER_ID and result["passed"] is True
    cand_dir = world.cand.parent
    # advisory, upstream reference, candidate, patch in canonical -U0 form, reproducer + data
    assert files["advisory.json"] == (cand_dir / "advisory.json").read_bytes()
    assert load(b, "upstream.json")["upstream_fix"].startswith("https://example.invalid/pager/")
    assert files["patches/01-fix.patch"] == canonical_diff((cand_dir / "fix.patch").read_bytes())
    hunk_lines = [ln for ln in files["patches/01-fix.patch"].decode().splitlines()[2:]]
    assert all(ln[:1] in ("@", "+", "-") for ln in hunk_lines), "-U0: no context lines"
    assert files["reproducer/repro.sh"] == (cand_dir / "repro.sh").read_bytes()
    assert files["reproducer/data/repro.py"] == (cand_dir / "repro.py").read_bytes()
    # all K run records of both sides, as built, and the same as the verify result's
    for side in ("pre", "post"):
        runs = result[side]["runs"]
        assert len(runs) == 3
        for n, run in enumerate(runs, 1):
            outcome = load(b, f"outcomes/{side}-fix-run@{n}.json")
            # the run is not told its side (the reproducer must not know it); the engine adds
            # it to the verify result from the step
            assert "side" not in outcome and run["side"] == side and outcome["run"] == n
            assert {k: v for k, v in run.items() if k in outcome} == outcome
    # every gate record the result carries, each in its own file
    gate_names = {"expectation", *result["gates"]}
    assert {p for p in files if p.startswith("gates/")} == {f"gates/{g}.json" for g in gate_names}
    assert load(b, "gates/expectation.json") == result["expectation"]
    for name, record in result["gates"].items():
        assert load(b, f"gates/{name}.json") == record
    # the decisions, with policy versions, naming the bundled files they read by digest
    signing = load(b, "decisions/signing.json")
    routing = load(b, "decisions/routing.json")
    assert signing["decision"] == "allow" and signing["candidate"] == PAGER_ID
    assert signing["routing"] == routing and routing["state"] == "human-review-required"
    evidence = {e["path"]: e["sha256"] for e in signing["evidence"]}
    assert set(evidence) == {"payload/verify-result.json"} | {
        f"payload/gates/{g}.json" for g in gate_names
    }
    for path, digest in evidence.items():
        assert hashlib.sha256(files[path.removeprefix("payload/")]).hexdigest() == digest
    statement = json.loads((b / STATEMENT_FILE).read_bytes())
    versions = statement["predicate"]["buildDefinition"]["internalParameters"]["policy_versions"]
    assert versions == {
        "redaction": "trace.redaction/2",
        "trace-critical-packages": "1.0.0",
        "trace-reasons": shipped_version("reasons.toml"),
        "trace-routing": "1.0.0",
        "trace-signing": shipped_version("signing.toml"),
    }
    # the replay record pins what `trace verify` loaded, fork-relative or `trace:`
    replay = load(b, "replay.json")
    assert replay["context"] == "verify"
    assert replay["candidate"]["path"] == CAND and replay["graph"]["path"] == "trace.toml"
    assert "trace:graphs/verify.toml" in {f["path"] for f in replay["graph_files"]}
    assert replay["package_set"]["path"] == "." and replay["package_set"]["digest"]
    assert {s: p["key"] for s, p in replay["steps"].items()} == {
        s: r["key"] for s, r in result["steps"].items()
    }
    # the index names the claim kind of every other payload file
    index = load(b, INDEX_PATH)["files"]
    assert set(index) == set(files) - {INDEX_PATH}
    assert index["patches/01-fix.patch"]["kind"] == "patch"
    assert index["outcomes/pre-fix-run@1.json"]["kind"] == "run"
    assert index["decisions/signing.json"]["kind"] == "signing"


def resign(world: World, out: Path, edit: Callable[[dict[str, bytes]], None]) -> Path:
    """A signer who lies: edit payload files, then assemble and sign them again honestly."""
    files = payload_files(world.signed)
    kinds = load(world.signed, INDEX_PATH)["files"]
    replay = ReplayRecord.model_validate_json(files["replay.json"])
    edit(files)
    entries = [
        PayloadEntry(path=p, kind=kinds[p]["kind"], data=d, media_type=kinds[p]["media_type"])
        for p, d in files.items()
        if p not in RESERVED
    ]
    statement = json.loads((world.signed / STATEMENT_FILE).read_bytes())
    versions = statement["predicate"]["buildDefinition"]["internalParameters"]["policy_versions"]
    versions.pop("redaction")
    asm = assemble(
        entries,
        replay=replay,
        candidate_id=PAGER_ID,
        policy_versions=versions,
        builder_id="forger",
    )
    sig = sign_with_key(asm.statement_bytes, PAYLOAD_TYPE, load_private_key(world.key))
    return write_bundle(out, asm, sig)


def _edit_json(path: str, change: Callable[[Any], None]) -> Callable[[dict[str, bytes]], None]:
    def edit(files: dict[str, bytes]) -> None:
        doc = json.loads(files[path])
        change(doc)
        files[path] = canonical_json(doc)

    return edit


def test_verify_bundle_catches_forged_records(
    world: World, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    def quiet_pre_run(doc: Any) -> None:
        doc["stdout_tail"] = "page 11: [101, 102, 103]\n"

    def quiet_pre_result(doc: Any) -> None:
        doc["pre"]["runs"][0]["stderr_tail"] = ""

    # signature and digests hold (re-signed honestly); the records no longer agree with each
    # other, and an edited verify result no longer matches the digest the decision names
    cases = {
        "outcome": (
            _edit_json("outcomes/pre-fix-run@1.json", quiet_pre_run),
            ["records.disagree"],
        ),
        "result": (
            _edit_json("verify-result.json", quiet_pre_result),
            ["decision.evidence-mismatch", "records.disagree"],
        ),
    }
    for name, (edit, reasons) in cases.items():
        forged = resign(world, tmp_path / name, edit)
        rc, doc = verify_bundle(capsys, world, forged)
        assert rc == 1 and doc["reasons"] == reasons, (name, doc)
        detail = next(c["detail"] for c in doc["checks"] if c["reason"] == "records.disagree")
        assert "outcomes/pre-fix-run@1.json differs from verify-result.json" in detail, detail


def test_a_signing_policy_deny_writes_no_signature(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    out = world.base / "denied"
    capsys.readouterr()
    rc = main(
        [
            "verify",
            str(world.cand),
            "--fork",
            str(world.fork),
            "-q",
            "--bundle",
            str(out),
            "--key",
            str(world.key),
            "--signing-policy",
            str(world.deny_policy),
        ]
    )
    printed = capsys.readouterr().out
    assert rc == 1, printed
    assert "PASS: every claim holds" in printed  # the claims hold; the policy says no
    assert "DENY too-few-runs" in printed and "not signed" in printed
    assert not (out / SIGNATURE_FILE).exists()
    signing = load(out, "decisions/signing.json")
    assert signing["decision"] == "deny"
    assert [r["code"] for r in signing["reasons"]] == ["too-few-runs"]
    rc, doc = verify_bundle(capsys, world, out)
    # the strict policy keeps the shipped version number with other content: flagged too
    assert rc == 1, doc
    assert doc["reasons"] == ["bundle.unsigned", "decision.denied", "policy.digest-mismatch"]


def test_keyless_bundle_through_the_fake_sigstore(
    world: World, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fake = shared()
    trust = fake.write_trust_config(tmp_path / "trust.json")
    out = tmp_path / "keyless"
    common = ["--fork", str(world.fork), "--trust-config", str(trust)]
    token = ["--identity-token", fake.token()]
    lock = ["--signer-lock", str(world.identity)]
    rc = main(["bundle", str(world.cand), *common, "--out", str(out), "--sign", *token, *lock])
    assert rc == 0, capsys.readouterr()
    rc, doc = verify_bundle(capsys, world, out, "--trust-config", str(trust))
    assert rc == 0 and doc["mode"] == "keyless", doc
    assert doc["signer"] == {"mode": "keyless", "identity": SIGNER, "issuer": TEST_ISSUER}


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_a_forged_result_file_is_refused_and_the_builds_deny(
    world: World,
    verified_fork: VerifiedFork,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """The audit: a failing candidate's result with a passing candidate's claims and gates,
    `trace bundle --result forged.json --key K` signed it (ALLOW). Verdicts now come from the
    cached builds; the file is only cross-checked. The failing candidate is the one the
    session's verified fork verified (tests/verified.py: the calibration table and test_verify
    read the same verify); the passing claims are this module's pager verify's."""
    assert verified_fork.verify("cparse-other-failure") == 1
    other = verified_fork.candidate("cparse-other-failure")
    failing = verified_fork.result_doc("cparse-other-failure")
    assert failing["candidate"] == "TRACE-2026-0001-cparse-other-failure"
    passing = json.loads((world.fork / ".trace" / "verify" / f"{PAGER_ID}.json").read_text())
    assert failing["passed"] is False
    forged = failing | {k: passing[k] for k in ("passed", "reasons", "claims", "expectation")}
    forged["gates"] = passing["gates"]
    (tmp_path / "forged.json").write_text(json.dumps(forged))
    common = ["--fork", str(verified_fork.fork), "--key", str(world.key)]
    rc, _, err = _cli(
        capsys,
        "bundle",
        str(other),
        *common,
        "--result",
        str(tmp_path / "forged.json"),
        "--out",
        str(tmp_path / "forged"),
    )
    assert rc == 2 and "the result file does not match the builds" in err, err
    assert "differs at: claims.0" in err
    assert not (tmp_path / "forged").exists()
    rc, out, _ = _cli(capsys, "decide", str(other), "--fork", str(verified_fork.fork))
    assert rc == 1 and out.startswith("DENY") and "pre-fix-wrong-failure" in out
    rc, _, err = _cli(
        capsys,
        "decide",
        str(other),
        "--fork",
        str(verified_fork.fork),
        "--result",
        str(tmp_path / "forged.json"),
    )
    assert rc == 2 and "does not match the builds" in err
    # without the file: the builds' verdict, denied, nothing signed
    rc, out, _ = _cli(capsys, "bundle", str(other), *common, "--out", str(tmp_path / "real"))
    assert rc == 1 and "DENY pre-fix-wrong-failure" in out
    assert not (tmp_path / "real" / SIGNATURE_FILE).exists()


def test_a_patch_changed_after_verify_is_refused_by_decide_and_bundle(
    world: World, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    patch = world.cand.parent / "fix.patch"
    original = patch.read_bytes()
    # still a valid patch of the same line: the fix itself is swapped after verify
    swapped = original.replace(
        b"+    return (total + size - 1) // size", b"+    return total // size + 1"
    )
    assert swapped != original
    try:
        patch.write_bytes(swapped)
        rc, _, err = _cli(capsys, "decide", str(world.cand), "--fork", str(world.fork))
        assert rc == 2 and "not verified, or its inputs changed since" in err, err
        assert "param 'patches' changed: " in err and "post-fix" in err, err
        assert "pre-fix" not in err  # the unpatched side is unchanged
        rc, _, err = _cli(
            capsys,
            "bundle",
            str(world.cand),
            "--fork",
            str(world.fork),
            "--key",
            str(world.key),
            "--out",
            str(tmp_path / "stale"),
        )
        assert rc == 2 and "not verified, or its inputs changed since" in err, err
        assert not (tmp_path / "stale").exists()
    finally:
        patch.write_bytes(original)
    # the original patch again: the builds are in the index, decide allows without building
    rc, out, _ = _cli(capsys, "decide", str(world.cand), "--fork", str(world.fork))
    assert rc == 0, out


def test_bundle_takes_a_decision_record_only_from_the_same_evidence(
    world: World, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bundle = ["bundle", str(world.cand), "--fork", str(world.fork)]
    # `trace decide`'s record is bundled as written: it names the very payload files (by
    # digest) that the bundle holds, both judged from the same cached builds
    assert main(["decide", str(world.cand), "--fork", str(world.fork)]) == 0
    record = world.fork / ".trace" / "decisions" / f"{PAGER_ID}.json"
    out = tmp_path / "decided"
    rc, _, err = _cli(
        capsys, *bundle, "--decision", str(record), "--out", str(out), "--key", str(world.key)
    )
    assert rc == 0, err
    assert (out / SIGNATURE_FILE).is_file()
    assert load(out, "decisions/signing.json") == json.loads(record.read_text())
    named = {e["path"] for e in json.loads(record.read_text())["evidence"]}
    assert "payload/verify-result.json" in named and "payload/gates/determinism.json" in named

    # ... and refused when it was made from other evidence (here: an extra gate record that
    # this bundle does not carry)
    extra = tmp_path / "review.json"
    extra.write_text(json.dumps({"schema": "trace.gate/v1", "gate": "review", "passed": True}))
    decided = tmp_path / "with-review.json"
    args = ["decide", str(world.cand), "--fork", str(world.fork), "--gate", str(extra)]
    assert main([*args, "--out", str(decided)]) == 0
    rc, _, err = _cli(capsys, *bundle, "--decision", str(decided), "--out", str(tmp_path / "y"))
    assert rc == 2 and "made from other evidence" in err, err
    assert not (tmp_path / "y").exists()
