"""`trace draft`: route, then Patcher -> Reproducer -> verify -> Reviewer -> decide.

Model steps run in the agent file's order; a step that needs `verify` runs after the drafted
candidate was verified (the only Nix work, through the standard pipeline). A recorded failure
(`model-output-*`, `patch-does-not-apply`, a routing state that is not drafted) ends the draft
with exit 1 and a draft.json saying why; an error (credentials, endpoint, deadline, bad input)
ends it with exit 2 and removes what this run wrote into the candidate folder.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from engine.agent.draft_record import DraftDecision, DraftRecord, ReviewClaim, StepRecord
from engine.agent.inputs import advisory_value, digest, source_files, verify_value
from engine.agent.options import DraftOptions
from engine.agent.write import Folder, candidate_toml
from engine.models.ask import ask
from engine.models.model_spec import Request
from engine.models.transcript import TranscriptStore
from engine.roles.agentfile import Agent, AgentStep
from engine.roles.outcome import RoleFailure
from engine.roles.patcher import Draft, check_applies, parse_patch
from engine.roles.prompts import context_name, render
from engine.roles.reproducer import Reproduction, parse_reproducer
from engine.roles.reviewer import Review, parse_review

DRAFTABLE = ("auto-merge-eligible", "human-review-required")
# what a step's record copies from its transcript as it is
_FROM_TRANSCRIPT = ("model", "family", "backend", "parameters", "system_sha256", "prompt_sha256",
                    "inputs")  # fmt: skip


class _Run:
    def __init__(self, skeleton: Path, agent: Agent, opts: DraftOptions) -> None:
        from engine.advisory import load_advisory
        from engine.candidate import load_candidate

        self.skeleton = load_candidate(skeleton, for_routing=True)
        self.spec = self.skeleton.spec
        self.agent = agent
        self.opts = opts
        self.folder = Folder(self.skeleton.dir)
        self.store = TranscriptStore(opts.state / "transcripts")
        adv_path = self.skeleton.file(self.spec.advisory.osv)
        self.advisory = load_advisory(adv_path)
        self.values: dict[str, Any] = {
            "advisory": advisory_value(self.advisory, adv_path.read_text(encoding="utf-8")),
            "upstream": _portable(opts.upstream),
        }
        self.steps: list[StepRecord] = []
        self.reviews: list[ReviewClaim] = []
        self.stage = "route"
        self.verify_passed: bool | None = None
        self.verify_result: Any = None  # the drafted candidate's VerifyResult, once verified

    def record(self, decision: DraftDecision) -> DraftRecord:
        rec = DraftRecord(
            candidate=self.spec.id,
            package=self.spec.package,
            advisory=self.advisory.id,
            stage=self.stage,
            steps=self.steps,
            verify_passed=self.verify_passed,
            reviews=self.reviews,
            decision=decision,
        )
        doc = rec.model_dump(mode="json", by_alias=True)
        self.folder.write("draft.json", json.dumps(doc, indent=2, sort_keys=True) + "\n")
        return rec

    def deny(self, *reasons: str, routing: str | None = None) -> DraftRecord:
        return self.record(DraftDecision(decision="deny", reasons=list(reasons), routing=routing))

    # --- one model step ---

    def ask_step(self, step: AgentStep) -> tuple[str, StepRecord]:
        values = {context_name(n): self.values[n] for n in step.needs}
        system, prompt = render(step.template, values)
        request = Request(
            role=step.id, system=system, prompt=prompt,
            inputs={n: digest(self.values[n]) for n in step.needs},
        )  # fmt: skip
        answer = ask(step.model, request, self.store, refresh=self.opts.refresh)
        t = answer.transcript
        raw = t.dump()
        rel = f"transcripts/{step.id}.json"
        self.folder.write(rel, raw)
        rec = StepRecord(
            **t.model_dump(include=set(_FROM_TRANSCRIPT)),
            id=step.id,
            role=step.role,
            transcript_key=t.key,
            transcript=rel,
            transcript_sha256=hashlib.sha256(raw).hexdigest(),
            replayed=answer.replayed,
            outcome="ok",
        )
        self.values[f"{step.id}.prompt"] = prompt
        self.values[f"{step.id}.transcript"] = t.model_dump(mode="json", by_alias=True)
        return answer.text, rec

    def fail(self, rec: StepRecord, failure: RoleFailure) -> DraftRecord:
        self.steps.append(
            rec.model_copy(update={"outcome": failure.reason, "detail": failure.detail})
        )
        return self.deny(failure.reason)

    # --- the flow ---

    def run(self) -> DraftRecord:
        from engine.policy.routing import route_candidate

        routing = route_candidate(self.skeleton)
        if routing.state not in DRAFTABLE:
            return self.deny("routing-not-drafted", routing=routing.state)
        self.values["sources"] = source_files(self.opts.source, _upstream_files(self.opts.upstream))
        self.reset()
        draft: Draft | None = None
        repro: Reproduction | None = None
        patch_step: AgentStep | None = None
        for step in self.agent.steps:
            if "verify" in step.needs and "verify" not in self.values:
                if draft is None or repro is None or patch_step is None:
                    return self.deny("draft-incomplete")
                self.write_candidate(patch_step, draft, repro)
                self.stage = "verify"
                self.verify()
            self.stage = step.id
            text, rec = self.ask_step(step)
            if step.role == "patcher":
                got = parse_patch(text)
                if isinstance(got, RoleFailure):
                    return self.fail(rec, got)
                failure = check_applies(got.diff, self.opts.source)
                if failure is not None:
                    return self.fail(rec, failure)
                draft, patch_step = got, step
                self.values[f"{step.id}.diff"] = got.diff
                self.values[f"{step.id}.rationale"] = got.rationale
            elif step.role == "reproducer":
                rep = parse_reproducer(text)
                if isinstance(rep, RoleFailure):
                    return self.fail(rec, rep)
                repro = rep
                self.values[f"{step.id}.script"] = rep.script
            else:
                review = parse_review(text)
                if isinstance(review, RoleFailure):
                    return self.fail(rec, review)
                self.add_review(step, review)
                self.values[f"{step.id}.verdict"] = review.model_dump()
            self.steps.append(rec)
        if "verify" not in self.values:  # an agent file without reviewers that need verify
            if draft is None or repro is None or patch_step is None:
                return self.deny("draft-incomplete")
            self.write_candidate(patch_step, draft, repro)
            self.verify()
        self.compare_upstream()
        self.stage = "decide"
        return self.decide(routing.state)

    def reset(self) -> None:
        """Back to the skeleton before any model is asked: a step that fails now must not leave
        an earlier draft's patch, reproducer or review beside this draft's record (an error
        restores them all: `Folder.rollback`)."""
        from engine.agent.skeleton import skeleton_toml

        if not (self.folder.path / "draft.json").is_file():
            return
        s = self.spec
        drafted = {*s.patches, *s.advisory.upstream_patches, "rationale.md", "prompt.txt",
                   "review.md", "accuracy.json"}  # fmt: skip
        if s.reproducer is not None:
            drafted |= {s.reproducer.script, *s.reproducer.data}
        root = self.folder.path
        for sub in ("transcripts", "upstream"):
            drafted |= {p.relative_to(root).as_posix() for p in (root / sub).rglob("*")
                        if p.is_file()}  # fmt: skip
        for rel in sorted(drafted):
            inside = (root / rel).resolve().is_relative_to(root.resolve())
            if inside and rel != s.advisory.osv:
                self.folder.remove(rel)
        self.folder.write(
            "candidate.toml",
            skeleton_toml(s.id, s.package, s.advisory.osv, s.advisory.upstream_fix, list(s.scope)),
        )

    def grounded_upstream(self) -> str | None:
        """The upstream fix's patch text when the resolver grounded it (else None)."""
        up = self.opts.upstream
        if not up or not up.get("patch") or not up.get("grounded"):
            return None
        return str(up["patch"])

    def compare_upstream(self) -> None:
        """With a grounded upstream patch: verify it too and compare (accuracy.json)."""
        up = self.opts.upstream
        if not up or not up.get("patch") or not up.get("grounded"):
            self.folder.remove("accuracy.json")  # an earlier draft's comparison is not this one's
            return
        from engine.agent.accuracy import accuracy
        from engine.candidate import load_candidate

        self.stage = "accuracy"
        cand = load_candidate(self.skeleton.path)
        accuracy(cand, self.verify_result, str(up["patch"]), self.folder, self.opts)

    def write_candidate(self, step: AgentStep, draft: Draft, repro: Reproduction) -> None:
        s = self.spec
        self.folder.write("fix.patch", draft.diff)
        self.folder.write("rationale.md", draft.rationale)
        self.folder.write("prompt.txt", self.values[f"{step.id}.prompt"])
        self.folder.write(
            "repro.sh", repro.script if repro.script.endswith("\n") else repro.script + "\n"
        )
        for name, content in sorted(repro.data.items()):
            self.folder.write(name, content)
        upstream = self.grounded_upstream()
        if upstream is not None:  # the differential gate compares the draft with it
            self.folder.write("upstream.patch", upstream)
        model = step.model
        text = candidate_toml(
            {
                "id": s.id,
                "package": s.package,
                "patches": ["fix.patch"],
                "origin": "model",
                "rationale": "rationale.md",
                "scope": list(s.scope) or [f"pkgs/{s.package}/**"],
            },
            {
                "advisory": {
                    "osv": s.advisory.osv,
                    "upstream_fix": s.advisory.upstream_fix,
                    "upstream_patches": ["upstream.patch"] if upstream is not None else None,
                },
                "reproducer": {"script": "repro.sh", "data": sorted(repro.data), "runs": 3},
                "expect": repro.expect.model_dump(exclude_none=True),
                "model": {
                    "id": model.model,
                    "prompt": "prompt.txt",
                    "parameters": model.parameters.model_dump(exclude_none=True),
                },
            },
        )
        self.folder.write("candidate.toml", text)

    def verify(self) -> None:
        from engine.pipeline.verify_fresh import run_verify

        result = run_verify(
            self.skeleton.path,
            fork=self.opts.fork,
            state_dir=self.opts.state,
            jobs=self.opts.jobs,
            signing_policy=self.opts.signing_policy,
        )
        self.verify_passed = result.passed
        self.verify_result = result
        self.values["verify"] = verify_value(result)

    def add_review(self, step: AgentStep, review: Review) -> None:
        patchers = {s.model.model_family for s in self.agent.of_role("patcher")}
        family = step.model.model_family
        self.reviews.append(
            ReviewClaim(
                step=step.id,
                verdict=review.verdict,
                concerns=review.concerns,
                summary=review.summary,
                model=step.model.model,
                family=family,
                cross_family=family not in patchers,
            )
        )
        lines = [f"# Review ({step.id}): {review.verdict}", "", review.summary, ""]
        lines += [f"- {c}" for c in review.concerns]
        lines += ["", f"Model: {step.model.model} (family {family}); see draft.json."]
        self.folder.write("review.md", "\n".join(lines) + "\n")

    def decide(self, routing: str) -> DraftRecord:
        from engine.agent.decide import decide_draft

        reasons: list[str] = []
        if not self.verify_passed:
            reasons.append("verify-failed")
        # the review claims are evidence `trace decide` reads (the signing policy's [review]
        # rule): the record holding them is written before the policy decides
        self.deny("decision-pending", routing=routing)
        signing, signing_reasons = decide_draft(self.skeleton.path, self.opts)
        reasons += signing_reasons
        reasons = list(dict.fromkeys(reasons))
        return self.record(
            DraftDecision(
                decision="deny" if reasons else "allow",
                reasons=reasons,
                signing=signing,
                routing=routing,
            )
        )


