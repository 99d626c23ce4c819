"""End to end: `trace verify` on every fixture candidate, with real sandboxed nix builds.

The verdicts are read from the session's one verified copy of tests/fixtures/fork (its own state
dir; tests/verified.py, shared with the calibration table: each candidate is verified once per
session). Tests that edit a fork or test caching use their own fresh copy, so no test answers
from another's cache by accident.
"""

from __future__ import annotations

import difflib
import json
import shutil
import subprocess
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path

import pytest

from engine.pipeline.verify_fresh import run_verify
from engine.verify_result import VerifyResult
from tests.verified import CANDIDATES, FIXTURE, Results, VerifiedFork, cheap_gates, copy_fork

pytestmark = pytest.mark.nix


def verify(fork: Path, name: str, **kw: object) -> VerifyResult:
    return run_verify(
        fork / CANDIDATES / name / "candidate.toml", fork=fork, state_dir=fork / ".trace", **kw
    )  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def fork(verified_fork: VerifiedFork) -> Path:
    """The session's verified fork: read here, never edited."""
    return verified_fork.fork


@pytest.fixture(scope="module")
def results(verified_fork: VerifiedFork) -> Mapping[str, VerifyResult]:
    """Every candidate's result, verified on first read (once per session)."""
    return Results(verified_fork)


@pytest.mark.parametrize(
    ("name", "passed", "reasons"),
    [
        ("cparse-key-overflow", True, []),
        ("pager-last-page", True, []),
        # passes: the gates of this issue cannot see it (see its NOTE.md)
        ("cparse-wrong-fix", True, []),
        # the reproducer trips another bug, which the key fix does not touch either
        ("cparse-other-failure", False, ["pre-fix-wrong-failure", "post-fix-still-fails"]),
        ("stamp-release", False, ["nondeterministic"]),
        ("racy-lost-update", False, ["flaky"]),
        # issue 9: a clean rejection is the fixed behaviour ([accept] exit 2 + stderr) ...
        ("cparse-reject-long-key", True, []),
        # ... but a "fix" that rejects the good input too is refused by its own oracle
        ("cparse-reject-everything", False, ["post-fix-still-fails"]),
        # a wrong-output bug (shell + awk, exit 0) shown by the target's own stdout, and fixed
        ("roster-wrong-field", True, []),
    ],
)
def test_fixture_candidate_verdict(
    results: Mapping[str, VerifyResult], name: str, passed: bool, reasons: list[str]
) -> None:
    res = results[name]
    assert (res.passed, res.reasons) == (passed, reasons), [c.model_dump() for c in res.claims]
    assert [c.claim for c in res.claims] == [
        "pre-fix-fails-as-expected",
        "post-fix-survives",
        "runs-agree",
        "deterministic",
    ]
    assert len(res.pre.runs) == len(res.post.runs) == 3
    assert res.pre.build_ok and res.post.build_ok
    assert res.pre.build.drv != res.post.build.drv


def test_asan_records_come_from_the_sandboxed_runs(results: Mapping[str, VerifyResult]) -> None:
    res = results["cparse-key-overflow"]
    for rec in res.pre.runs:
        assert rec.sanitizer is not None
        assert (rec.sanitizer.tool, rec.sanitizer.kind) == (
            "AddressSanitizer",
            "heap-buffer-overflow",
        )
        assert rec.exit_code == 1 and rec.target_ran
        assert [(i.target, i.exit_code) for i in rec.invocations] == [("bin/cparse", 1)]
        # normalised: no pids, addresses or sandbox temp paths
        assert "==PID==" in rec.stderr_tail and "/build/" not in rec.stderr_tail.split("SUMMARY")[0]
    # identical records across runs (only the run number differs): deterministic evidence
    digests = {(r.stdout_sha256, r.stderr_sha256) for r in res.pre.runs}
    assert len(digests) == 1
    for rec in res.post.runs:
        assert rec.exit_code == 0 and rec.sanitizer is None and rec.target_ran
        assert "skipping a key" in rec.stderr_tail
    assert res.deterministic is True and res.flaky is False
    assert res.expectation is not None and res.expectation.passed


