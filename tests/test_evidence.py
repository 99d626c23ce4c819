"""Evidence bundles: canonical forms, redaction, the statement over every payload file, writing."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from pathlib import Path

import pytest
import rfc8785
from pydantic import ValidationError

from engine.build_records import GateRecord
from engine.errors import InputError
from engine.evidence import PAYLOAD_DIR, SIGNATURE_FILE, STATEMENT_FILE
from engine.evidence.bundle import (
    INDEX_PATH,
    REDACTION_PATH,
    REPLAY_PATH,
    assemble,
    write_bundle,
)
from engine.evidence.payload import (
    PayloadEntry,
    canonical_diff,
    canonical_json,
    canonical_text,
    json_entry,
    text_entry,
)
from engine.evidence.redact import REDACTION_VERSION, redact_text
from engine.evidence.replay import FilePin, ReplayRecord, StepPin
from engine.run import RunResult, StepResult
from engine.verify_result import VerifyResult

SECRET_JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4eXoifQ.c2lnbmF0dXJlLWJ5dGVz"
SECRET_GH = "ghp_" + "A1b2C3d4" * 5


def replay_record() -> ReplayRecord:
    return ReplayRecord(
        engine_version="0.1.0",
        nix_version="nix (Nix) 2.8.0",
        system="x86_64-linux",
        candidate=FilePin(path="cands/c.toml", sha256="a" * 64),
        graph=FilePin(path="graphs/verify.toml", sha256="b" * 64),
        steps={"pre@1": StepPin(key="k" * 64, drv="/nix/store/x-pre.drv", outcome_sha256="c" * 64)},
    )


def test_canonical_text_normalises_line_endings() -> None:
    assert canonical_text("a\r\nb\rc\n\n\n") == b"a\nb\nc\n"
    assert canonical_text("") == b""


def test_canonical_json_sorts_keys() -> None:
    assert canonical_json({"b": 1, "a": [2]}) == b'{\n  "a": [\n    2\n  ],\n  "b": 1\n}\n'


def test_canonical_diff_matches_git_u0(tmp_path: Path) -> None:
    """A -U3 diff (colour and CRLF added) canonicalises to exactly what `git diff -U0` prints."""
    repo = tmp_path / "r"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    old = [f"line {i}" for i in range(1, 31)]
    (repo / "f.c").write_text("\n".join(old) + "\n")
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    new = list(old)
    new[2] = "changed 3"
    del new[10:12]
    new.insert(20, "added after 22")
    new.append("added at end")
    (repo / "f.c").write_text("\n".join(new) + "\n")
    u3 = subprocess.run([*git, "diff", "--color=always"], capture_output=True, check=True).stdout
    u0 = subprocess.run([*git, "diff", "-U0", "--no-color"], capture_output=True, check=True).stdout
    assert b"\x1b[" in u3
    # git appends a section heading to hunk headers ("@@ -3 +3 @@ line 2"); the canonical form
    # drops it, as it depends on git's funcname configuration, not on the change.
    bare_u0 = re.sub(rb"^(@@ [^@]* @@).*$", rb"\1", u0, flags=re.M)
    assert bare_u0 != u0
    assert canonical_diff(u3.replace(b"\n", b"\r\n")) == canonical_text(bare_u0)
    assert canonical_diff(u0) == canonical_text(bare_u0)


def test_payload_paths_must_be_plain_relative() -> None:
    for bad in ["../x", "/etc/passwd", "a//b", "a/./b", "", "a\\b"]:
        with pytest.raises(ValidationError):
            PayloadEntry(path=bad, kind="other", data=b"")


def test_redaction_rules_each_fire() -> None:
    text = (
        f"token: {SECRET_JWT}\n"
        f"push with {SECRET_GH}\n"
        "mail alice@example.org\n"
        "Authorization: Bearer abc.def-ghi\n"
        "password = hunter22hunter\n"
        "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY-----\n"
        "key AKIAABCDEFGHIJKLMNOP\n"
    )
    out, counts = redact_text(text)
    for secret in [SECRET_JWT, SECRET_GH, "alice@example.org", "abc.def-ghi", "hunter22", "MHcC"]:
        assert secret not in out
    assert "AKIAABCDEFGHIJKLMNOP" not in out
    assert counts == {
        "private-key": 1,
        "jwt": 1,
        "github-token": 1,
        "aws-access-key": 1,
        "bearer": 1,
        "secret-assignment": 1,
        "email": 1,
    }
    assert "Authorization: Bearer [REDACTED:bearer]" in out
    assert "password = [REDACTED:secret-assignment]" in out


def test_assemble_redacts_before_hashing_and_covers_every_file(tmp_path: Path) -> None:
    entries = [
        text_entry("rationale.md", "rationale", f"written by bob@example.org\r\nsee {SECRET_GH}"),
        json_entry("outcomes/pre@1.json", "run", {"exit_code": 1, "signal": None}),
        PayloadEntry(
            path="reproducer/data/blob.bin",
            kind="reproducer",
            data=b"\xff\x00\xfe",
            media_type="application/octet-stream",
        ),
    ]
    asm = assemble(
        entries,
        replay=replay_record(),
        candidate_id="CVE-1",
        policy_versions={"trace-signing": "1.0.0"},
        builder_id="test",
    )
    out = write_bundle(tmp_path / "b", asm, signature=None)
    files = sorted(
        p.relative_to(out / PAYLOAD_DIR).as_posix() for p in (out / PAYLOAD_DIR).rglob("*")
    )
    files = [f for f in files if (out / PAYLOAD_DIR / f).is_file()]
    assert files == sorted(
        [
            "outcomes/pre@1.json",
            "rationale.md",
            "reproducer/data/blob.bin",
            INDEX_PATH,
            REDACTION_PATH,
            REPLAY_PATH,
        ]
    )
    index = json.loads((out / PAYLOAD_DIR / INDEX_PATH).read_bytes())
    assert index["files"] == {
        "outcomes/pre@1.json": {"kind": "run", "media_type": "application/json"},
        "rationale.md": {"kind": "rationale", "media_type": "text/plain"},
        "reproducer/data/blob.bin": {
            "kind": "reproducer",
            "media_type": "application/octet-stream",
        },
        REDACTION_PATH: {"kind": "redaction", "media_type": "application/json"},
        REPLAY_PATH: {"kind": "replay", "media_type": "application/json"},
    }
    statement = json.loads((out / STATEMENT_FILE).read_bytes())
    assert (out / STATEMENT_FILE).read_bytes() == rfc8785.dumps(statement)
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == "https://slsa.dev/provenance/v1"
    assert [s["name"] for s in statement["subject"]] == files
    for s in statement["subject"]:
        data = (out / PAYLOAD_DIR / s["name"]).read_bytes()
        assert s["digest"]["sha256"] == hashlib.sha256(data).hexdigest()
    rationale = (out / PAYLOAD_DIR / "rationale.md").read_bytes()
    assert b"bob@example.org" not in rationale and SECRET_GH.encode() not in rationale
    assert rationale.endswith(b"[REDACTED:github-token]\n") and b"\r" not in rationale
    redaction = json.loads((out / PAYLOAD_DIR / REDACTION_PATH).read_bytes())
    assert redaction["applied"] == {"rationale.md": {"email": 1, "github-token": 1}}
    assert (out / PAYLOAD_DIR / "reproducer/data/blob.bin").read_bytes() == b"\xff\x00\xfe"
    bd = statement["predicate"]["buildDefinition"]
    assert bd["internalParameters"]["policy_versions"] == {
        "redaction": REDACTION_VERSION,
        "trace-signing": "1.0.0",
    }
    pre = next(d for d in bd["resolvedDependencies"] if d["name"] == "pre@1")
    # the uri is absolute; the step key goes under its own name, never as the .drv's digest
    assert pre["uri"] == "file:///nix/store/x-pre.drv" and pre["digest"] == {}
    assert pre["annotations"] == {"trace.stepKey": "k" * 64}
    assert not (out / SIGNATURE_FILE).exists()
    with pytest.raises(InputError, match="already exists"):
        write_bundle(out, asm, signature=None)
    assert [p.name for p in tmp_path.iterdir()] == ["b"]  # no temp directory left behind


def test_reserved_and_duplicate_paths_rejected() -> None:
    for entries in (
        [text_entry(REPLAY_PATH, "other", "x")],
        [text_entry(INDEX_PATH, "other", "x")],
        [text_entry("a.txt", "other", "x"), text_entry("a.txt", "other", "y")],
    ):
        with pytest.raises(InputError):
            assemble(
                entries,
                replay=replay_record(),
                candidate_id="c",
                policy_versions={},
                builder_id="t",
            )


def test_pins_name_fork_files_relatively_and_shipped_files_by_trace_ref(tmp_path: Path) -> None:
    from engine.evidence.replay import pin_name, pinned_path
    from engine.paths import data_dir

    (tmp_path / "trace.toml").write_text("version = 1\n")
    shipped = data_dir() / "graphs" / "verify.toml"
    assert pin_name(tmp_path / "trace.toml", tmp_path) == "trace.toml"
    assert pin_name(shipped, tmp_path) == "trace:graphs/verify.toml"
    assert pinned_path("trace:graphs/verify.toml", tmp_path) == shipped.resolve()
    assert pinned_path("trace.toml", tmp_path) == (tmp_path / "trace.toml").resolve()
    with pytest.raises(InputError, match="outside the project root"):
        pin_name(Path("/etc/hostname"), tmp_path)


def _gate(name: str, passed: bool = True) -> GateRecord:
    return GateRecord(gate=name, passed=passed, score=1.0 if passed else 0.0)


def _step(sid: str, outcome: object) -> StepResult:
    return StepResult(id=sid, key=f"key-{sid}", status="cached", outcome=outcome)


def test_gate_records_come_from_the_run_and_files_each_once() -> None:
    from engine.evidence.collect import gate_entries, gate_records

    scope = _gate("scope", False)
    # an explicit fake: only the fields gate_records reads (no builds behind it)
    result = VerifyResult.model_construct(expectation=None, gates={"scope": scope})
    run = RunResult(
        graph="g",
        steps={
            "gate-scope": _step("gate-scope", scope.model_dump(by_alias=True)),
            "gate-extra": _step("gate-extra", _gate("extra").model_dump(by_alias=True)),
            "run@1": _step("run@1", {"schema": "trace.run/v1", "exit_code": 0}),
        },
    )
    found = gate_records(result, run, [("cov.json", _gate("coverage"))])
    # determinism: derived from the run's --check results (here: no post-fix build at all)
    assert sorted(found) == ["coverage", "determinism", "extra", "scope"]
    assert found["scope"] == scope and not found["determinism"].passed
    assert [e.path for e in gate_entries(found)] == [
        "gates/coverage.json",
        "gates/determinism.json",
        "gates/extra.json",
        "gates/scope.json",
    ]
    with pytest.raises(InputError, match="a second record for gate 'scope'") as info:
        gate_records(result, run, [("again.json", _gate("scope"))])
    assert info.value.file == "again.json"


def test_decide_s_evidence_refuses_a_second_record_for_one_gate_the_same_way(
    tmp_path: Path,
) -> None:
    """`trace decide`'s --gate files go through the one check `trace verify --gate` uses."""
    from engine.policy.evidence_view import load_evidence

    first, again = tmp_path / "scope.json", tmp_path / "again.json"
    for path in (first, again):
        path.write_text(_gate("scope").model_dump_json(), encoding="utf-8")
    (tmp_path / "cov.json").write_text(_gate("coverage").model_dump_json(), encoding="utf-8")
    ok = load_evidence("c", None, [first, tmp_path / "cov.json"])
    assert sorted(ok.gates) == ["coverage", "scope"]
    with pytest.raises(InputError, match="a second record for gate 'scope'") as info:
        load_evidence("c", None, [first, again])
    assert info.value.file == str(again) and "pass each gate's record once" in str(info.value.hint)


