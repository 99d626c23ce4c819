"""verify-bundle: a clean bundle passes; each tampering fails with its own reason code.

The bundles carry real records: the verify result and gate records of test_policy_signing's
fakes, their outcomes, the shipped routing policy's decision and a signing decision made by the
shipped signing policy (engine.evidence.decisions.signing_decision), as `trace bundle` does.
"""

from __future__ import annotations

import base64
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine.audit.checks import BundleVerdict, verify_bundle
from engine.audit.identity import IdentityPolicy, load_identity_policy
from engine.build_records import GateRecord
from engine.evidence import PAYLOAD_DIR, SIGNATURE_FILE, STATEMENT_FILE
from engine.evidence.bundle import Assembled, assemble, write_bundle
from engine.evidence.payload import PayloadEntry, json_entry, text_entry
from engine.evidence.replay import FilePin, ReplayRecord
from engine.evidence.statement import PAYLOAD_TYPE
from engine.signing.keymode import sign_with_key
from engine.signing.keys import keygen, load_private_key, load_public_key
from engine.verify_result import VerifyResult
from tests.sigstore_fake import TEST_ISSUER, FakeSigstore, reissue_with_bad_sct, shared
from tests.test_policy_signing import CID, POLICY, TODAY, gates_doc, shipped_route, verify_doc

SIGNER = "signer@trace.test"


def consistent_verify_doc() -> dict[str, Any]:
    """test_policy_signing's passing verify result, with the step refs its verdict rests on."""
    doc = verify_doc()
    for side in ("pre", "post"):  # the target's own exits (what a failure is read from)
        for r in doc[side]["runs"]:
            r.setdefault("invocations", [{"target": "bin/x", "exit_code": r["exit_code"]}])
    ids = ["post-fix"] + [f"post-fix-run@{i}" for i in (1, 2, 3)]
    doc["steps"] = {i: {"id": i, "status": "built", "deterministic": True} for i in ids}
    return doc


def dump(model: Any) -> Any:
    return model.model_dump(mode="json", by_alias=True)


def entries(
    verify: dict[str, Any] | None = None, policy: Path = POLICY / "signing.toml"
) -> list[PayloadEntry]:
    from engine.evidence.decisions import payload_ref, signing_decision

    v = VerifyResult.model_validate(verify or consistent_verify_doc())
    gates = {n: GateRecord.model_validate(g) for n, g in gates_doc().items()}
    assert v.expectation is not None
    gates["expectation"] = v.expectation
    verify_e = json_entry("verify-result.json", "verify", dump(v))
    gate_es = [json_entry(f"gates/{n}.json", "gate", dump(g)) for n, g in sorted(gates.items())]
    outcomes = [
        json_entry(f"outcomes/{ref.id}.json", "run", dump(rec))
        for side in (v.pre, v.post)
        for ref, rec in zip(side.run_steps, side.runs, strict=True)
    ]
    outcomes.append(json_entry("outcomes/expectation.json", "gate", dump(v.expectation)))
    routing = shipped_route()
    sources = [payload_ref(verify_e), *(payload_ref(e) for e in gate_es)]
    decision = signing_decision(v, gates, routing, sources, policy=policy, today=TODAY)
    return [
        json_entry("advisory.json", "advisory", {"id": "OSV-1", "aliases": ["CVE-2026-1"]}),
        text_entry("patches/01-fix.patch", "patch", "--- a/x.c\n+++ b/x.c\n@@ -1 +1 @@\n-a\n+b\n"),
        verify_e,
        *gate_es,
        *outcomes,
        json_entry("decisions/routing.json", "routing", dump(routing)),
        json_entry("decisions/signing.json", "signing", dump(decision)),
    ]


def assembled(
    versions: dict[str, str] | None = None, records: list[PayloadEntry] | None = None
) -> Assembled:
    from engine.evidence.collect import policy_versions

    records = entries() if records is None else records
    if versions is None:
        versions = {}
        for e in records:
            if e.kind in ("routing", "signing"):
                versions |= policy_versions(json.loads(e.data))
    return assemble(
        records,
        replay=ReplayRecord(
            engine_version="0.1.0",
            nix_version="nix (Nix) 2.8.0",
            system="x86_64-linux",
            candidate=FilePin(path="c.toml", sha256="a" * 64),
            graph=FilePin(path="g.toml", sha256="b" * 64),
        ),
        candidate_id=CID,
        policy_versions=versions,
        builder_id="tests",
    )


