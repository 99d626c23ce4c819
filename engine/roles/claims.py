"""The review evidence `trace decide` reads: a drafted candidate's review claims (draft.json,
trace.draft/v1), each checked against the transcript it names before the signing policy counts
it (engine/policy/review.py).

A claim counts only as its transcript bears it out: the transcript hashes to the digest the
draft record names, its key is the digest of its own fields, its model is the claimed model,
and the verdict read from its recorded answer is the claimed verdict. The reviewer's family and
the Patcher's come from the transcripts, not from the claim. In a candidate folder the diff the
reviewer saw (its `*.diff` input digest) must be the candidate's current patch.

What this cannot prove: who wrote a transcript. A person able to write the candidate folder can
write a consistent transcript too; the signed bundle pins what was decided on.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from engine.policy.review import ReviewEvidence, ReviewSeen

DRAFT = "draft.json"
Reader = Callable[[str], bytes | None]


def _digest(value: object) -> str:
    """As engine.agent.inputs.digest: the digest of a value as it enters a transcript key."""
    raw = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(raw.encode()).hexdigest()


def _transcript(step: dict[str, Any], read: Reader, exact: bool) -> tuple[Any, str | None]:
    """(the Transcript, None) or (None, why it does not bear out the draft record)."""
    from engine.models.model_spec import ModelSpec
    from engine.models.transcript import Transcript, key_of

    rel = str(step.get("transcript", ""))
    raw = read(rel)
    if raw is None:
        return None, f"transcript {rel} of step {step.get('id')} is missing"
    if exact and hashlib.sha256(raw).hexdigest() != step.get("transcript_sha256"):
        return None, f"transcript {rel} does not hash to the digest the draft record names"
    try:
        t = Transcript.model_validate_json(raw)
    except ValidationError as exc:
        return None, f"transcript {rel} is not a trace.transcript/v1 record ({exc.errors()[0]})"
    spec = ModelSpec.model_validate(
        {"backend": "replay", "model": t.model, "parameters": t.parameters}
    )
    if key_of(spec, t.role, t.system_sha256, t.prompt_sha256, t.inputs) != t.key:
        return None, f"transcript {rel}: its key is not the digest of its own fields"
    if t.key != step.get("transcript_key") or t.model != step.get("model"):
        return None, f"transcript {rel} is not the one the draft record names for its step"
    return t, None


def review_evidence(
    draft: dict[str, Any], read: Reader, patches: list[str] | None, source: str, *, exact: bool
) -> ReviewEvidence:
    """The draft record's review claims as their transcripts bear them out. `read(rel)`: the
    bytes of a transcript named in the record (None: absent); `patches`: the candidate's patch
    texts (None where they are not at hand in their drafted form); `exact`: the transcript files
    are the recorded bytes (a bundle re-serialises them; the statement pins their digests)."""
    from engine.roles.reviewer import parse_review

    steps = {str(s.get("id")): s for s in draft.get("steps", []) if isinstance(s, dict)}
    problems: list[str] = []
    patcher_families: list[str] = []
    for s in steps.values():
        if s.get("role") != "patcher":
            continue
        t, why = _transcript(s, read, exact)
        if why is not None:
            problems.append(why)
        elif t.family not in patcher_families:
            patcher_families.append(t.family)
    wanted = {_digest(p) for p in patches} if patches is not None else None
    seen: list[ReviewSeen] = []
    for claim in draft.get("reviews", []):
        sid = str(claim.get("step"))
        forged: list[str] = []
        family = str(claim.get("family", ""))
        reviewed: bool | None = None
        step = steps.get(sid)
        if step is None or step.get("role") != "reviewer":
            forged.append(f"the draft record has no reviewer step '{sid}'")
            sha = ""
        else:
            sha = str(step.get("transcript_sha256", ""))
            t, why = _transcript(step, read, exact)
            if why is not None:
                forged.append(why)
            else:
                family = t.family
                said = parse_review(t.response)
                verdict = getattr(said, "verdict", None)
                if verdict != claim.get("verdict"):
                    forged.append(f"claims {claim.get('verdict')}, its transcript says {verdict}")
                if t.model != claim.get("model") or t.family != claim.get("family"):
                    forged.append("the claimed model or family is not the transcript's")
                if wanted is not None:
                    diffs = {v for k, v in t.inputs.items() if k.endswith(".diff")}
                    reviewed = bool(diffs & wanted)
        verdict_claimed = claim.get("verdict")
        seen.append(
            ReviewSeen(
                step=sid,
                verdict=verdict_claimed if verdict_claimed == "approve" else "request-changes",
                model=str(claim.get("model", "")),
                family=family,
                transcript_sha256=sha,
                forged=forged,
                reviewed_patch=reviewed,
            )
        )
    return ReviewEvidence(
        source=source, patcher_families=patcher_families, reviews=seen, problems=problems
    )


def _load(path: Path) -> dict[str, Any] | None:
    from engine.errors import InputError

    try:
        doc = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(
            f"draft record is not JSON: {exc}",
            file=path,
            hint="run `trace draft` again, or remove the file if the candidate is hand-written",
        ) from None
    if not isinstance(doc, dict) or doc.get("schema") != "trace.draft/v1":
        raise InputError(
            "draft record is not a trace.draft/v1 record",
            file=path,
            hint="run `trace draft` again, or remove the file if the candidate is hand-written",
        )
    return doc


def _reader(root: Path) -> Reader:
    def read(rel: str) -> bytes | None:
        target = (root / rel).resolve()
        if not target.is_relative_to(root.resolve()) or not target.is_file():
            return None
        return target.read_bytes()

    return read


def candidate_review(candidate: Any, transcripts: Path | None = None) -> ReviewEvidence | None:
    """The review evidence of a candidate folder (None: not drafted by a model). Without a draft
    record, `transcripts` (the state's transcript store) is searched for a Patcher's answer whose
    diff is the candidate's patch: a model-drafted candidate whose draft record was deleted is
    still model-drafted, and gets review-missing, not the treatment of a hand-written one."""
    path = candidate.dir / DRAFT
    doc = _load(path)
    if doc is None:
        return drafted_without_record(candidate, transcripts)
    patches = candidate.patch_texts()
    read = _reader(candidate.dir)
    evidence = review_evidence(doc, read, patches, str(path), exact=True)
    rewritten = _rewritten(doc, read, transcripts)
    if not rewritten:
        return evidence
    return evidence.model_copy(update={"problems": [*evidence.problems, *rewritten]})


def _rewritten(doc: dict[str, Any], read: Reader, transcripts: Path | None) -> list[str]:
    """Transcripts of the folder that are not the answer the state's store recorded under the
    same key (the key digests the question, not the answer): a response rewritten after it was
    asked, with draft.json's digest updated to match, is caught where the store is at hand."""
    if transcripts is None or not transcripts.is_dir():
        return []
    out = []
    for step in doc.get("steps", []):
        if not isinstance(step, dict):
            continue
        key, rel = str(step.get("transcript_key", "")), str(step.get("transcript", ""))
        stored = transcripts / f"{key}.json"
        mine = read(rel)
        if key and mine is not None and stored.is_file() and stored.read_bytes() != mine:
            out.append(
                f"transcript {rel} is not the answer recorded for its key in the transcript "
                f"store ({stored.name}): rewritten after the model was asked"
            )
    return out


def payload_review(payload: Path) -> ReviewEvidence | None:
    """The review evidence of a bundle's payload (agent/draft.json, agent/transcripts/): the
    transcripts are named by file name there; the patch is bundled in canonical form, so the
    reviewed-patch check is the signed decision's own."""
    doc = _load(payload / "agent" / DRAFT)
    if doc is None:
        return None
    root = payload / "agent" / "transcripts"
    inner = _reader(root)

    def read(rel: str) -> bytes | None:
        return inner(Path(rel).name)

    return review_evidence(doc, read, None, "payload/agent/draft.json", exact=False)


def drafted_without_record(candidate: Any, transcripts: Path | None) -> ReviewEvidence | None:
    """Review evidence with no review, when a recorded Patcher answer drafted this very patch
    (compared in canonical diff form) and the candidate folder has no draft record."""
    if transcripts is None or not transcripts.is_dir():
        return None
    from engine.evidence.payload import canonical_diff
    from engine.models.transcript import Transcript
    from engine.roles.outcome import RoleFailure
    from engine.roles.patcher import parse_patch

    wanted = b"".join(canonical_diff(t) for t in candidate.patch_texts())
    for f in sorted(transcripts.glob("*.json")):
        try:
            t = Transcript.model_validate_json(f.read_bytes())
        except (OSError, ValidationError):
            continue
        got = parse_patch(t.response)
        if isinstance(got, RoleFailure) or canonical_diff(got.diff) != wanted:
            continue
        return ReviewEvidence(
            source=f"{f} (a Patcher's answer; the candidate has no draft record)",
            patcher_families=[t.family],
            reviews=[],
            problems=[],
        )
    return None
