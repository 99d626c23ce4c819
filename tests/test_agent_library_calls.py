"""`trace land` and `trace draft` call the library, not `engine.cli.main([...])` with its output
parsed: land checks the bundle with engine.audit.verifier, draft decides with
engine.signoff.decide. What a failed verdict, a bad input and a decision become, with the
library call made to fail or answer (the real bundles and decisions are in tests/test_draft.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from engine.agent import land
from engine.audit.checks import BundleVerdict
from engine.audit.signature import Check
from engine.errors import InputError


def _verdict(*checks: Check) -> BundleVerdict:
    bad = [c.reason or c.name for c in checks if not c.ok]
    return BundleVerdict(bundle="b", passed=not bad, mode="key", reasons=bad, checks=list(checks))


def _with(monkeypatch: pytest.MonkeyPatch, verify: Any) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []

    def make_verifier(**kw: Any) -> Any:
        calls.append(kw)
        return verify

    monkeypatch.setattr("engine.audit.verifier.make_verifier", make_verifier)
    return calls


def test_a_bundle_that_verifies_is_no_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _with(monkeypatch, lambda b: _verdict(Check(name="signature", ok=True)))
    key, fork = Path("k.pub"), Path("/fork")
    assert land._bundle_ok(Path("bundle"), fork, key, None) == []
    assert calls == [{"root": fork, "identity": None, "keys": [key]}]


def test_every_failed_check_is_named_by_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    verdict = _verdict(
        Check(name="signature", ok=True),
        Check(name="payload digests", ok=False, reason="payload.digest-mismatch"),
        Check(name="layout", ok=False),  # no reason code: its name
    )
    _with(monkeypatch, lambda b: verdict)
    got = land._bundle_ok(Path("bundle"), Path("/fork"), None, Path("lock.json"))
    assert got == ["bundle-not-verified: payload.digest-mismatch, layout"]


def test_a_bundle_verify_cannot_read_is_refused_with_its_exit_code(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def verify(bundle: Path) -> BundleVerdict:
        raise InputError("not a signer lock", file="lock.json")

    _with(monkeypatch, verify)
    assert land._bundle_ok(Path("b"), Path("/f"), None, None) == ["bundle-not-verified: exit 2"]
    assert capsys.readouterr().err == "trace: error: lock.json: not a signer lock\n"


def test_draft_decides_in_process_and_reads_the_typed_decision(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from engine.agent.decide import decide_draft
    from engine.agent.options import DraftOptions

    seen: dict[str, Any] = {}

    # the shape of engine.signoff.decide.Decided: .decision.decision, .decision.reasons
    reasons = [SimpleNamespace(code="gate-scope-failed"), SimpleNamespace(code="review-missing")]
    decided = SimpleNamespace(decision=SimpleNamespace(decision="deny", reasons=reasons))

    def decide_candidate(candidate: Path, **kw: Any) -> Any:
        seen.update(kw, candidate=candidate)
        return decided

    monkeypatch.setattr("engine.signoff.decide.decide_candidate", decide_candidate)
    opts = DraftOptions(fork=tmp_path, state=tmp_path / "s", source=tmp_path, signing_policy=None)
    cand = tmp_path / "c" / "candidate.toml"
    assert decide_draft(cand, opts) == ("deny", ["gate-scope-failed", "review-missing"])
    assert seen["out"] == tmp_path / "s" / "decisions" / "draft-c.json"
    assert (seen["fork"], seen["state_dir"], seen["signing"]) == (tmp_path, tmp_path / "s", None)


def test_a_draft_that_cannot_be_decided_is_bad_input_naming_the_candidate(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from engine.agent.decide import decide_draft
    from engine.agent.options import DraftOptions
    from engine.errors import BusyError

    def decide_candidate(candidate: Path, **kw: Any) -> Any:
        raise BusyError("the state directory is busy")

    monkeypatch.setattr("engine.signoff.decide.decide_candidate", decide_candidate)
    opts = DraftOptions(fork=tmp_path, state=tmp_path / "s", source=tmp_path)
    cand = tmp_path / "c" / "candidate.toml"
    with pytest.raises(InputError) as exc:
        decide_draft(cand, opts)
    assert exc.value.message == (
        f"`trace decide` could not decide the drafted candidate (exit {BusyError.exit_code})"
    )
    assert exc.value.file == str(cand)
    assert capsys.readouterr().err.startswith("trace: error: the state directory is busy")