def test_decide_s_evidence_names_the_file_and_key_of_a_malformed_record(tmp_path: Path) -> None:
    from engine.policy.evidence_view import load_evidence

    gate = tmp_path / "scope.json"
    gate.write_text('{"gate": "scope", "passed": "maybe"}', encoding="utf-8")
    with pytest.raises(InputError, match="gate record does not match its schema") as info:
        load_evidence("c", None, [gate])
    assert (info.value.file, info.value.key) == (str(gate), "passed")
    verify = tmp_path / "verify.json"
    verify.write_text("[]", encoding="utf-8")
    with pytest.raises(InputError, match="verify result does not match its schema") as info:
        load_evidence("c", verify, [])
    assert info.value.file == str(verify)


def test_a_carried_gate_record_that_disagrees_with_the_run_is_refused() -> None:
    from engine.evidence.collect import gate_records

    run = RunResult(
        graph="g",
        steps={"gate-scope": _step("gate-scope", _gate("scope", False).model_dump(by_alias=True))},
    )
    forged = VerifyResult.model_construct(expectation=None, gates={"scope": _gate("scope")})
    with pytest.raises(InputError, match="record for gate 'scope' disagrees"):
        gate_records(forged, run)
    invented = VerifyResult.model_construct(expectation=_gate("expectation"), gates={})
    with pytest.raises(InputError, match="'expectation' that no step of the run produced"):
        gate_records(invented, run)