def _portable(upstream: dict[str, Any] | None) -> dict[str, Any] | None:
    """The upstream reference as the models see it and its digest enters their transcripts'
    keys: named by its content (url, commit, sha256, text), never by the machine path of the
    mirror it was read from, so a replay finds the same transcripts in another checkout."""
    if upstream is None:
        return None
    return {k: v for k, v in upstream.items() if k != "source"}


def _upstream_files(upstream: dict[str, Any] | None) -> list[str] | None:
    if not upstream or not upstream.get("files"):
        return None
    return list(upstream["files"])


class _Terminated(BaseException):
    """SIGTERM (what a CI timeout sends) during a draft: unwound like an interrupt."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Terminated


def run_draft(skeleton: Path, agent: Agent, opts: DraftOptions) -> DraftRecord:
    """Draft one candidate from its skeleton (a routing-only candidate.toml).

    Transactional: whatever ends the draft early (an error, a reply that is not the API's JSON,
    a crash, SIGINT or SIGTERM) puts every file it wrote or removed back as it was, so the
    previous draft stays exactly as it was. On SIGTERM the process then ends by SIGTERM as it
    would have. (SIGKILL cannot be caught: a draft killed so may leave its files half-swapped.)
    """
    import signal

    run = _Run(skeleton, agent, opts)
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return run.run()
    except BaseException as exc:
        run.folder.rollback()
        if isinstance(exc, _Terminated):
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