def test_python_library_target_is_seen_through_the_audit_hook(
    results: Mapping[str, VerifyResult],
) -> None:
    res = results["pager-last-page"]
    for rec in res.pre.runs + res.post.runs:
        assert rec.target_ran
        assert "lib/python/pager/__init__.py" in [i.target for i in rec.invocations]
    assert "page 11 holds 0 items" in res.pre.runs[0].stderr_tail
    assert "page 11: [101, 102, 103]" in res.post.runs[0].stdout_tail


def test_a_clean_rejection_passes_claims_gates_and_policy(
    fork: Path, results: Mapping[str, VerifyResult], capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 9, item 1: the fix prints an error and exits 2; the good input still works."""
    from engine.cli import main

    res = results["cparse-reject-long-key"]
    for rec in res.post.runs:
        ends = [(i.args, i.exit_code, i.sanitizer) for i in rec.invocations]
        assert ends == [
            (["boundary-key.conf"], 2, None),
            (["good.conf"], 0, None),
            (["long-key.conf"], 2, None),
        ]
    # the pre-fix failure names where it failed: ASan frames with file:line (built with -g)
    crash = next(i for i in res.pre.runs[0].invocations if i.sanitizer)
    [frame] = [f for f in crash.frames[:2] if f.function == "parse_line"]  # under memcpy, or #0
    assert frame.line and str(frame.file).endswith("/cparse.c") and frame.source == "sanitizer"
    assert [f.function for f in crash.frames].index("main") > crash.frames.index(frame)
    site = res.gates["fault-site"]
    assert (site.passed, site.measurable, site.reasons) == (True, True, [])
    cand = fork / CANDIDATES / "cparse-reject-long-key" / "candidate.toml"
    code = main(["decide", str(cand), "--state-dir", str(fork / ".trace"), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["decision"] == "allow", doc["reasons"]


def test_a_fix_that_rejects_every_input_names_the_good_invocation(
    results: Mapping[str, VerifyResult],
) -> None:
    post = results["cparse-reject-everything"].claims[1]
    assert post.reason == "post-fix-still-fails"
    assert post.detail.startswith("accept.invocation.1: bin/cparse good.conf: exit 2")
    assert "stdout differs from good.out" in post.detail
    assert results["cparse-reject-everything"].claims[0].holds  # the bug itself was shown


def test_a_wrong_output_bug_without_python(results: Mapping[str, VerifyResult]) -> None:
    """Issue 9, item 2: roster exits 0 but prints the phone where the email belongs."""
    res = results["roster-wrong-field"]
    [wrong] = res.pre.runs[0].invocations
    assert (wrong.target, wrong.exit_code, wrong.stdout) == (
        "bin/roster",
        0,
        "alice <555-0101>\nbob <555-0102>\n",
    )
    [right] = res.post.runs[0].invocations
    # the recorded tail is redacted in the sandbox (issue 11); the golden file is compared with
    # the whole stream as the target wrote it, so the post-fix claim holds
    assert right.stdout == "alice <[REDACTED:email]>\nbob <[REDACTED:email]>\n"
    assert all(c.holds for c in res.claims), res.claims
    # no stack to look at: the fault-site gate says so instead of guessing
    site = res.gates["fault-site"]
    assert (site.passed, site.measurable, site.reasons) == (True, False, [])


def test_a_fix_away_from_the_fault(results: Mapping[str, VerifyResult]) -> None:
    """The wrong fix (KEY_MAX 16 -> 64) changes no function on the failing stack."""
    site = results["cparse-wrong-fix"].gates["fault-site"]
    assert (site.passed, site.measurable, site.reasons) == (False, True, ["fix-away-from-fault"])
    assert "parse_line" in str(site.details["summary"])


def test_the_evidence_column_does_not_repeat_the_detail(
    results: Mapping[str, VerifyResult],
) -> None:
    """Issue 9, item 4: the evidence says which runs; the detail says what happened, once."""
    for res in results.values():
        for c in res.claims:
            assert not c.detail or c.detail not in c.evidence, (c.evidence, c.detail)


def test_wrong_failure_names_what_differed(results: Mapping[str, VerifyResult]) -> None:
    claim = results["cparse-other-failure"].claims[0]
    assert claim.reason == "pre-fix-wrong-failure"
    assert "got 'AddressSanitizer: stack-buffer-overflow'" in claim.detail


def test_flaky_and_nondeterministic_flags(results: Mapping[str, VerifyResult]) -> None:
    racy = results["racy-lost-update"]
    assert racy.flaky and racy.pre.flaky and not racy.post.flaky
    assert [r.failed for r in racy.pre.runs] == [False, True, False]
    stamp = results["stamp-release"]
    assert stamp.deterministic is False
    assert stamp.steps["post-fix"].deterministic is False
    assert all(s.deterministic for s in stamp.post.run_steps)


def test_wrong_fix_leaves_the_bug_reachable(
    results: Mapping[str, VerifyResult], tmp_path: Path
) -> None:
    """What NOTE.md says: a longer key still overflows the patched build."""
    assert results["cparse-wrong-fix"].passed
    fork = copy_fork(tmp_path / "fork")  # a candidate is added: not the shared fork
    cand = fork / CANDIDATES / "cparse-wrong-fix"
    text = (cand / "candidate.toml").read_text()
    variant = text.replace('"repro.sh"', '"variant-repro.sh"').replace(
        "long-key.conf", "variant-key.conf"
    )
    (cand / "variant.toml").write_text(variant.replace("wrong-fix", "wrong-fix-variant"))
    res = run_verify(cand / "variant.toml", fork=fork, state_dir=fork / ".trace")
    assert res.reasons == ["post-fix-still-fails"]
    assert res.post.runs[0].sanitizer is not None
    assert res.post.runs[0].sanitizer.kind == "heap-buffer-overflow"


def test_result_json_and_exit_code_from_the_cli(
    fork: Path, results: Mapping[str, VerifyResult], tmp_path: Path
) -> None:
    assert not results["cparse-other-failure"].passed  # verified in the fork's own state dir
    out = tmp_path / "out.json"  # not in the shared fork: a file there moves every key
    cand = fork / CANDIDATES / "cparse-other-failure" / "candidate.toml"
    proc = subprocess.run(
        [sys.executable, "-m", "engine.cli", "verify", str(cand), "--out", str(out), "-q"],
        cwd=fork,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert "pre-fix-wrong-failure" in proc.stdout and "FAIL" in proc.stdout
    data = json.loads(out.read_text())
    assert data["schema"] == "trace.verify/v1"
    assert VerifyResult.model_validate(data).reasons == [
        "pre-fix-wrong-failure",
        "post-fix-still-fails",
    ]
    # the fork's own state dir (found from the candidate's location) had every result: nothing
    # was built ("reused": the key moved because a file in the fork changed, the drv did not)
    assert {s["status"] for s in data["steps"].values()} <= {"cached", "reused"}


# ---- incremental behaviour (own fork and state) ----


def test_second_run_builds_nothing_and_a_patch_change_rebuilds_only_post_fix(
    tmp_path: Path,
) -> None:
    fork = copy_fork(tmp_path / "fork")
    first = verify(fork, "cparse-key-overflow")
    assert first.passed
    second = verify(fork, "cparse-key-overflow")
    assert {s.status for s in second.steps.values()} == {"cached"}
    assert (second.claims, second.pre.runs, second.post.runs) == (
        first.claims,
        first.pre.runs,
        first.post.runs,
    )

    patch = fork / CANDIDATES / "cparse-key-overflow" / "fix.patch"
    token = uuid.uuid4().hex[:8]  # a patch no earlier test run has built
    patch.write_text(patch.read_text().replace("skipping a key", f"ignoring ({token}) a key"))
    third = verify(fork, "cparse-key-overflow")
    assert third.passed
    pre_ids = ["pre-fix", "pre-fix-run@1", "pre-fix-run@2", "pre-fix-run@3"]
    post_ids = ["post-fix", "post-fix-run@1", "post-fix-run@2", "post-fix-run@3", "expectation"]
    for sid in pre_ids:
        # the pre-fix side is answered from the index: same key, same output, no evaluation
        assert third.steps[sid].status == "cached", sid
        assert third.steps[sid].out == first.steps[sid].out, sid
    for sid in post_ids:
        assert third.steps[sid].status == "built", sid
        assert third.steps[sid].out != first.steps[sid].out, sid
    assert f"ignoring ({token}) a key" in third.post.runs[0].stderr_tail


# ---- reason codes that need a broken package, patch or reproducer ----


def write_candidate(
    fork: Path, name: str, package: str, patch: str, repro: str, expect: str, data: str = ""
) -> Path:
    d = fork / CANDIDATES / name
    d.mkdir(parents=True)
    (d / "fix.patch").write_text(patch)
    (d / "repro.sh").write_text(repro)
    shutil.copy(fork / CANDIDATES / "cparse-key-overflow" / "advisory.json", d / "advisory.json")
    files = ""
    if data:
        shutil.copy(fork / CANDIDATES / "cparse-key-overflow" / data, d / data)
        files = f'data = ["{data}"]\n'
    (d / "candidate.toml").write_text(
        f'id = "{name}"\npackage = "{package}"\npatches = ["fix.patch"]\n'
        '[advisory]\nosv = "advisory.json"\n'
        f'[reproducer]\nscript = "repro.sh"\nruns = 2\n{files}'
        f"[expect]\n{expect}\n"
    )
    return d / "candidate.toml"


SRC = (FIXTURE / "pkgs" / "cparse" / "src" / "cparse.c").read_text()
CHECK = (
    "    if (klen >= KEY_MAX) {\n"
    '        fprintf(stderr, "cparse: key too long\\n");\n'
    "        return 0;\n"
    "    }\n"
)
MALLOC = "    char *key = malloc(KEY_MAX);\n"
FIXED = SRC.replace(MALLOC, CHECK + MALLOC)
BROKEN = SRC.replace(MALLOC, MALLOC.replace(";", ""))
ASAN_EXPECT = 'sanitizer = "AddressSanitizer: heap-buffer-overflow"'
CHEAT = (
    "printf 'a=b\\n' > ok.conf\n"
    '"$TARGET/bin/cparse" ok.conf\n'
    "env | sort\n"
    "pkg=$(tr '\\000' '\\n' < /proc/$PPID/environ | sed -n 's/^target=//p')\n"
    'if grep -q "key too long" "$pkg/bin/cparse"; then exit 0; fi\n'
    'echo "==1==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x602000000020" >&2\n'
    "exit 1\n"
)


def udiff(old: str, new: str) -> str:
    lines = difflib.unified_diff(
        old.splitlines(True), new.splitlines(True), "a/cparse.c", "b/cparse.c"
    )
    return "".join(lines)


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory) -> dict[str, VerifyResult]:
    fork = copy_fork(tmp_path_factory.mktemp("broken") / "fork")
    cheap_gates(fork)
    # a package whose unpatched build does not compile (the candidate's patch repairs it)
    (fork / "break.patch").write_text(udiff(SRC, BROKEN))
    nix = (fork / "default.nix").read_text()
    nix = nix.replace(
        "racy = callPackage ./pkgs/racy { };",
        "racy = callPackage ./pkgs/racy { };\n"
        "    brokenparse = (callPackage ./pkgs/cparse { }).overrideAttrs"
        " (old: { patches = [ ./break.patch ]; });",
    )
    (fork / "default.nix").write_text(nix)
    key_fix = udiff(SRC, FIXED)
    run = '"$TARGET/bin/cparse" long-key.conf\n'
    cases = {
        "post-build-broken": ("cparse", udiff(SRC, BROKEN), run, ASAN_EXPECT, "long-key.conf"),
        "pre-build-broken": (
            "brokenparse",
            udiff(BROKEN, FIXED),
            run,
            ASAN_EXPECT,
            "long-key.conf",
        ),
        "never-ran": ("cparse", key_fix, "echo pretending >&2; exit 1\n", "exit_code = 1", ""),
        "did-not-fail": (
            "cparse",
            key_fix,
            "printf 'a=b\\n' > ok.conf\n\"$TARGET/bin/cparse\" ok.conf\n",
            ASAN_EXPECT,
            "",
        ),
        # the audit's cheating reproducer: runs cparse harmlessly, then tells the sides apart
        # (no TRACE_SIDE any more: it fingerprints the real binary it finds through its parent's
        # environment) and, on the unpatched side only, echoes a sanitizer line and exits 1
        "cheat": ("cparse", key_fix, CHEAT, ASAN_EXPECT, ""),
        "network": (
            "cparse",
            key_fix,
            '"$TARGET/bin/cparse" long-key.conf 2>/dev/null\n'
            # 192.0.2.1 is TEST-NET-1 (RFC 5737): never a real host, even outside a sandbox
            "python3 -c \"import socket; socket.create_connection(('192.0.2.1', 80), 5)\"\n",
            "exit_code = 1",
            "long-key.conf",
        ),
    }
    out = {}
    for name, (pkg, patch, repro, expect, data) in cases.items():
        cand = write_candidate(fork, name, pkg, patch, repro, expect, data)
        out[name] = run_verify(cand, fork=fork, state_dir=fork / ".trace", jobs=2)
    return out


@pytest.mark.parametrize(
    ("name", "reasons"),
    [
        ("post-build-broken", ["post-fix-build-broken"]),
        ("pre-build-broken", ["pre-fix-build-broken"]),
        ("never-ran", ["target-never-ran"]),
        ("did-not-fail", ["pre-fix-did-not-fail"]),
        # the script's own exit 1 after the fix no longer counts either way (issue 9)
        ("cheat", ["pre-fix-did-not-fail"]),
    ],
)
def test_reason_codes_from_broken_inputs(
    broken: dict[str, VerifyResult], name: str, reasons: list[str]
) -> None:
    res = broken[name]
    assert not res.passed
    assert res.reasons == reasons, [c.model_dump() for c in res.claims]


def test_a_broken_build_is_an_outcome_not_a_crash(broken: dict[str, VerifyResult]) -> None:
    res = broken["post-build-broken"]
    assert res.post.build.status == "failed" and "error" in res.post.build.log_tail
    assert [r.build for r in res.post.runs] == ["failed", "failed"]
    assert {s.status for s in res.post.run_steps} == {"skipped"}
    assert res.claims[0].holds  # the pre-fix side is still judged on its own
    pre = broken["pre-build-broken"]
    assert pre.claims[1].holds and pre.post.build_ok


def test_reproducer_cannot_reach_the_network(broken: dict[str, VerifyResult]) -> None:
    rec = broken["network"].pre.runs[0]
    assert rec.target_ran and rec.exit_code == 1
    assert "Network is unreachable" in rec.stderr_tail


def test_a_failure_only_the_reproducer_reports_does_not_pass(
    broken: dict[str, VerifyResult],
) -> None:
    """The cheat tells the sides apart and fakes the pre-fix failure: the script's own exit and
    sanitizer line were the evidence once (PASS); now only the target's behaviour counts."""
    res = broken["cheat"]
    for rec in res.pre.runs:
        assert rec.exit_code == 1 and "ERROR: AddressSanitizer" in rec.stderr_tail  # the script
        assert rec.target_ran and not rec.failed and rec.sanitizer is None  # the target
        assert [(i.target, i.exit_code, i.sanitizer) for i in rec.invocations] == [
            ("bin/cparse", 0, None)
        ]
        # the reproducer sees no side in its environment (it printed all of it)
        assert "TRACE_RUN=" in rec.stdout_tail and "SIDE" not in rec.stdout_tail
    # it cannot tell the sides apart any more (no target store path in its namespace): it fakes
    # the failure on both sides, and the target survives on both; the script's exit is never
    # evidence, so the post-fix claim holds and the pre-fix one (the bug) does not
    assert res.claims[1].holds and all(r.exit_code == 1 for r in res.post.runs)
    assert not res.passed and res.claims[0].detail.startswith("no target invocation failed")