def key_bundle(out: Path, key: Path, records: list[PayloadEntry]) -> Path:
    asm = assembled(records=records)
    return write_bundle(
        out, asm, sign_with_key(asm.statement_bytes, PAYLOAD_TYPE, load_private_key(key))
    )


def write_policy(
    path: Path,
    *,
    identity: str = SIGNER,
    issuer: str = TEST_ISSUER,
    versions: dict[str, list[str]] | None = None,
    keys: list[dict[str, str]] | None = None,
) -> IdentityPolicy:
    """A signer lock beside copies of the shipped policy files (their versions are known)."""
    for f in POLICY.glob("*.toml"):
        shutil.copy(f, path.parent / f.name)
    path.write_text(
        json.dumps(
            {
                "schema": "trace.signing-identity/v1",
                "version": "1.0.0",
                "keyless": [{"identity": identity, "issuer": issuer}],
                "keys": keys or [],
                "policy_versions": versions or {},
            }
        )
    )
    return load_identity_policy(path)


@pytest.fixture(scope="module")
def fake() -> FakeSigstore:
    return shared()


@pytest.fixture(scope="module")
def keyless_bundle(
    fake: FakeSigstore, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Path]:
    """One keyless-signed bundle for the module (tests copy it before tampering)."""
    from engine.signing.keyless import sign_keyless

    base = tmp_path_factory.mktemp("keyless")
    trust = fake.write_trust_config(base / "trust.json")
    asm = assembled()
    sig = sign_keyless(asm.statement_bytes, token=fake.token(), trust_config=trust, deadline=20)
    return write_bundle(base / "bundle", asm, sig), trust


def run(bundle: Path, policy: IdentityPolicy, trust: Path) -> BundleVerdict:
    return verify_bundle(bundle, policy, trust_config=trust, deadline=20)


def _edit_byte(b: Path) -> None:
    p = b / PAYLOAD_DIR / "advisory.json"
    p.write_bytes(p.read_bytes().replace(b"OSV-1", b"OSV-2"))


def _edit_tlog(field: str) -> Callable[[Path], None]:
    """Change one part of the Rekor entry in statement.sigstore.json."""

    def edit(b: Path) -> None:
        doc = json.loads((b / SIGNATURE_FILE).read_bytes())
        entry = doc["verificationMaterial"]["tlogEntries"][0]
        if field == "time":  # logged an hour after the 10-minute certificate expired
            entry["integratedTime"] = str(int(entry["integratedTime"]) + 3600)
        elif field == "proof":
            entry["inclusionProof"]["hashes"][0] = base64.b64encode(b"\0" * 32).decode()
        elif field == "set":
            sig = bytearray(base64.b64decode(entry["inclusionPromise"]["signedEntryTimestamp"]))
            sig[-1] ^= 0x01
            entry["inclusionPromise"]["signedEntryTimestamp"] = base64.b64encode(sig).decode()
        (b / SIGNATURE_FILE).write_text(json.dumps(doc))

    return edit


def _bad_sct(b: Path) -> None:
    raw = (b / SIGNATURE_FILE).read_text()
    (b / SIGNATURE_FILE).write_text(reissue_with_bad_sct(shared(), raw))


def _edit_statement(b: Path) -> None:
    s = json.loads((b / STATEMENT_FILE).read_bytes())
    s["predicate"]["runDetails"]["builder"]["id"] = "someone-else"
    (b / STATEMENT_FILE).write_text(json.dumps(s))


