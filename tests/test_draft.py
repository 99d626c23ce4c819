"""`trace draft` end to end with real Nix builds on the fixture fork, the models played by the
loopback fake server (Anthropic wire format for the Patcher and Reproducer, OpenAI for the
Reviewer): a real fix allowed, the Reviewer's isolation checked byte-wise on the requests the
server received, replay without the server, --refresh, a wrong fix denied, malformed answers,
a deadline and missing credentials each ending with a recorded reason."""

from __future__ import annotations

import json
import shutil
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from engine.cli import main
from tests.model_fake import FakeModelServer, answers

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.nix
ADVISORY = "trace/candidates/cparse-key-overflow/advisory.json"
CAND = "trace/candidates/TRACE-2026-0001-cparse"
UPSTREAM_COMMIT = "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678"


@dataclass
class World:
    fork: Path
    server: FakeModelServer
    script: dict[str, str]
    mirror: Path = Path("/nonexistent")

    def answer(self, path: str, doc: dict[str, Any]) -> str | None:
        system = answers.system_of(path, doc)
        for role in ("Patcher", "Reproducer", "Reviewer"):
            if f"the {role}" in system:
                return None if self.script[role] == "HANG" else self.script[role]
        raise AssertionError(system[:80])

    def draft(self, *extra: str, target: str = ADVISORY) -> tuple[int, dict[str, Any]]:
        rc = main(["draft", str(self.fork / target), "--fork", str(self.fork), *extra])
        record = self.fork / CAND / "draft.json"
        return rc, json.loads(record.read_text()) if record.is_file() else {}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    base = tmp_path_factory.mktemp("draft")
    fork = base / "fork"
    shutil.copytree(answers.FIXTURE, fork, ignore=shutil.ignore_patterns(".trace", "result*"))
    script = {"Patcher": answers.GOOD_PATCH, "Reproducer": answers.REPRO,
              "Reviewer": answers.APPROVE}  # fmt: skip
    w = World(fork=fork, server=None, script=script)  # type: ignore[arg-type]
    # the upstream fix in a local mirror: the resolver grounds it, the accuracy comparison
    # verifies it beside the model's patch
    mirror = base / "mirror"
    mirror.mkdir()
    body = (answers.CPARSE / "fix.patch").read_text()
    (mirror / f"{UPSTREAM_COMMIT}.patch").write_text(
        f"From {UPSTREAM_COMMIT} Mon Sep 17 00:00:00 2001\nSubject: [PATCH] bound keys\n\n{body}"
    )
    w.mirror = mirror
    with FakeModelServer(w.answer) as srv:
        w.server = srv
        (fork / "trace" / "agent.toml").write_text(
            answers.agent_toml(srv.anthropic_url, srv.openai_url)
        )
        mp = pytest.MonkeyPatch()
        mp.setenv("FAKE_MODEL_KEY", srv.api_key)
        yield w
        mp.undo()