def test_payload_ref_is_the_digest_of_the_bundled_redacted_file(tmp_path: Path) -> None:
    from engine.evidence.decisions import payload_ref

    entry = json_entry("verify-result.json", "verify", {"stdout_tail": "mail bob@example.org"})
    ref = payload_ref(entry)
    asm = assemble(
        [entry], replay=replay_record(), candidate_id="c", policy_versions={}, builder_id="t"
    )
    out = write_bundle(tmp_path / "b", asm, signature=None)
    bundled = (out / PAYLOAD_DIR / "verify-result.json").read_bytes()
    assert b"bob@example.org" not in bundled
    assert ref.path == "payload/verify-result.json"
    assert ref.sha256 == hashlib.sha256(bundled).hexdigest()


def test_candidate_entries_cover_every_claim_the_candidate_makes(tmp_path: Path) -> None:
    from engine.candidate import load_candidate
    from engine.evidence.collect import candidate_entries

    c = tmp_path / "cand"
    c.mkdir()
    (c / "candidate.toml").write_text(
        'id = "CVE-2026-9-x"\npackage = "x"\npatches = ["a.patch", "b.patch"]\n'
        'origin = "model"\nrationale = "why.md"\nreview = "review.md"\n'
        '[advisory]\nosv = "osv.json"\nupstream_fix = "https://example.invalid/x/commit/1"\n'
        '[reproducer]\nscript = "r.sh"\ndata = ["in.txt"]\n[expect]\nexit_code = 1\n'
        '[model]\nid = "m-1"\nprompt = "prompt.txt"\nparameters = { temperature = 0 }\n'
    )
    diff = "--- a/x.c\n+++ b/x.c\n@@ -1,3 +1,3 @@\n ctx\n-old\n+new\n ctx\n"
    for name, text in {
        "a.patch": diff,
        "b.patch": diff,
        "why.md": "bounds check\n",
        "review.md": "looks right\n",
        "osv.json": '{"id": "OSV-9"}\n',
        "r.sh": "$TARGET/bin/x in.txt\n",
        "in.txt": "boom\n",
        "prompt.txt": "fix it\n",
    }.items():
        (c / name).write_text(text)
    entries = {e.path: e for e in candidate_entries(load_candidate(c / "candidate.toml"))}
    assert {p: e.kind for p, e in entries.items()} == {
        "candidate.toml": "other",
        "advisory.json": "advisory",
        "upstream.json": "upstream",
        "patches/01-a.patch": "patch",
        "patches/02-b.patch": "patch",
        "rationale.md": "rationale",
        "review.md": "review",
        "reproducer/r.sh": "reproducer",
        "reproducer/data/in.txt": "reproducer",
        "model.json": "other",
        "prompt.txt": "other",
    }
    assert entries["patches/01-a.patch"].data == canonical_diff(diff)
    assert b" ctx" not in entries["patches/01-a.patch"].data
    model = json.loads(entries["model.json"].data)
    assert model == {
        "id": "m-1",
        "prompt_sha256": hashlib.sha256(b"fix it\n").hexdigest(),
        "parameters": {"temperature": 0},
    }


