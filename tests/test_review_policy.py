"""The signing policy's [review] rule over a drafted candidate's review claims (no Nix, no model):
real transcripts (engine.models.transcript) in a draft record, checked by engine/roles/claims.py
and judged by `decide` with the shipped signing policy. Approval required, cross-vendor required,
and a forged claim (a verdict or a transcript that does not match its digest) refused."""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from engine.agent.inputs import digest
from engine.models.model_spec import ModelSpec, Request
from engine.models.transcript import make_transcript
from engine.policy.review import ReviewEvidence, ReviewRule, review_findings
from engine.policy.signing_decision import Decision, decide, load_signing
from engine.policy.waivers import NO_WAIVERS
from engine.roles.claims import payload_review, review_evidence
from tests.test_policy_signing import POLICY, evidence, gates_doc, shipped_route, verify_doc

TODAY = dt.date(2026, 12, 2)
PATCH = "--- a/x.c\n+++ b/x.c\n@@ -1 +1 @@\n-int a;\n+int b;\n"
APPROVE = json.dumps({"verdict": "approve", "concerns": [], "summary": "bounds the copy"})
CHANGES = json.dumps({"verdict": "request-changes", "concerns": ["too wide"], "summary": "no"})
CLAUDE = ModelSpec(backend="anthropic", model="claude-sonnet-4-5")
GPT = ModelSpec(backend="openai", model="gpt-4.1")


def drafted(reviewer: ModelSpec = GPT, answer: str = APPROVE, diff: str = PATCH) -> Any:
    """(draft record, {relative path: transcript bytes}) as `trace draft` writes them."""
    files: dict[str, bytes] = {}
    steps: list[dict[str, Any]] = []
    reviews: list[dict[str, Any]] = []
    for sid, role, spec, inputs, text in (
        ("patch", "patcher", CLAUDE, {"advisory": digest("adv")}, f"```diff\n{PATCH}```"),
        ("review", "reviewer", reviewer, {"patch.diff": digest(diff)}, answer),
    ):
        t = make_transcript(spec, Request(role=sid, system="s", prompt=f"p {sid}",
                                          inputs=inputs), spec.backend, text)  # fmt: skip
        rel = f"transcripts/{sid}.json"
        files[rel] = t.dump()
        steps.append({"id": sid, "role": role, "model": t.model, "family": t.family,
                      "transcript": rel, "transcript_key": t.key,
                      "transcript_sha256": hashlib.sha256(files[rel]).hexdigest()})  # fmt: skip
        if role == "reviewer":
            verdict = json.loads(answer)["verdict"]
            cross = t.family != "anthropic"
            reviews.append({"step": sid, "verdict": verdict, "model": t.model,
                            "family": t.family, "cross_family": cross})  # fmt: skip
    return {"schema": "trace.draft/v1", "steps": steps, "reviews": reviews}, files


def seen(draft: dict[str, Any], files: dict[str, bytes], patch: str = PATCH) -> ReviewEvidence:
    return review_evidence(draft, files.get, [patch], "draft.json", exact=True)


def decided(review: ReviewEvidence | None, origin: str = "model") -> Decision:
    policy, catalogue = load_signing(POLICY / "signing.toml")
    route = shipped_route()
    route = route.model_copy(update={"facts": route.facts.model_copy(update={"origin": origin})})
    ev = evidence(verify_doc(), gates_doc()).model_copy(update={"review": review})
    return decide(ev, route, policy, catalogue, NO_WAIVERS, TODAY)


def codes(d: Decision) -> list[str]:
    return sorted(r.code for r in d.reasons)


def test_an_approving_cross_vendor_review_allows_and_is_recorded() -> None:
    d = decided(seen(*drafted()))
    assert d.decision == "allow", codes(d)
    assert d.review is not None and d.review.patcher_families == ["anthropic"]
    [r] = d.review.reviews
    assert (r.verdict, r.family, r.forged, r.reviewed_patch) == ("approve", "gpt", [], True)


def test_the_shipped_policy_requires_approval() -> None:
    d = decided(seen(*drafted(answer=CHANGES)))
    assert d.decision == "deny" and codes(d) == ["review-not-approved"]
    draft, files = drafted()
    draft["reviews"] = []
    assert codes(decided(seen(draft, files))) == ["review-missing"]


def test_the_shipped_policy_requires_another_vendor() -> None:
    d = decided(seen(*drafted(reviewer=ModelSpec(backend="anthropic", model="claude-opus"))))
    assert codes(d) == ["review-same-family"]
    # the family comes from the transcript: a claim that says "openai" does not make it so
    draft, files = drafted(reviewer=ModelSpec(backend="anthropic", model="claude-opus"))
    draft["reviews"][0]["family"] = "openai"
    assert codes(decided(seen(draft, files))) == ["review-claim-forged", "review-same-family"]