def test_draft_a_real_fix_end_to_end(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    """scout -> route -> draft (patch, reproduce, verify, review, decide), from Scout's
    skeleton; the later tests go on with bundle -> verify-bundle -> land."""
    osv = world.fork.parent / "osv"
    osv.mkdir()
    shutil.copy(world.fork / ADVISORY, osv / "TRACE-2026-0001.json")
    assert main(["scout", str(osv), "--fork", str(world.fork)]) == 0
    skeleton = world.fork / CAND / "candidate.toml"
    assert f"eligible      TRACE-2026-0001 cparse (version 1.0): {skeleton}" in (
        capsys.readouterr().out
    )
    assert main(["route", str(skeleton)]) == 0
    assert "human-review-required" in capsys.readouterr().out
    rc, rec = world.draft("--upstream-mirror", str(world.mirror), target=f"{CAND}/candidate.toml")
    out = capsys.readouterr().out
    assert rc == 0, out
    assert rec["decision"] == {"decision": "allow", "reasons": [], "signing": "allow",
                               "routing": "human-review-required"}  # fmt: skip
    assert [s["outcome"] for s in rec["steps"]] == ["ok", "ok", "ok"]
    assert rec["verify_passed"] is True
    [review] = rec["reviews"]
    assert review["verdict"] == "approve" and review["cross_family"] is True
    cand = world.fork / CAND
    assert (cand / "fix.patch").read_text() == (answers.CPARSE / "fix.patch").read_text()
    for step in rec["steps"]:  # the transcripts are in the folder, digests recorded
        import hashlib

        raw = (cand / step["transcript"]).read_bytes()
        assert hashlib.sha256(raw).hexdigest() == step["transcript_sha256"]
    # the Reviewer's request, byte-wise: the diff and verify results, never the Patcher's
    # rationale, prompt or system prompt
    reviews = [r for r in world.server.requests if r.path == "/v1/chat/completions"]
    patchers = [r for r in world.server.requests if b"the Patcher" in r.body]
    assert len(reviews) == 1 and len(patchers) == 1
    body = reviews[0].body
    assert b"SECRET-RATIONALE-MARKER" not in body
    patcher_doc = patchers[0].json
    assert patcher_doc["system"].encode() not in body
    assert json.dumps(patcher_doc["messages"][0]["content"]).encode()[1:-1] not in body
    diff = (answers.CPARSE / "fix.patch").read_text()
    assert json.dumps(diff).encode()[1:-1] in body
    assert b"pre-fix-fails-as-expected: holds" in body
    # the Patcher saw the grounded upstream fix; the accuracy comparison verified it too
    assert UPSTREAM_COMMIT.encode() in patchers[0].body
    acc = json.loads((cand / "accuracy.json").read_text())
    assert (
        "accuracy vs upstream: model passes, upstream passes; identical post-fix trees; "
        "behaviour: the candidate behaves as the upstream fix on all" in out
    ), out
    assert acc["model_verdict"] is True and acc["upstream_verdict"] is True
    assert acc["identical"] is True and acc["line_overlap"] == 1.0
    assert acc["model"]["lines"] == acc["upstream"]["lines"] == {"cparse.c": [15]}


def test_the_drafted_candidate_bundles_and_verifies(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    """bundle -> verify-bundle: the model steps' transcripts, review and draft record are
    payload files, pinned in the replay record, and checked against each other."""
    from engine.audit.transcripts import transcript_problems
    from engine.evidence.replay import ReplayRecord

    key = world.fork.parent / "k"
    assert main(["keygen", str(key)]) == 0
    out = world.fork.parent / "bundle"
    cand = world.fork / CAND / "candidate.toml"
    rc = main(["bundle", str(cand), "--fork", str(world.fork), "--out", str(out),
               "--key", str(key)])  # fmt: skip
    assert rc == 0, capsys.readouterr()
    payload = out / "payload"
    replay = ReplayRecord.model_validate_json((payload / "replay.json").read_bytes())
    assert replay.model is not None and replay.model.transcripts is not None
    pins = {p.step: p for p in replay.model.transcripts}
    assert sorted(pins) == ["patch", "repro", "review"]
    assert pins["review"].family == "openai" and pins["patch"].family == "anthropic"
    for p in pins.values():
        assert (payload / p.path).is_file()
    assert (payload / "agent" / "draft.json").is_file()
    assert (payload / "agent" / "review.md").is_file()
    assert (payload / "agent" / "accuracy.json").is_file()
    # the signed decision applied the policy's review rule and records what it read: a reader
    # of the bundle sees the review was cross-vendor
    signed = json.loads((payload / "decisions" / "signing.json").read_bytes())
    assert signed["decision"] == "allow" and signed["policy"]["version"] == "1.9.0"
    assert signed["review"]["patcher_families"] == ["anthropic"]
    assert [(r["verdict"], r["family"]) for r in signed["review"]["reviews"]] == [
        ("approve", "openai")
    ]
    capsys.readouterr()
    rc = main(["verify-bundle", str(out), "--key", f"{key}.pub", "--fork", str(world.fork)])
    assert rc == 0, capsys.readouterr().out
    assert transcript_problems(payload, replay) == []
    # the accuracy comparison is a claim of the bundle (kind accuracy) and a column of the
    # findings page and of `trace fork`'s table: both verdicts, what each touches, the overlap
    index = json.loads((payload / "index.json").read_bytes())["files"]
    assert index["agent/accuracy.json"]["kind"] == "accuracy"
    pages = world.fork.parent / "findings"
    rc = main(["report", str(out), "--findings", str(pages), "--key", f"{key}.pub",
               "--fork", str(world.fork)])  # fmt: skip
    assert rc == 0, capsys.readouterr()
    page = (pages / "index.html").read_text()
    assert "model passes, upstream passes; identical post-fix trees; behaviour:" in page
    assert "model: cparse.c:15" in page
    from engine.candidate import load_candidate
    from engine.fork.one_candidate import _accuracy

    acc_line = json.loads((cand.parent / "accuracy.json").read_text())["summary"]
    assert acc_line.startswith("model passes, upstream passes; identical post-fix trees")
    assert _accuracy(load_candidate(cand)).splitlines() == [
        acc_line,
        "model: cparse.c:15",
        "upstream: cparse.c:15",
    ]
    from types import SimpleNamespace

    from engine.fork.outcome_table import ForkReport, Outcome, print_table

    capsys.readouterr()
    acc = _accuracy(load_candidate(cand))
    row = Outcome(candidate="TRACE-2026-0001-cparse", file="c", verified=True, decision="allow",
                  route="human-review-required", accuracy=acc)  # fmt: skip
    cfg = SimpleNamespace(root=world.fork, bundles=out.parent, state=world.fork / ".trace")
    print_table(ForkReport(fork="f", commit=None, dirty=False, candidates=[row]), cfg)  # type: ignore[arg-type]
    table = capsys.readouterr().out
    assert "vs upstream fix" in table and "identical" in table and "cparse.c:15" in table
    # a transcript whose prompt was edited (its digest kept) no longer hashes to its digest;
    # one whose key was edited is not the digest of its own fields
    t = payload / pins["review"].path
    doc = json.loads(t.read_bytes())
    doc["request"]["prompt"] = doc["request"]["prompt"].replace("holds", "fails")
    t.write_text(json.dumps(doc))
    assert any("does not hash" in p for p in transcript_problems(payload, replay))
    doc["key"] = "0" * 64
    t.write_text(json.dumps(doc))
    found = transcript_problems(payload, replay)
    assert any("own fields" in p for p in found) and any("pin of step review" in p for p in found)
    t.unlink()
    assert any("not bundled" in p for p in transcript_problems(payload, replay))


def test_decide_reads_the_review_claims(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    """`trace decide` alone applies the signing policy's [review] rule to draft.json's claims,
    records them in the decision, and refuses a claim its transcript does not bear out."""
    cand = world.fork / CAND
    decide = ["decide", str(cand / "candidate.toml"), "--fork", str(world.fork), "--json"]
    assert main(decide) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["policy"]["version"] == "1.9.0"
    assert doc["review"]["patcher_families"] == ["anthropic"]
    [seen] = doc["review"]["reviews"]
    assert (seen["verdict"], seen["family"], seen["forged"], seen["reviewed_patch"]) == (
        "approve", "openai", [], True
    )  # fmt: skip
    t = cand / "transcripts" / "review.json"
    original = t.read_bytes()
    try:
        t.write_bytes(original.replace(b"approve", b"approve "))  # one byte: digest mismatch
        assert main(decide) == 1
        doc = json.loads(capsys.readouterr().out)
        assert [r["code"] for r in doc["reasons"]] == ["review-claim-forged"]
        details = [d for r in doc["reasons"] for d in r["details"]]
        assert any("does not hash to the digest" in d for d in details), details
    finally:
        t.write_bytes(original)


def test_land_makes_a_local_branch_only(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    import subprocess

    fork, key = world.fork, world.fork.parent / "k"
    cand = fork / CAND / "candidate.toml"

    def git(*args: str) -> str:
        out = subprocess.run(["git", "-C", str(fork), *args], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    git("init", "-q")
    # (not a .gitignore: a new file in the fork would change the package set's digest)
    (fork / ".git" / "info" / "exclude").write_text(".trace/\n")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "fork")
    head = git("rev-parse", "HEAD")
    # the bundle's signed routing says human-review-required: no auto-merge, no branch
    bundle = fork.parent / "bundle"
    rc = main(["land", str(cand), "--bundle", str(bundle), "--key", f"{key}.pub",
               "--fork", str(fork)])  # fmt: skip
    assert rc == 1 and "routing-not-auto-merge: human-review-required" in capsys.readouterr().out
    assert git("branch", "--list", "trace/*") == ""
    # routed by a fork policy that auto-merges model fixes with an upstream reference; the
    # signer lock beside it makes verify-bundle know that policy's name, version and digest
    lock = fork / "trace" / "lock"
    lock.mkdir(parents=True)
    for f in (REPO / "policy").glob("*.*"):
        shutil.copy(f, lock / f.name)
    (lock / "routing.toml").write_text(
        'critical_packages = "critical-packages.toml"\n[policy]\nname = "fork-routing"\n'
        'version = "1.0.0"\nschema = "trace.routing/v1"\n[[rules]]\nname = "model-fixes"\n'
        'state = "auto-merge-eligible"\nwhen = { origin = ["model"], upstream_fix = true }\n'
    )
    auto = fork.parent / "bundle-auto"
    rc = main(["bundle", str(cand), "--fork", str(fork), "--out", str(auto), "--key", str(key),
               "--routing-policy", str(lock / "routing.toml")])  # fmt: skip
    assert rc == 0, capsys.readouterr()
    capsys.readouterr()
    land = ["land", str(cand), "--bundle", str(auto), "--key", f"{key}.pub", "--fork", str(fork),
            "--identity", str(lock / "signing-identity.json")]  # fmt: skip
    rc = main(land)
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "nothing was pushed" in out
    msg = git("log", "-1", "--format=%B", "trace/TRACE-2026-0001-cparse")
    import hashlib

    digest = hashlib.sha256((auto / "statement.json").read_bytes()).hexdigest()
    assert f"Trace-Bundle: sha256:{digest}" in msg
    changed = git("show", "--stat", "--format=", "trace/TRACE-2026-0001-cparse")
    assert "pkgs/cparse/src/cparse.c" in changed
    patched = git("show", "trace/TRACE-2026-0001-cparse:pkgs/cparse/src/cparse.c")
    assert "if (klen >= KEY_MAX)" in patched
    # the fork's own HEAD and work tree are untouched (only the test's lock dir is new)
    assert git("rev-parse", "HEAD") == head
    assert git("status", "--porcelain") == "?? trace/lock/"
    assert git("remote") == ""  # nothing to push to, and nothing pushed
    # a second landing of the same candidate does not overwrite the branch
    assert main(land) == 2
    # issue 27: the folder's patch swapped for a wrong one after signing (and a forged draft
    # record saying allow beside it): land refuses, naming the line that differs, and makes no
    # branch; the signed bytes are what would land, never the folder's
    fix = fork / CAND / "fix.patch"
    good = fix.read_bytes()
    wrong = (answers.WRONG / "fix.patch").read_bytes()
    draft = fork / CAND / "draft.json"
    honest = draft.read_bytes()
    forged = json.loads(honest)
    forged["decision"] = {"decision": "allow", "reasons": [], "signing": "allow",
                          "routing": "auto-merge-eligible"}  # fmt: skip
    try:
        fix.write_bytes(wrong)
        draft.write_text(json.dumps(forged))
        rc = main([*land, "--branch", "trace/swapped"])
        out = capsys.readouterr().out
        assert rc == 1, out
        assert "land-patch-differs: fix.patch is not the signed 01-fix.patch" in out, out
        assert "KEY_MAX" in out, out
        assert git("branch", "--list", "trace/swapped") == ""
    finally:
        fix.write_bytes(good)
        draft.write_bytes(honest)
    # the patch intact, but the draft record forged, deleted, or a transcript rewritten: each
    # refused too (land reads only the bundle's, and says the folder is not what was signed)
    review = fork / CAND / "transcripts" / "review.json"
    kept = review.read_bytes()
    cases = {
        "forged": lambda: draft.write_text(json.dumps(forged)),
        "deleted": draft.unlink,
        "rewritten": lambda: review.write_bytes(kept.replace(b"approve", b"approve!")),
    }
    for name, spoil in cases.items():
        try:
            spoil()
            rc = main([*land, "--branch", f"trace/{name}"])
            out = capsys.readouterr().out
            assert rc == 1 and "land-draft-differs" in out, (name, out)
            assert git("branch", "--list", f"trace/{name}") == ""
        finally:
            draft.write_bytes(honest)
            review.write_bytes(kept)


def test_a_signed_approval_its_transcript_does_not_bear_out_is_refused(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    """A hostile signer (holding the trusted key) bundles a review transcript that requests
    changes under a decision that allows: verify-bundle's re-run reads the bundled claim as
    its transcript says, so the signed decision does not follow from the bundled records."""
    import hashlib

    from engine.evidence import SIGNATURE_FILE, STATEMENT_FILE
    from engine.evidence.statement import PAYLOAD_TYPE
    from engine.signing.keymode import sign_with_key
    from engine.signing.keys import load_private_key

    fork, key = world.fork, world.fork.parent / "k"
    b = fork.parent / "bundle-hostile"
    shutil.copytree(fork.parent / "bundle-auto", b)
    lock = fork / "trace" / "lock" / "signing-identity.json"
    check = ["verify-bundle", str(b), "--key", f"{key}.pub", "--fork", str(fork),
             "--identity", str(lock), "--json"]  # fmt: skip
    assert main(check) == 0, capsys.readouterr().out
    capsys.readouterr()
    rel = "agent/transcripts/review.json"
    t = json.loads((b / "payload" / rel).read_bytes())
    t["response"] = answers.REQUEST_CHANGES
    raw = json.dumps(t, indent=2, sort_keys=True).encode() + b"\n"
    (b / "payload" / rel).write_bytes(raw)
    doc = json.loads((b / STATEMENT_FILE).read_bytes())
    for subject in doc["subject"]:
        if subject["name"] == rel:
            subject["digest"]["sha256"] = hashlib.sha256(raw).hexdigest()
    statement = json.dumps(doc).encode()
    (b / STATEMENT_FILE).write_bytes(statement)
    (b / SIGNATURE_FILE).write_text(sign_with_key(statement, PAYLOAD_TYPE, load_private_key(key)))
    assert main(check) == 1
    report = json.loads(capsys.readouterr().out)
    failed = {c["name"]: c for c in report["checks"] if not c["ok"]}
    assert failed["signing decision re-run"]["reason"] == "decision.not-reproduced", failed


def test_replay_without_the_server(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    agent = world.fork / "trace" / "agent-dead.toml"
    agent.write_text(answers.agent_toml(dead, dead + "/v1"))
    asked = len(world.server.requests)
    mirror = ("--upstream-mirror", str(world.mirror))
    rc, rec = world.draft("--agent", str(agent), *mirror)
    assert rc == 0, capsys.readouterr()
    assert all(s["replayed"] for s in rec["steps"]) and len(world.server.requests) == asked
    # the mirror copied to another folder: a transcript's key names the upstream patch by its
    # digest, never by where the mirror lies, so the draft still replays (issue 27)
    moved = world.mirror.parent / "mirror-moved"
    shutil.copytree(world.mirror, moved, dirs_exist_ok=True)
    rc, rec = world.draft("--agent", str(agent), "--upstream-mirror", str(moved))
    assert rc == 0, capsys.readouterr()
    assert all(s["replayed"] for s in rec["steps"]) and len(world.server.requests) == asked
    # --refresh asks again: the endpoint is dead, so exit 2 naming it, and the draft folder
    # keeps the previous run's files
    before = (world.fork / CAND / "draft.json").read_bytes()
    assert world.draft("--agent", str(agent), "--refresh", *mirror)[0] == 2
    assert dead in capsys.readouterr().err
    assert (world.fork / CAND / "draft.json").read_bytes() == before


def test_a_fork_adds_a_reviewer_without_python(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    """A second reviewer step in the agent file is asked too; being of the Patcher's own family
    it fails the cross-family rule, recorded as review-same-family."""
    agent = world.fork / "trace" / "agent-two-reviewers.toml"
    text = answers.agent_toml(world.server.anthropic_url, world.server.openai_url)
    text += (
        '[steps.second-review]\nrole = "reviewer"\nmodel = "drafter"\n'
        'template = "trace:templates/agent/reviewer.md.j2"\n'
        'needs = ["advisory", "patch.diff", "verify"]\n'
    )
    agent.write_text(text)
    asked = len(world.server.requests)
    rc, rec = world.draft("--agent", str(agent), "--upstream-mirror", str(world.mirror))
    assert rc == 1, capsys.readouterr()
    assert (world.fork / CAND / "accuracy.json").is_file()
    assert [s["id"] for s in rec["steps"]] == ["patch", "repro", "review", "second-review"]
    assert [s["replayed"] for s in rec["steps"]] == [True, True, True, False]
    assert len(world.server.requests) == asked + 1
    assert [(r["step"], r["cross_family"]) for r in rec["reviews"]] == [
        ("review", True),
        ("second-review", False),
    ]
    assert rec["decision"]["reasons"] == ["review-same-family"]


def test_malformed_answers_are_recorded(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    world.script["Patcher"] = answers.NO_DIFF
    rc, rec = world.draft("--refresh")
    assert rc == 1 and rec["steps"][-1]["outcome"] == "model-output-no-diff"
    assert rec["decision"]["reasons"] == ["model-output-no-diff"]
    # the earlier draft's patch, reproducer and review are gone: the folder is the skeleton,
    # this draft's record and the transcript of the step that failed, nothing half-written
    cand = world.fork / CAND
    left = sorted(p.relative_to(cand).as_posix() for p in cand.rglob("*") if p.is_file())
    assert left == ["advisory.json", "candidate.toml", "draft.json", "transcripts/patch.json"]
    assert "patches" not in (cand / "candidate.toml").read_text()
    world.script["Patcher"] = answers.NOT_APPLYING
    rc, rec = world.draft("--refresh")
    assert rc == 1 and rec["steps"][-1]["outcome"] == "patch-does-not-apply"
    assert "Hunk #1 FAILED" in rec["steps"][-1]["detail"]
    world.script["Patcher"] = answers.GOOD_PATCH
    rc, rec = world.draft("--refresh")  # no upstream this time: no stale comparison is kept
    assert rc == 0 and not (world.fork / CAND / "accuracy.json").exists()
    world.script["Reviewer"] = answers.NOT_JSON
    rc, rec = world.draft("--refresh")
    assert rc == 1 and rec["steps"][-1]["outcome"] == "model-output-unparseable"
    assert rec["verify_passed"] is True
    world.script["Reviewer"] = answers.APPROVE


def test_a_hanging_model_and_missing_credentials_end_with_exit_2(
    world: World, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = world.fork / "trace" / "agent-fast.toml"
    text = answers.agent_toml(world.server.anthropic_url, world.server.openai_url)
    agent.write_text(text.replace("deadline_s = 20", "deadline_s = 1"))
    world.script["Patcher"] = "HANG"
    before = (world.fork / CAND / "draft.json").read_bytes()
    assert world.draft("--refresh", "--agent", str(agent))[0] == 2
    err = capsys.readouterr().err
    assert "model-deadline" in err and world.server.anthropic_url in err
    assert (world.fork / CAND / "draft.json").read_bytes() == before  # nothing half-written
    # from an advisory not drafted before: the skeleton this run wrote is removed too
    adv = json.loads((world.fork / ADVISORY).read_text())
    adv["id"] = "TRACE-2026-0099"
    other = world.fork.parent / "TRACE-2026-0099.json"
    other.write_text(json.dumps(adv))
    assert world.draft("--refresh", "--agent", str(agent), target=str(other))[0] == 2
    assert "model-deadline" in capsys.readouterr().err
    assert not (world.fork / "trace/candidates/TRACE-2026-0099-cparse").exists()
    world.script["Patcher"] = answers.GOOD_PATCH
    monkeypatch.delenv("FAKE_MODEL_KEY")
    assert world.draft("--refresh")[0] == 2
    assert "$FAKE_MODEL_KEY" in capsys.readouterr().err
    assert world.draft("--refresh", target=str(other))[0] == 2
    assert "$FAKE_MODEL_KEY" in capsys.readouterr().err
    assert not (world.fork / "trace/candidates/TRACE-2026-0099-cparse").exists()


def test_a_wrong_fix_is_denied(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    world.script["Patcher"] = answers.WRONG_PATCH
    world.script["Reviewer"] = answers.REQUEST_CHANGES
    try:
        rc, rec = world.draft("--refresh", "--upstream-mirror", str(world.mirror))
    finally:
        world.script["Patcher"] = answers.GOOD_PATCH
        world.script["Reviewer"] = answers.APPROVE
    assert rc == 1
    assert rec["decision"]["decision"] == "deny"
    assert "review-not-approved" in rec["decision"]["reasons"]
    assert rec["decision"]["signing"] == "deny"  # the mutation gate catches the bigger buffer
    assert "KEY_MAX 64" in (world.fork / CAND / "fix.patch").read_text()
    acc = json.loads((world.fork / CAND / "accuracy.json").read_text())
    assert acc["upstream_verdict"] is True and acc["identical"] is False
    assert acc["line_overlap"] == 0.0 and acc["same_files"] is True
    assert "-#define KEY_MAX 16" in acc["diff"]
    # issue 27: the line says what the gates said (not "model passes"), and how the patch
    # behaved against the upstream fix input by input (the differential gate)
    assert acc["model_verdict"] is False and acc["model_reasons"], acc
    assert acc["summary"].startswith("model fails ("), acc["summary"]
    assert "behaviour:" in acc["summary"] and acc["behaviour"], acc


def _folder_bytes(cand: Path) -> dict[str, bytes]:
    return {p.relative_to(cand).as_posix(): p.read_bytes() for p in cand.rglob("*") if p.is_file()}


def test_sigterm_during_a_model_call_leaves_the_previous_draft_byte_identical(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 27: what a CI timeout sends, while the Patcher's call hangs: the process ends by
    SIGTERM and the candidate folder (patch, reproducer, review, transcripts, draft.json) is
    exactly the earlier draft's."""
    import signal
    import subprocess
    import sys
    import time

    world.script["Patcher"] = answers.GOOD_PATCH
    assert world.draft("--refresh")[0] == 0
    cand = world.fork / CAND
    before = _folder_bytes(cand)
    assert {"fix.patch", "repro.sh", "review.md", "draft.json"} <= set(before)
    world.script["Patcher"] = "HANG"
    asked = len(world.server.requests)
    trace_bin = str(Path(sys.executable).parent / "trace")
    proc = subprocess.Popen(
        [trace_bin, "draft", str(world.fork / CAND / "candidate.toml"), "--fork",
         str(world.fork), "--refresh"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while len(world.server.requests) == asked and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(world.server.requests) > asked, "the draft never asked the Patcher"
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    finally:
        proc.kill()
        world.script["Patcher"] = answers.GOOD_PATCH
    assert proc.returncode == -signal.SIGTERM
    assert _folder_bytes(cand) == before


def test_a_200_reply_that_is_not_json_is_exit_2_and_keeps_the_previous_draft(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.model_fake import Raw

    cand = world.fork / CAND
    before = _folder_bytes(cand)
    world.script["Patcher"] = Raw(b"<html>the gateway is down</html>", content_type="text/html")  # type: ignore[assignment]
    try:
        rc, _ = world.draft("--refresh")
    finally:
        world.script["Patcher"] = answers.GOOD_PATCH
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "model-output-unparseable" in err and "Traceback" not in err
    assert _folder_bytes(cand) == before


def test_a_deleted_draft_record_does_not_make_a_drafted_candidate_hand_written(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 27: provenance comes from the Patcher's recorded transcript, not from a file's
    presence: with draft.json removed, decide finds the answer that drafted this very patch and
    denies with review-missing (it allowed the drafted candidate with its review)."""
    cand = world.fork / CAND / "candidate.toml"
    assert world.draft("--refresh")[0] == 0
    decide = ["decide", str(cand), "--fork", str(world.fork), "--json"]
    assert main(decide) == 0
    capsys.readouterr()
    record = world.fork / CAND / "draft.json"
    kept = record.read_bytes()
    record.unlink()
    try:
        rc = main(decide)
        doc = json.loads(capsys.readouterr().out)
    finally:
        record.write_bytes(kept)
    assert rc == 1 and doc["decision"] == "deny"
    (missing,) = [r for r in doc["reasons"] if r["code"] == "review-missing"]
    assert "no draft record" in json.dumps(missing)


def test_a_review_transcript_rewritten_in_the_folder_is_caught_by_the_store(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 27: a Reviewer's request-changes rewritten to approve in the candidate folder, with
    draft.json's digest updated to match: the transcript key digests the question, so the state's
    store still holds the answer the model gave under that key, and decide reports
    review-claim-forged (not waivable)."""
    import hashlib

    world.script["Reviewer"] = answers.REQUEST_CHANGES
    try:
        rc, rec = world.draft("--refresh")
    finally:
        world.script["Reviewer"] = answers.APPROVE
    assert rc == 1 and "review-not-approved" in rec["decision"]["reasons"]
    capsys.readouterr()
    cand = world.fork / CAND
    (step,) = [s for s in rec["steps"] if s["role"] == "reviewer"]
    t = json.loads((cand / step["transcript"]).read_bytes())
    t["response"] = answers.APPROVE
    raw = json.dumps(t, indent=2, sort_keys=True).encode() + b"\n"
    (cand / step["transcript"]).write_bytes(raw)
    step["transcript_sha256"] = hashlib.sha256(raw).hexdigest()
    for claim in rec["reviews"]:
        claim["verdict"] = "approve"
    rec["decision"] = {"decision": "allow", "reasons": [], "signing": "allow",
                       "routing": "human-review-required"}  # fmt: skip
    (cand / "draft.json").write_text(json.dumps(rec, indent=2, sort_keys=True) + "\n")
    rc = main(["decide", str(cand / "candidate.toml"), "--fork", str(world.fork), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 1 and doc["decision"] == "deny"
    forged = [r for r in doc["reasons"] if r["code"] == "review-claim-forged"]
    assert forged and "rewritten after the model was asked" in json.dumps(forged)
    assert world.draft("--refresh")[0] == 0  # an honest draft again for later tests


def test_decide_on_a_patch_swapped_after_the_review(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 27: the folder's patch swapped for another after drafting: decide judges the new
    patch, and the review claims, which saw another diff, are review-of-another-patch."""
    cand = world.fork / CAND
    fix = cand / "fix.patch"
    good = fix.read_bytes()
    try:
        fix.write_bytes((answers.WRONG / "fix.patch").read_bytes())
        assert main(["verify", str(cand / "candidate.toml"), "--fork", str(world.fork), "-q"]) in (
            0,
            1,
        )
        capsys.readouterr()
        rc = main(["decide", str(cand / "candidate.toml"), "--fork", str(world.fork), "--json"])
        out = capsys.readouterr()
        doc = json.loads(out.out or "{}")
        assert doc, out.err
    finally:
        fix.write_bytes(good)
    assert rc == 1 and doc["decision"] == "deny"
    assert "review-of-another-patch" in {r["code"] for r in doc["reasons"]}, doc["reasons"]


def test_fork_reads_the_state_transcripts_as_decide_does(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 29: `trace fork` decides through the same stage as `trace decide`, with the state's
    transcript store: with draft.json removed, the Patcher's recorded answer still makes the
    candidate model-drafted, and the fork's row denies with review-missing naming that answer
    (`trace fork` used to pass no transcript store, and missed it)."""
    import subprocess

    git = ["git", "-C", str(world.fork), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (world.fork / ".git" / "info" / "exclude").write_text(".trace\nresult*\n")
    record = world.fork / CAND / "draft.json"
    kept = record.read_bytes()
    record.unlink()
    try:
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*git, "commit", "-qm", "fork"], check=True)
        rc = main(["fork", "--fork", str(world.fork), Path(CAND).name, "--no-sign", "--json"])
        out = capsys.readouterr()
    finally:
        record.write_bytes(kept)
        shutil.rmtree(world.fork / ".git")
    assert rc == 1, out.err
    (row,) = json.loads(out.out)["candidates"]
    assert row["decision"] == "deny" and "review-missing" in row["decision_reasons"], row
    decision = json.loads(
        (world.fork / ".trace" / "decisions" / f"{row['candidate']}.json").read_text()
    )
    (missing,) = [r for r in decision["reasons"] if r["code"] == "review-missing"]
    assert "no draft record" in json.dumps(missing)