def test_statement_and_replay_record_are_redacted_and_prompt_digest_names_the_bundled_bytes(
    tmp_path: Path,
) -> None:
    from engine.evidence.replay import ModelPin

    prompt = f"fix it; mail carol@example.org; token={SECRET_GH}\r\n"
    raw_digest = hashlib.sha256(prompt.encode()).hexdigest()
    record = replay_record().model_copy(
        update={
            "candidate": FilePin(path="cands/dave@example.org/c.toml", sha256="a" * 64),
            "model": ModelPin(id="m", prompt_sha256=raw_digest),
        }
    )
    entries = [
        text_entry("prompt.txt", "other", prompt),
        json_entry("model.json", "other", {"id": "m", "prompt_sha256": raw_digest}),
    ]
    asm = assemble(
        entries,
        replay=record,
        candidate_id="CVE-1",
        policy_versions={},
        builder_id=f"https://ci.example/run?token={SECRET_GH}",
    )
    out = write_bundle(tmp_path / "b", asm, signature=None)
    statement = (out / STATEMENT_FILE).read_bytes()
    for secret in (SECRET_GH.encode(), b"dave@example.org"):
        assert secret not in statement
        for f in (out / PAYLOAD_DIR).rglob("*"):
            assert not f.is_file() or secret not in f.read_bytes(), f
    bundled_prompt = (out / PAYLOAD_DIR / "prompt.txt").read_bytes()
    assert b"carol@example.org" not in bundled_prompt
    digest = hashlib.sha256(bundled_prompt).hexdigest()
    assert digest != raw_digest
    assert json.loads((out / PAYLOAD_DIR / "model.json").read_bytes())["prompt_sha256"] == digest
    replay = json.loads((out / PAYLOAD_DIR / REPLAY_PATH).read_bytes())
    assert replay["model"]["prompt_sha256"] == digest
    doc = json.loads(statement)
    ext = doc["predicate"]["buildDefinition"]["externalParameters"]
    assert (
        ext["candidate"]["path"] == replay["candidate"]["path"] == ("cands/[REDACTED:email]/c.toml")
    )
    applied = json.loads((out / PAYLOAD_DIR / REDACTION_PATH).read_bytes())["applied"]
    assert applied["statement.json"] == {"github-token": 1}
    assert applied[REPLAY_PATH] == {"email": 1}
    assert applied["prompt.txt"] == {"email": 1, "github-token": 1}


