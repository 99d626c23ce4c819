"""Waivers: one reason, one candidate, until an expiry date, valid only when a maintainer the
policy lists signed them for the candidate's current patch; unsigned, foreign-signed, trace-
signed, stale or edited ones are ignored with a warning; TOML files are still checked strictly
(and every entry, being unsigned, is ignored); listed in the decision record whatever they did."""

from __future__ import annotations

import datetime as dt
import textwrap
from pathlib import Path

import pytest

from engine.errors import PolicyError
from engine.policy.maintainers import NOBODY
from engine.policy.reasons import Catalogue
from engine.policy.routing import RouteDecision
from engine.policy.signed_waiver import WaiverTrust
from engine.policy.signing_decision import SigningPolicy, load_signing
from engine.policy.waivers import WaiverSet, load_waivers
from tests.test_policy_signing import POLICY, _gate, run_case, shipped_route
from tests.waiverkit import (
    PATCH,
    make_key,
    sign_waiver,
    trust,
    unsigned_waiver,
    write_maintainers,
)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """alice is a maintainer; mallory is not; tracekey is trace's own signing key."""
    folder = tmp_path_factory.mktemp("keys")
    return {name: make_key(folder, name) for name in ("alice", "mallory", "tracekey")}


@pytest.fixture(scope="module")
def trusted(keys: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> WaiverTrust:
    # trace's own key listed as a maintainer too: it is still never accepted
    path = tmp_path_factory.mktemp("m") / "maintainers.toml"
    listed = write_maintainers(path, {"alice": keys["alice"], "ci": keys["tracekey"]})
    from tests.waiverkit import hint_of

    own = {hint_of(keys["tracekey"]): "trace's own signing key (listed in signing-identity.json)"}
    return trust(listed, {"c1": PATCH}, own)


def signed(
    tmp_path: Path, signing: tuple[SigningPolicy, Catalogue], trusted: WaiverTrust, *files: Path
) -> WaiverSet:
    assert files and all(f.parent == tmp_path / "w" for f in files)
    return load_waivers(tmp_path / "w", signing[1], trusted)


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


NOBODY_TRUST = WaiverTrust(maintainers=NOBODY, patches={"c1": PATCH})

NOT_MEASURABLE = _gate(
    "coverage", measurable=False, score=None, reasons=["coverage-not-measurable"]
)
ALSO_LOW_MUTATION = _gate("mutation", score=0.5)


def test_an_active_waiver_lifts_exactly_its_reason(
    tmp_path: Path,
    signing: tuple[SigningPolicy, Catalogue],
    routed: RouteDecision,
    keys: dict[str, Path],
    trusted: WaiverTrust,
) -> None:
    file = sign_waiver(tmp_path / "w", keys["alice"], "c1", "coverage-not-measurable")
    waivers = signed(tmp_path, signing, trusted, file)
    d = run_case(signing, routed, NOT_MEASURABLE, waivers=waivers)
    assert d.decision == "allow"
    assert [r.code for r in d.waived] == ["coverage-not-measurable"]
    assert [(u.waiver.reason, u.status) for u in d.waivers] == [
        ("coverage-not-measurable", "applied")
    ]
    w = d.waivers[0].waiver
    assert (w.approved_by, w.patch_sha256, w.file) == (
        "alice",
        PATCH,
        "waivers/coverage-not-measurable.json",
    )
    assert d.maintainers is not None and d.maintainers.name == "trace-maintainers"

    def both(v: dict[str, object], g: dict[str, dict[str, object]]) -> dict[str, object]:
        NOT_MEASURABLE(v, g)
        return ALSO_LOW_MUTATION(v, g)

    d = run_case(signing, routed, both, waivers=waivers)
    assert d.decision == "deny"
    assert [r.code for r in d.reasons] == ["mutation-score-below-threshold"]
    assert [r.code for r in d.waived] == ["coverage-not-measurable"]


def test_an_expired_waiver_does_not_apply(
    tmp_path: Path,
    signing: tuple[SigningPolicy, Catalogue],
    routed: RouteDecision,
    keys: dict[str, Path],
    trusted: WaiverTrust,
) -> None:
    file = sign_waiver(
        tmp_path / "w",
        keys["alice"],
        "c1",
        "coverage-not-measurable",
        expires=dt.date(2026, 11, 28),
    )
    waivers = signed(tmp_path, signing, trusted, file)  # loading an expired waiver is fine
    d = run_case(signing, routed, NOT_MEASURABLE, waivers=waivers, today=dt.date(2026, 11, 29))
    assert d.decision == "deny"
    assert [r.code for r in d.reasons] == ["coverage-not-measurable"]
    assert d.waived == []
    assert [u.status for u in d.waivers] == ["expired"]
    # the expiry day itself is still covered
    d = run_case(signing, routed, NOT_MEASURABLE, waivers=waivers, today=dt.date(2026, 11, 28))
    assert (d.decision, [u.status for u in d.waivers]) == ("allow", ["applied"])


def test_waivers_for_other_candidates_or_other_reasons_do_not_apply(
    tmp_path: Path,
    signing: tuple[SigningPolicy, Catalogue],
    routed: RouteDecision,
    keys: dict[str, Path],
    trusted: WaiverTrust,
) -> None:
    folder = tmp_path / "w"
    files = [
        sign_waiver(folder, keys["alice"], "someone-else", "coverage-not-measurable"),
        sign_waiver(folder, keys["alice"], "c1", "coverage-below-threshold"),
    ]
    d = run_case(
        signing, routed, NOT_MEASURABLE, waivers=signed(tmp_path, signing, trusted, *files)
    )
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
        load_waivers(path, signing[1], NOBODY_TRUST)
    err = exc.value
    assert needle in err.message
    assert (err.file, err.key, err.line) == (str(path), key, line)
    assert err.hint is not None and hint in err.hint


def test_shipped_example_waiver_file_loads_and_lifts_nothing(
    signing: tuple[SigningPolicy, Catalogue], capsys: pytest.CaptureFixture[str]
) -> None:
    """A TOML entry is unsigned: the file is checked strictly, then every entry is ignored."""
    example = WaiverTrust(maintainers=NOBODY, patches={"example-candidate": PATCH})
    waivers = load_waivers(POLICY / "waivers.toml", signing[1], example)
    assert waivers.ref is not None and waivers.waivers == []
    assert [(i.file, i.candidate) for i in waivers.ignored] == [
        ("waivers.toml", "example-candidate")
    ]
    err = capsys.readouterr().err
    assert f"{POLICY / 'waivers.toml'}: waiver ignored: unsigned" in err


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
        load_waivers(write(tmp_path, waiver(code)), signing[1], NOBODY_TRUST)
    assert exc.value.hint == hint


def _ignored(
    tmp_path: Path,
    signing: tuple[SigningPolicy, Catalogue],
    routed: RouteDecision,
    trusted: WaiverTrust,
    capsys: pytest.CaptureFixture[str],
    file: Path,
) -> str:
    """The waiver `file` lifts nothing: the deny stands, the decision lists it as ignored, and
    stderr names the file; returns why."""
    capsys.readouterr()
    waivers = load_waivers(tmp_path / "w", signing[1], trusted)
    d = run_case(signing, routed, NOT_MEASURABLE, waivers=waivers)
    assert d.decision == "deny" and d.waived == [] and d.waivers == []
    assert [i.file for i in d.ignored_waivers] == [file.name]
    err = capsys.readouterr().err
    assert f"trace: warning: {file}: waiver ignored: {d.ignored_waivers[0].why}" in err
    return d.ignored_waivers[0].why


def test_an_unsigned_waiver_is_ignored(
    tmp_path: Path,
    signing: tuple[SigningPolicy, Catalogue],
    routed: RouteDecision,
    trusted: WaiverTrust,
    capsys: pytest.CaptureFixture[str],
) -> None:
    file = unsigned_waiver(tmp_path / "w", "c1", "coverage-not-measurable")
    assert _ignored(tmp_path, signing, routed, trusted, capsys, file).startswith("unsigned")


def test_a_waiver_signed_by_an_unlisted_key_is_ignored(
    tmp_path: Path,
    signing: tuple[SigningPolicy, Catalogue],
    routed: RouteDecision,
    keys: dict[str, Path],
    trusted: WaiverTrust,
    capsys: pytest.CaptureFixture[str],
) -> None:
    file = sign_waiver(tmp_path / "w", keys["mallory"], "c1", "coverage-not-measurable")
    why = _ignored(tmp_path, signing, routed, trusted, capsys, file)
    assert "which the maintainers policy (trace-maintainers 1.0.0) does not list" in why


def test_a_waiver_signed_with_traces_own_key_is_ignored(
    tmp_path: Path,
    signing: tuple[SigningPolicy, Catalogue],
    routed: RouteDecision,
    keys: dict[str, Path],
    trusted: WaiverTrust,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Even when a maintainers file lists it: trace's key signs bundles, never waivers."""
    file = sign_waiver(tmp_path / "w", keys["tracekey"], "c1", "coverage-not-measurable")
    why = _ignored(tmp_path, signing, routed, trusted, capsys, file)
    assert why.startswith("signed by trace's own signing key")


def test_a_waiver_for_another_patch_is_ignored(
    tmp_path: Path,
    signing: tuple[SigningPolicy, Catalogue],
    routed: RouteDecision,
    keys: dict[str, Path],
    trusted: WaiverTrust,
    capsys: pytest.CaptureFixture[str],
) -> None:
    other = "0" * 64
    file = sign_waiver(tmp_path / "w", keys["alice"], "c1", "coverage-not-measurable", patch=other)
    why = _ignored(tmp_path, signing, routed, trusted, capsys, file)
    assert why.startswith("stale: the candidate's patch changed")


def test_a_waiver_edited_after_signing_is_ignored(
    tmp_path: Path,
    signing: tuple[SigningPolicy, Catalogue],
    routed: RouteDecision,
    keys: dict[str, Path],
    trusted: WaiverTrust,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The signed waiver was for coverage-below-threshold; the payload now says otherwise."""
    import base64
    import json

    file = sign_waiver(tmp_path / "w", keys["alice"], "c1", "coverage-below-threshold")
    doc = json.loads(file.read_text())
    env = doc["dsseEnvelope"]
    body = base64.b64decode(env["payload"]).replace(
        b"coverage-below-threshold", b"coverage-not-measurable"
    )
    env["payload"] = base64.b64encode(body).decode()
    file.write_text(json.dumps(doc))
    why = _ignored(tmp_path, signing, routed, trusted, capsys, file)
    assert "does not verify with alice's key" in why


def test_a_signed_waiver_of_a_non_waivable_code_lifts_nothing(
    tmp_path: Path,
    signing: tuple[SigningPolicy, Catalogue],
    routed: RouteDecision,
    keys: dict[str, Path],
    trusted: WaiverTrust,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sign_waiver(tmp_path / "w", keys["alice"], "c1", "pre-fix-did-not-fail")
    waivers = load_waivers(tmp_path / "w", signing[1], trusted)
    assert waivers.waivers == []
    assert "is not a waivable code" in waivers.ignored[0].why
    assert "waiver ignored" in capsys.readouterr().err


def test_waivers_of_other_candidates_in_the_folder_are_not_warned_about(
    tmp_path: Path,
    signing: tuple[SigningPolicy, Catalogue],
    keys: dict[str, Path],
    trusted: WaiverTrust,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A fork's waiver folder holds every candidate's: a decision warns only about its own."""
    sign_waiver(tmp_path / "w", keys["mallory"], "someone-else", "coverage-not-measurable")
    sign_waiver(tmp_path / "w", keys["alice"], "someone-else", "flaky", patch="0" * 64)
    waivers = load_waivers(tmp_path / "w", signing[1], trusted)
    assert (waivers.waivers, waivers.ignored) == ([], [])
    assert "waiver ignored" not in capsys.readouterr().err


def test_trace_fork_reads_the_forks_signed_waiver_folder_first(tmp_path: Path) -> None:
    from engine.fork.one_candidate import fork_waivers

    own, merged = tmp_path / "own", tmp_path / "merged"
    own.mkdir()
    assert fork_waivers(None, merged) is None
    assert fork_waivers(own, merged) is None  # no waivers of its own: none apply
    (own / "waivers.toml").write_text("")
    assert fork_waivers(own, merged) == merged / "waivers.toml"  # unsigned: all ignored
    (own / "waivers").mkdir()
    assert fork_waivers(own, merged) == own / "waivers"