def test_a_forged_claim_is_refused() -> None:
    # the claim says approve, the transcript's recorded answer requests changes
    draft, files = drafted(answer=CHANGES)
    draft["reviews"][0]["verdict"] = "approve"
    d = decided(seen(draft, files))
    assert codes(d) == ["review-claim-forged"]
    assert "its transcript says request-changes" in d.reasons[0].details[0]
    # the transcript rewritten to approve: it no longer hashes to the digest the record names
    draft, files = drafted(answer=CHANGES)
    t = json.loads(files["transcripts/review.json"])
    t["response"] = APPROVE
    files["transcripts/review.json"] = json.dumps(t).encode()
    draft["reviews"][0]["verdict"] = "approve"
    d = decided(seen(draft, files))
    assert codes(d) == ["review-claim-forged"]
    assert "does not hash to the digest" in " ".join(d.reasons[0].details)
    # ... and with the digest updated too, its key is no longer the digest of its own fields
    # when its prompt digest is edited; a missing transcript is refused the same way
    draft2 = copy.deepcopy(draft)
    t["prompt_sha256"] = "0" * 64
    files["transcripts/review.json"] = raw = json.dumps(t).encode()
    draft2["steps"][1]["transcript_sha256"] = hashlib.sha256(raw).hexdigest()
    assert "own fields" in " ".join(decided(seen(draft2, files)).reasons[0].details)
    del files["transcripts/review.json"]
    assert codes(decided(seen(draft2, files))) == ["review-claim-forged"]


def test_a_review_of_another_patch_does_not_count() -> None:
    d = decided(seen(*drafted(), patch=PATCH.replace("int b", "int c")))
    assert codes(d) == ["review-of-another-patch"]


def test_hand_written_candidates_by_origin() -> None:
    assert decided(None).decision == "allow"  # the shipped policy lists no origins
    rule = ReviewRule(require_approval=True, origins=["model"])
    assert [f[0] for f in review_findings(rule, None, "model")] == ["review-missing"]
    assert review_findings(rule, None, "upstream") == []
    assert review_findings(ReviewRule(), seen(*drafted(answer=CHANGES)), "model") == []


def test_a_policy_without_the_rule_is_the_old_version(tmp_path: Path) -> None:
    """The rule is versioned with the policy: 1.1.0 (kept under history/) had none."""
    old = POLICY / "history" / "trace-signing-1.1.0" / "signing.toml"
    policy, _ = load_signing(old)
    assert policy.ref.version == "1.1.0" and not policy.review.require_approval
    new, _ = load_signing(POLICY / "signing.toml")
    assert new.ref.version != "1.1.0" and new.review.require_approval
    assert new.review.require_different_family


def test_the_bundled_claims_are_read_the_same_way(tmp_path: Path) -> None:
    draft, files = drafted(answer=CHANGES)
    agent = tmp_path / "agent"
    (agent / "transcripts").mkdir(parents=True)
    (agent / "draft.json").write_text(json.dumps(draft))
    for rel, raw in files.items():  # re-serialised, as the bundle's payload writes JSON
        (agent / "transcripts" / Path(rel).name).write_text(json.dumps(json.loads(raw)))
    found = payload_review(tmp_path)
    assert found is not None and [r.verdict for r in found.reviews] == ["request-changes"]
    assert found.reviews[0].forged == [] and found.reviews[0].reviewed_patch is None
    draft["reviews"][0]["verdict"] = "approve"
    (agent / "draft.json").write_text(json.dumps(draft))
    found = payload_review(tmp_path)
    assert found is not None and found.reviews[0].forged


@pytest.mark.parametrize("doc", ["{", '{"schema": "other"}'])
def test_a_broken_draft_record_is_bad_input(tmp_path: Path, doc: str) -> None:
    from engine.errors import InputError

    (tmp_path / "agent").mkdir()
    (tmp_path / "agent" / "draft.json").write_text(doc)
    with pytest.raises(InputError) as exc:
        payload_review(tmp_path)
    assert "draft.json" in str(exc.value.file)


def test_a_bundle_of_the_replaced_version_still_matches_its_pins() -> None:
    """Bumping the signing policy for [review] keeps 1.1.0 (and the catalogue it named) under
    policy/history/: a statement pinning their digests passes verify-bundle's version and
    digest checks, and the decision re-run finds the file; another 1.1.0 text does not pass."""
    from engine.audit.checks import policy_pin_check, policy_version_check
    from engine.audit.consistency import _policy_files
    from engine.audit.identity import load_identity_policy
    from engine.evidence.bundle import assemble
    from engine.evidence.payload import json_entry
    from tests.test_evidence import replay_record

    old = POLICY / "history" / "trace-signing-1.1.0"

    reasons = hashlib.sha256((old / "reasons.toml").read_bytes()).hexdigest()

    def statement(signing_digest: str) -> Any:
        refs = {
            "policy": {"name": "trace-signing", "version": "1.1.0", "digest": signing_digest,
                       "path": "p"},
            "catalogue": {"name": "trace-reasons", "version": "1.0.0", "path": "c",
                          "digest": reasons},
        }  # fmt: skip
        entry = json_entry("decisions/signing.json", "signing", {**refs, "waivers": []})
        versions = {"trace-signing": "1.1.0", "trace-reasons": "1.0.0"}
        return assemble([entry], replay=replay_record(), candidate_id="c",
                        policy_versions=versions, builder_id="t").statement  # fmt: skip

    lock = load_identity_policy(POLICY / "signing-identity.json")
    digest_110 = hashlib.sha256((old / "signing.toml").read_bytes()).hexdigest()
    good = statement(digest_110)
    assert policy_version_check(good, lock).ok
    pin = policy_pin_check(good, lock)
    assert pin.ok, pin.detail
    assert _policy_files(digest_110, [POLICY]) == [old / "signing.toml"]
    forged = policy_pin_check(statement("e" * 64), lock)
    assert not forged.ok and forged.reason == "policy.digest-mismatch"
