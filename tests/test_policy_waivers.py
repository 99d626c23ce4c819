"""Waivers: one reason, one candidate, until an expiry date; rejected when they name what they
may not; listed in the decision record whatever they did."""

from __future__ import annotations

import datetime as dt
import textwrap
from pathlib import Path

import pytest

from engine.errors import PolicyError
from engine.policy.reasons import Catalogue
from engine.policy.routing import RouteDecision
from engine.policy.signing import SigningPolicy, load_signing
from engine.policy.waivers import load_waivers
from tests.test_policy_signing import POLICY, _gate, run_case, shipped_route


@pytest.fixture(scope="module")
def signing() -> tuple[SigningPolicy, Catalogue]:
    return load_signing(POLICY / "signing.toml")


@pytest.fixture(scope="module")
def routed() -> RouteDecision:
    return shipped_route()


HEADER = """\
[policy]
name = "test-waivers"
version = "3"
schema = "trace.waivers/v1"
"""


def waiver(reason: str, *, candidate: str = "c1", expires: str = "2026-12-31") -> str:
    return textwrap.dedent(f"""
        [[waivers]]
        candidate = "{candidate}"
        reason = "{reason}"
        justification = "Reviewed by hand: the changed lines are reached by the reproducer."
        expires = {expires}
        approved_by = "security-team"
        """)


def write(tmp_path: Path, *blocks: str) -> Path:
    path = tmp_path / "waivers.toml"
    path.write_text(HEADER + "".join(blocks))
    return path


NOT_MEASURABLE = _gate(
    "coverage", measurable=False, score=None, reasons=["coverage-not-measurable"]
)
ALSO_LOW_MUTATION = _gate("mutation", score=0.5)


def test_an_active_waiver_lifts_exactly_its_reason(
    tmp_path: Path, signing: tuple[SigningPolicy, Catalogue], routed: RouteDecision
) -> None:
    waivers = load_waivers(write(tmp_path, waiver("coverage-not-measurable")), signing[1])
    d = run_case(signing, routed, NOT_MEASURABLE, waivers=waivers)
    assert d.decision == "allow"
    assert [r.code for r in d.waived] == ["coverage-not-measurable"]
    assert [(u.waiver.reason, u.status) for u in d.waivers] == [
        ("coverage-not-measurable", "applied")
    ]
    assert d.waivers_file is not None and d.waivers_file.name == "test-waivers"

    def both(v: dict[str, object], g: dict[str, dict[str, object]]) -> dict[str, object]:
        NOT_MEASURABLE(v, g)
        return ALSO_LOW_MUTATION(v, g)

    d = run_case(signing, routed, both, waivers=waivers)
    assert d.decision == "deny"
    assert [r.code for r in d.reasons] == ["mutation-score-below-threshold"]
    assert [r.code for r in d.waived] == ["coverage-not-measurable"]


def test_an_expired_waiver_does_not_apply(
    tmp_path: Path, signing: tuple[SigningPolicy, Catalogue], routed: RouteDecision
) -> None:
    path = write(tmp_path, waiver("coverage-not-measurable", expires="2026-11-28"))
    waivers = load_waivers(path, signing[1])  # loading an expired waiver is fine
    d = run_case(signing, routed, NOT_MEASURABLE, waivers=waivers, today=dt.date(2026, 11, 29))
    assert d.decision == "deny"
    assert [r.code for r in d.reasons] == ["coverage-not-measurable"]
    assert d.waived == []
    assert [u.status for u in d.waivers] == ["expired"]
    # the expiry day itself is still covered
    d = run_case(signing, routed, NOT_MEASURABLE, waivers=waivers, today=dt.date(2026, 11, 28))
    assert (d.decision, [u.status for u in d.waivers]) == ("allow", ["applied"])


def test_waivers_for_other_candidates_or_other_reasons_do_not_apply(
    tmp_path: Path, signing: tuple[SigningPolicy, Catalogue], routed: RouteDecision
) -> None:
    path = write(
        tmp_path,
        waiver("coverage-not-measurable", candidate="someone-else"),
        waiver("coverage-below-threshold"),
    )
    d = run_case(signing, routed, NOT_MEASURABLE, waivers=load_waivers(path, signing[1]))
    assert d.decision == "deny"
    # only waivers naming this candidate are listed; an unused one says so
    assert [(u.waiver.reason, u.status) for u in d.waivers] == [
        ("coverage-below-threshold", "unused")
    ]


@pytest.mark.parametrize(
    ("block", "key", "line", "needle", "hint"),
    [
        (waiver("coverage-unmeasurable"), "waivers.0.reason", 8, "unknown reason code",
         "did you mean 'coverage-not-measurable'?"),
        (waiver("pre-fix-did-not-fail"), "waivers.0.reason", 8, "cannot be waived",
         "fix the evidence"),
        (waiver("flaky") + waiver("flaky"), "waivers.1", 13, "a second waiver", "one waiver"),
        (waiver("flaky").replace("Reviewed by hand: the changed lines are reached by the "
         "reproducer.", "ok"), "waivers.0.justification", 9, "at least 20", "docs/policy.md"),
        (waiver("flaky", expires="'soon'"), "waivers.0.expires", 10, "valid date", "docs"),
        (waiver("flaky").replace("approved_by", "approver"), "waivers.0.approver", 11,
         "unknown key 'approver'", "did you mean 'approved_by'?"),
    ],
)  # fmt: skip
def test_bad_waivers_are_rejected(
    tmp_path: Path,
    signing: tuple[SigningPolicy, Catalogue],
    block: str,
    key: str,
    line: int,
    needle: str,
    hint: str,
) -> None:
    path = write(tmp_path, block)
    with pytest.raises(PolicyError) as exc:
        load_waivers(path, signing[1])
    err = exc.value
    assert needle in err.message
    assert (err.file, err.key, err.line) == (str(path), key, line)
    assert err.hint is not None and hint in err.hint


def test_shipped_example_waiver_file_loads(signing: tuple[SigningPolicy, Catalogue]) -> None:
    waivers = load_waivers(POLICY / "waivers.toml", signing[1])
    assert waivers.ref is not None and waivers.waivers
    assert all(signing[1].reasons[w.reason].waivable for w in waivers.waivers)


@pytest.mark.parametrize(
    ("code", "hint"),
    [
        (
            "coverage-unmeasurable",
            "did you mean 'coverage-not-measurable'? The codes are declared in "
            "trace:policy/reasons.toml",
        ),
        ("zzz", "the codes are declared in trace:policy/reasons.toml"),
    ],
)
def test_unknown_code_hint_reads_as_one_sentence(
    tmp_path: Path, signing: tuple[SigningPolicy, Catalogue], code: str, hint: str
) -> None:
    with pytest.raises(PolicyError) as exc:
        load_waivers(write(tmp_path, waiver(code)), signing[1])
    assert exc.value.hint == hint