def test_statement_pins_each_policy_digest() -> None:
    from engine.evidence.redact import rules_digest

    ref = {"name": "trace-signing", "version": "1.0.0", "digest": "d" * 64, "path": "x"}
    decision = json_entry("decisions/signing.json", "signing", {"policy": ref, "waivers": []})
    asm = assemble(
        [decision],
        replay=replay_record(),
        candidate_id="c",
        policy_versions={"trace-signing": "1.0.0"},
        builder_id="t",
    )
    pins = asm.statement.policy_pins()
    assert pins is not None
    assert {n: (p.version, p.digest) for n, p in pins.items()} == {
        "trace-signing": ("1.0.0", "d" * 64),
        "redaction": (REDACTION_VERSION, rules_digest()),
    }


def test_a_second_writer_gets_a_clear_error_not_an_oserror(tmp_path: Path) -> None:
    """Two `trace bundle` runs into one --out: whoever renames second gets an InputError."""
    import threading

    asm = assemble(
        [text_entry("a.txt", "other", "a")],
        replay=replay_record(),
        candidate_id="c",
        policy_versions={},
        builder_id="t",
    )
    out = tmp_path / "b"
    barrier = threading.Barrier(6)
    results: list[str] = []

    def writer() -> None:
        barrier.wait()
        try:
            write_bundle(out, asm, signature=None)
            results.append("written")
        except InputError as exc:
            assert "already exists" in exc.message or "another process" in exc.message
            results.append("refused")

    threads = [threading.Thread(target=writer) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["refused"] * 5 + ["written"]
    assert [p.name for p in tmp_path.iterdir()] == ["b"]  # no temp directory left behind


def test_the_race_window_itself_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The winner renames between the loser's exists check and its rename."""
    import engine.evidence.bundle as bundle_mod

    asm = assemble(
        [text_entry("a.txt", "other", "a")],
        replay=replay_record(),
        candidate_id="c",
        policy_versions={},
        builder_id="t",
    )
    out = tmp_path / "b"
    real_write = bundle_mod._write

    def write_then_lose(path: Path, data: bytes) -> None:
        real_write(path, data)
        if path.name == STATEMENT_FILE and not out.exists():
            monkeypatch.setattr(bundle_mod, "_write", real_write)
            write_bundle(out, asm, signature=None)  # the other run wins meanwhile

    monkeypatch.setattr(bundle_mod, "_write", write_then_lose)
    with pytest.raises(InputError, match="written by another process meanwhile"):
        write_bundle(out, asm, signature=None)
    assert (out / STATEMENT_FILE).read_bytes() == asm.statement_bytes
    assert [p.name for p in tmp_path.iterdir()] == ["b"]