def _edit_signature(b: Path) -> None:
    doc = json.loads((b / SIGNATURE_FILE).read_bytes())
    sig = bytearray(base64.b64decode(doc["dsseEnvelope"]["signatures"][0]["sig"]))
    sig[-1] ^= 0x01
    doc["dsseEnvelope"]["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()
    (b / SIGNATURE_FILE).write_text(json.dumps(doc))


def _edit_signed_payload(b: Path) -> None:
    """Change the statement inside the envelope (and statement.json to match)."""
    doc = json.loads((b / SIGNATURE_FILE).read_bytes())
    payload = base64.b64decode(doc["dsseEnvelope"]["payload"]).replace(b"tests", b"evil!")
    doc["dsseEnvelope"]["payload"] = base64.b64encode(payload).decode()
    (b / SIGNATURE_FILE).write_text(json.dumps(doc))
    (b / STATEMENT_FILE).write_bytes(payload)


TAMPER: dict[str, tuple[Callable[[Path], None], str]] = {
    "payload byte changed": (_edit_byte, "subject.digest-mismatch"),
    "payload removed": (
        lambda b: (b / PAYLOAD_DIR / "patches" / "01-fix.patch").unlink(),
        "subject.missing-file",
    ),
    "extra file": (
        lambda b: (b / PAYLOAD_DIR / "notes.txt").write_text("hi\n"),
        "subject.extra-file",
    ),
    "statement edited": (_edit_statement, "statement.not-signed"),
    "signature edited": (_edit_signature, "signature.invalid"),
    "signed statement edited": (_edit_signed_payload, "signature.invalid"),
    "signature removed": (lambda b: (b / SIGNATURE_FILE).unlink(), "bundle.unsigned"),
    "extra file at the root": (
        lambda b: (b / "NOTES.md").write_text("trust me\n"),
        "bundle.extra-file",
    ),
    "certificate SCT not from a trusted CT log": (_bad_sct, "signature.sct"),
    "log time after the certificate expired": (_edit_tlog("time"), "signature.time"),
    "inclusion proof edited": (_edit_tlog("proof"), "signature.tlog"),
    "signed entry timestamp edited": (_edit_tlog("set"), "signature.tlog"),
}


def test_clean_keyless_bundle_passes(keyless_bundle: tuple[Path, Path], tmp_path: Path) -> None:
    bundle, trust = keyless_bundle
    v = run(bundle, write_policy(tmp_path / "id.json"), trust)
    assert v.reasons == [] and v.passed
    assert v.mode == "keyless"
    assert v.signer == {"mode": "keyless", "identity": SIGNER, "issuer": TEST_ISSUER}
    names = {c.name for c in v.checks if c.ok}
    assert {"DSSE signature", "signer identity", "certificate, SCT, transparency log"} <= names


@pytest.mark.parametrize("case", sorted(TAMPER))
def test_tamper_matrix(case: str, keyless_bundle: tuple[Path, Path], tmp_path: Path) -> None:
    bundle, trust = keyless_bundle
    copy = tmp_path / "b"
    shutil.copytree(bundle, copy)
    tamper, expected = TAMPER[case]
    tamper(copy)
    v = run(copy, write_policy(tmp_path / "id.json"), trust)
    assert v.reasons == [expected], v.checks
    assert not v.passed


@pytest.mark.parametrize(
    ("policy_kwargs", "expected"),
    [
        ({"identity": "someone@else.test"}, "identity.mismatch"),
        ({"issuer": "https://other-issuer.test"}, "identity.issuer"),
        ({"versions": {}, "drop": "routing.toml"}, "policy.unknown-version"),
    ],
    ids=["wrong identity", "wrong issuer", "unknown policy version"],
)
def test_policy_side_failures(
    policy_kwargs: dict[str, object],
    expected: str,
    keyless_bundle: tuple[Path, Path],
    tmp_path: Path,
) -> None:
    bundle, trust = keyless_bundle
    drop = policy_kwargs.pop("drop", None)
    policy = write_policy(tmp_path / "id.json", **policy_kwargs)  # type: ignore[arg-type]
    if drop:  # the routing policy file is not known here: its version is unknown
        (tmp_path / str(drop)).unlink()
        policy = load_identity_policy(tmp_path / "id.json")
    v = run(bundle, policy, trust)
    assert v.reasons == [expected], v.checks


def test_other_sigstore_instance_is_not_trusted(
    keyless_bundle: tuple[Path, Path], tmp_path: Path
) -> None:
    """Verifying against another instance's trust root fails the chain, not the digests."""
    from tests.sigstore_fake import FakeSigstore as Instance

    other = Instance()
    try:
        other_trust = other.write_trust_config(tmp_path / "other.json")
    finally:
        other.stop()
    bundle, _ = keyless_bundle
    v = run(bundle, write_policy(tmp_path / "id.json"), other_trust)
    assert v.reasons == ["signature.certificate"], v.checks


def test_key_mode_round_trip_and_unknown_key(tmp_path: Path) -> None:
    priv, pub, _ = keygen(tmp_path / "keys" / "k")
    asm = assembled()
    sig = sign_with_key(asm.statement_bytes, PAYLOAD_TYPE, load_private_key(priv))
    bundle = write_bundle(tmp_path / "bundle", asm, sig)
    trusted = write_policy(tmp_path / "id.json", keys=[{"name": "k", "public_key": "keys/k.pub"}])
    v = verify_bundle(bundle, trusted)
    assert v.passed and v.mode == "key", v.checks
    untrusted = write_policy(tmp_path / "id2.json")
    assert verify_bundle(bundle, untrusted).reasons == ["signature.unknown-key"]
    from engine.signing.keys import key_hint

    k = load_public_key(pub)
    assert verify_bundle(bundle, untrusted, extra_keys={key_hint(k): k}).passed
    copy = tmp_path / "b2"
    shutil.copytree(bundle, copy)
    _edit_signature(copy)
    assert verify_bundle(copy, trusted).reasons == ["signature.invalid"]


def test_cli_verify_bundle_json(
    keyless_bundle: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from engine.cli import main

    bundle, trust = keyless_bundle
    write_policy(tmp_path / "id.json")
    args = ["verify-bundle", str(bundle), "--json", "--trust-config", str(trust)]
    assert main([*args, "--identity", str(tmp_path / "id.json")]) == 0
    assert json.loads(capsys.readouterr().out)["passed"] is True
    write_policy(tmp_path / "bad.json", identity="x@y.test")
    assert main([*args, "--identity", str(tmp_path / "bad.json")]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["reasons"] == ["identity.mismatch"]
    assert "identity.mismatch" in doc["reason_details"]


def test_shipped_identity_policy_loads() -> None:
    repo = Path(__file__).resolve().parent.parent
    policy = load_identity_policy(repo / "policy" / "signing-identity.json")
    assert policy.keyless and all(s.issuer.startswith("https://") for s in policy.keyless)
    assert "redaction" in policy.known_versions


def _replace(records: list[PayloadEntry], path: str, change: Callable[[Any], None]) -> None:
    """Edit one JSON payload entry in place (before the bundle is assembled and signed)."""
    i = next(n for n, e in enumerate(records) if e.path == path)
    doc = json.loads(records[i].data)
    change(doc)
    records[i] = json_entry(path, records[i].kind, doc)


def _post_fails() -> list[PayloadEntry]:
    """An honest bundle of a fix that does not hold: the policy denies, every record agrees."""
    doc = consistent_verify_doc()
    for r in doc["post"]["runs"]:
        r["exit_code"] = 1
        r["invocations"][0]["exit_code"] = 1
    doc["claims"][1].update(holds=False, reason="post-fix-still-fails")
    doc.update(passed=False, reasons=["post-fix-still-fails"])
    return entries(doc)


def _forged_allow() -> list[PayloadEntry]:
    records = _post_fails()

    def allow(d: Any) -> None:
        d.update(decision="allow", reasons=[])

    _replace(records, "decisions/signing.json", allow)
    return records


def _edited_after_deciding() -> list[PayloadEntry]:
    records = entries()
    _replace(records, "verify-result.json", lambda d: d.update(package="other"))
    return records


def _outcome_forged() -> list[PayloadEntry]:
    records = entries()
    _replace(records, "outcomes/pre-fix-run@2.json", lambda d: d.update(stdout_tail="quiet\n"))
    return records


def _verdict_forged() -> list[PayloadEntry]:
    doc = consistent_verify_doc()
    doc["passed"] = False  # no claim fails
    return entries(doc)


def _loosened_policy(tmp: Path) -> list[PayloadEntry]:
    """Decided by a signing policy that keeps the shipped version but asks for 1 run."""
    loose = tmp / "loose"
    loose.mkdir()
    shutil.copy(POLICY / "reasons.toml", loose / "reasons.toml")
    text = (POLICY / "signing.toml").read_text()
    assert "min_runs = 3" in text
    (loose / "signing.toml").write_text(text.replace("min_runs = 3", "min_runs = 1"))
    return entries(policy=loose / "signing.toml")


def _evidence_outside() -> list[PayloadEntry]:
    """The decision names evidence outside the bundle (the audit: it passed)."""
    records = entries()

    def outside(d: Any) -> None:
        d["evidence"][0]["path"] = "payload/../../outside.txt"

    _replace(records, "decisions/signing.json", outside)
    return records


RECORD_CASES: dict[str, tuple[Callable[[Path], list[PayloadEntry]], str]] = {
    "decision evidence outside the bundle": (
        lambda _: _evidence_outside(),
        "decision.evidence-mismatch",
    ),
    "no signing decision": (
        lambda _: [e for e in entries() if e.path != "decisions/signing.json"],
        "decision.missing",
    ),
    "the policy denied": (lambda _: _post_fails(), "decision.denied"),
    "a deny relabelled allow": (lambda _: _forged_allow(), "decision.not-reproduced"),
    "verify result edited after deciding": (
        lambda _: _edited_after_deciding(),
        "decision.evidence-mismatch",
    ),
    "outcome differs from the verify result": (lambda _: _outcome_forged(), "records.disagree"),
    "verdict does not follow from its claims": (
        lambda _: _verdict_forged(),
        "verify.not-reproduced",
    ),
    "loosened policy under the same version": (_loosened_policy, "policy.digest-mismatch"),
}


@pytest.mark.parametrize("case", sorted(RECORD_CASES))
def test_signed_but_inconsistent_records(case: str, tmp_path: Path) -> None:
    """Each bundle is honestly signed over lying or disagreeing records: only the offline
    re-checks of the records (no builds) can tell, each with its own reason code."""
    priv, _, _ = keygen(tmp_path / "keys" / "k")
    make, expected = RECORD_CASES[case]
    bundle = key_bundle(tmp_path / "b", priv, make(tmp_path))
    policy = write_policy(tmp_path / "id.json", keys=[{"name": "k", "public_key": "keys/k.pub"}])
    v = verify_bundle(bundle, policy)
    assert v.reasons == [expected], v.checks
    assert next(c for c in v.checks if c.reason == expected).detail


def test_honest_key_bundle_passes_every_record_check(tmp_path: Path) -> None:
    priv, _, _ = keygen(tmp_path / "keys" / "k")
    bundle = key_bundle(tmp_path / "b", priv, entries())
    policy = write_policy(tmp_path / "id.json", keys=[{"name": "k", "public_key": "keys/k.pub"}])
    v = verify_bundle(bundle, policy)
    assert v.passed, v.checks
    names = {c.name for c in v.checks if c.ok}
    assert {
        "signing decision",
        "decision evidence",
        "records agree",
        "verify verdict",
        "signing decision re-run",
        "policy digests",
        "nothing beside the statement",
    } <= names
    rerun = next(c for c in v.checks if c.name == "signing decision re-run")
    assert rerun.detail.endswith(": allow"), rerun


def test_every_reason_code_is_catalogued_and_documented() -> None:
    """Each code the checks can emit is in REASONS, and docs/evidence.md lists every code and
    every redaction rule (so the user docs cannot drift from the code)."""
    import re

    from engine.audit.reasons import REASONS
    from engine.evidence.redact import RULES

    repo = Path(__file__).resolve().parent.parent
    emitted: set[str] = set()
    for f in [
        *(repo / "engine" / "audit").glob("*.py"),
        *(repo / "engine" / "signoff").glob("*.py"),
    ]:
        text = f.read_text()
        emitted |= set(
            re.findall(
                r'"((?:bundle|signature|identity|payload|statement|subject|'
                r'policy|decision|records|verify|replay)\.[a-z-]+)"',
                text,
            )
        )
    emitted.discard("replay.nix")  # a file name (rebuild.py), not a code
    assert emitted - set(REASONS) == set(), "emitted but not catalogued"
    assert {"decision.not-reproduced", "bundle.extra-file", "signature.time"} <= emitted
    docs = (repo / "docs" / "evidence.md").read_text()
    assert [c for c in REASONS if f"| `{c}` |" not in docs] == []
    assert [r.id for r in RULES if f"| `{r.id}` |" not in docs] == []
    assert "docs/evidence.md" in (repo / "README.md").read_text()
