"""The signing policy's review rule (`[review]` of policy/signing.toml) and the review evidence
it reads: the Reviewer's claims of a drafted candidate, each already checked against its
recorded transcript (engine/roles/claims.py builds this view from draft.json and the transcripts).

`review_findings` is pure: the rule and the evidence in, `(code, source, detail)` out, which
`engine.policy.signing_decision.decide` turns into reasons like any other hit.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from engine.policy.source import Strict


class ReviewRule(Strict):
    require_approval: bool = Field(
        default=False,
        description="a drafted candidate (one with a draft record) needs a review, and every "
        "review must approve",
    )
    require_different_family: bool = Field(
        default=False,
        description="every reviewer's model family must differ from every Patcher's",
    )
    origins: list[str] = Field(
        default_factory=list,
        description="candidates of these origins need a review record even without a draft "
        "record (review-missing); e.g. ['model']",
    )


class ReviewSeen(Strict):
    """One review claim of the draft record, as its transcript bears it out."""

    step: str
    verdict: Literal["approve", "request-changes"]
    model: str
    family: str = Field(description="the reviewer's model family, from its transcript")
    transcript_sha256: str
    forged: list[str] = Field(
        default_factory=list,
        description="how the claim disagrees with its transcript (digest, verdict, model, key)",
    )
    reviewed_patch: bool | None = Field(
        default=None,
        description="the diff the reviewer saw is the candidate's patch (None: not checkable "
        "here, e.g. in a bundle, where the decision's own check stands)",
    )


class ReviewEvidence(Strict):
    source: str = Field(description="the draft record read (a path)")
    patcher_families: list[str] = Field(description="from the Patcher transcripts")
    reviews: list[ReviewSeen] = Field(default_factory=list)
    problems: list[str] = Field(
        default_factory=list,
        description="record-level forgery: a Patcher transcript that is missing or not its digest",
    )


Finding = tuple[str, str, str]


def review_findings(
    rule: ReviewRule, evidence: ReviewEvidence | None, origin: str | None
) -> list[Finding]:
    """What denies under the rule. A candidate without a draft record is judged only when its
    origin is listed in `rule.origins` (then: review-missing)."""
    if not (rule.require_approval or rule.require_different_family):
        return []
    if evidence is None:
        if origin is not None and origin in rule.origins:
            return [("review-missing", "review", f"origin {origin} and no draft record")]
        return []
    src = f"review:{evidence.source}"
    out: list[Finding] = [("review-claim-forged", src, p) for p in evidence.problems]
    if not evidence.reviews:
        out.append(("review-missing", src, "the draft record holds no review"))
    for r in evidence.reviews:
        where = f"review:{r.step}"
        out += [("review-claim-forged", where, p) for p in r.forged]
        if r.reviewed_patch is False:
            out.append(("review-of-another-patch", where, "the diff it saw is not the patch"))
        if rule.require_approval and r.verdict != "approve":
            out.append(("review-not-approved", where, f"{r.verdict} by {r.model}"))
        if rule.require_different_family and r.family in evidence.patcher_families:
            out.append(
                ("review-same-family", where, f"{r.model} is of the Patcher's family {r.family}")
            )
    return out
