"""The fuzzing gate (issue 26): the coverage-guided loop, minimisation, crash signatures, the
gate's judgement, and the default budget against urldec's length special case (10 of 10 seeds;
3 of 3 in the fast tier, tests/tiers.py).

The loop's claims that are pure logic run against explicit fakes; the 10-seed claim runs the
real fixture decoder, compiled with gcc's trace-pc and trace's runtime exactly as the fuzzing
build compiles it (templates/gates/fuzz-cc), through the PoC's invocation shape. The end-to-end
claim (DENY fuzz-found-crash, the input bundled) is the calibration table's."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import tomli

from tests.fuzzbuild import fuzz_binary
from tests.tiers import repeats
from trace_sandbox.gates.fuzz import (
    MAP_SIZE,
    Outcome,
    features,
    fuzz,
    minimise,
    mutate,
)
from trace_sandbox.gates.fuzz_gate import evaluate
from trace_sandbox.gates.fuzz_runner import ProgramRunner, crash_of
from trace_sandbox.gates.variants import Invocation, Unit, generate, units_of

REPO = Path(__file__).resolve().parent.parent
URLDEC = REPO / "tests" / "fixtures" / "fork" / "pkgs" / "urldec" / "src" / "urldec.c"
WRONG = REPO / "tests" / "fixtures" / "fork" / "trace" / "candidates" / "urldec-length-special-case"
POLICY = {"name": "trace-signing", "version": "1.4.0", "thresholds": {}}


def decoded_length(data: bytes) -> int:
    """urldec's decode() in Python: how many bytes a line decodes to."""
    hexd = b"0123456789abcdefABCDEF"
    n = i = 0
    while i < len(data):
        escape = data[i : i + 1] == b"%" and len(data) > i + 2
        if escape and data[i + 1] in hexd and data[i + 2] in hexd:
            i += 2
        n += 1
        i += 1
    return n


def fake_decoder(unit: int, data: bytes) -> Outcome:
    """The length special case as a fake target: refuses 16 bytes of input, crashes when the
    line decodes to 16 bytes; coverage: one feature per escape decoded, one per length class."""
    line = data.split(b"\n")[0]
    if len(line) == 16:
        return Outcome(1)
    n = decoded_length(line)
    if n == 16:
        return Outcome(1, crash="AddressSanitizer: heap-buffer-overflow @ decode")
    escapes = len(line) - n
    return Outcome(1 | (1 << (1 + min(escapes, 20))) | (1 << (30 + min(n, 20))))


def test_features_bucket_counts_so_new_count_classes_are_new() -> None:
    raw = bytearray(MAP_SIZE)
    raw[5] = 1
    one = features(bytes(raw))
    raw[5] = 3
    three = features(bytes(raw))
    raw[5] = 2
    assert three & ~one and features(bytes(raw)) & ~three
    raw[5] = 200
    assert features(bytes(raw)) == 128 << (5 * 8)
    assert features(bytes(MAP_SIZE)) == 0


def test_the_same_seed_explores_the_same_inputs_and_another_seed_others() -> None:
    seeds = [(0, b"AAAAAAAAAAAAAAAA\n")]
    a = fuzz(seeds, fake_decoder, executions=300, seed=3, tokens=[b"%"])
    b = fuzz(seeds, fake_decoder, executions=300, seed=3, tokens=[b"%"])
    c = fuzz(seeds, fake_decoder, executions=300, seed=4, tokens=[b"%"])
    assert a.corpus == b.corpus and [x.data for x in a.crashes] == [x.data for x in b.crashes]
    assert a.corpus != c.corpus
    assert a.executions == 300


def test_the_loop_finds_the_escaped_input_that_the_length_special_case_lets_through() -> None:
    found = fuzz([(0, b"AAAAAAAAAAAAAAAA\n")], fake_decoder, executions=500, seed=0)
    assert found.crashes, "no crash found"
    data = found.crashes[0].data.split(b"\n")[0]
    assert len(data) != 16 and decoded_length(data) == 16


def test_a_crash_is_kept_once_per_signature_and_never_joins_the_corpus() -> None:
    def always(unit: int, data: bytes) -> Outcome:
        return Outcome(1, crash="SIGSEGV")

    result = fuzz([(0, b"x"), (0, b"y")], always, executions=50, seed=0)
    assert [c.signature for c in result.crashes] == ["SIGSEGV"]
    assert result.crashes[0].found_at == 1


def test_minimise_drops_every_byte_the_crash_does_not_need() -> None:
    def crashes(data: bytes) -> bool:
        return b"%41" in data and data.count(b"B") >= 2

    small, used = minimise(b"xxxxBxx%41yyyyByyyy", crashes, 1000)
    assert small in (b"B%41B", b"%41BB", b"BB%41") and used < 1000
    big, none = minimise(b"xyz%41BB", crashes, 0)
    assert big == b"xyz%41BB" and none == 0


def test_mutations_stay_within_the_size_cap() -> None:
    rng = random.Random(1)
    data = b"A" * 16
    for _ in range(2000):
        data = mutate(data, rng, [b"%41" * 8], data)
        assert len(data) <= 1 << 14


def test_crash_signatures_name_the_kind_and_the_innermost_frame_or_the_signal() -> None:
    report = (
        "==1==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x1\n"
        "    #0 0x564fe36e6550  (/nix/store/x-urldec/bin/urldec+0x1550)\n"
        "    #1 0x7f23362b89cf  (/lib/libasan.so.8+0xb89cf)\n"
        "SUMMARY: AddressSanitizer: heap-buffer-overflow (/nix/store/x-urldec/bin/urldec+0x1550)\n"
    )
    assert crash_of(report, 1) == "AddressSanitizer: heap-buffer-overflow @ urldec+0x1550"
    assert crash_of("    #0 0x1 in decode /src/u.c:32\nSUMMARY: AddressSanitizer: SEGV x", 1) == (
        "AddressSanitizer: SEGV @ decode"
    )
    assert crash_of("", -11) == "SIGSEGV"
    assert crash_of("urldec: line too long\n", 2) is None


# --- the gate's judgement ----------------------------------------------------------------------


def _run_record(crash: str | None) -> dict[str, Any]:
    inv: dict[str, Any] = {"exit_code": 1 if crash else 0, "signal": None, "sanitizer": None}
    if crash:
        inv["sanitizer"] = {"tool": "AddressSanitizer", "kind": crash}
    return {"target_ran": True, "invocations": [inv]}


def _side(root: Path, records: list[dict[str, Any]]) -> str:
    (root / "v").mkdir(parents=True)
    for n, rec in enumerate(records, 1):
        d = root / "v" / str(n)
        d.mkdir()
        meta = {"id": f"f{n:03d}-crash", "index": n, "description": "d", "files": {}}
        (d / "variant.json").write_text(json.dumps(meta))
        (d / "outcome.json").write_text(json.dumps(rec))
    return str(root)


def _judge(tmp: Path, post: list[str | None], pre: list[str | None], why: str | None = None) -> Any:
    plan = tmp / "plan"
    plan.mkdir()
    stats = {"executions": 10, "not_measurable": why}
    (plan / "plan.json").write_text(json.dumps({"seed": 0, "fuzz": stats, "variants": []}))
    cfg = {
        "policy": POLICY,
        "plan": str(plan),
        "expect": {"sanitizer": "AddressSanitizer: heap-buffer-overflow"},
        "post": [_side(tmp / "post", [_run_record(c) for c in post])],
        "pre": [_side(tmp / "pre", [_run_record(c) for c in pre])],
    }
    return evaluate(cfg)


def test_a_found_input_that_still_crashes_post_fix_is_fuzz_found_crash(tmp_path: Path) -> None:
    rec = _judge(tmp_path, ["heap-buffer-overflow"], ["heap-buffer-overflow"])
    assert rec["reasons"] == ["fuzz-found-crash"] and not rec["passed"] and rec["measurable"]
    assert rec["details"]["still_failing"][0]["id"] == "f001-crash"


def test_a_pre_existing_crash_of_another_kind_is_listed_not_failing(tmp_path: Path) -> None:
    rec = _judge(tmp_path, ["SEGV"], ["SEGV"])
    assert rec["passed"] and rec["reasons"] == []
    assert rec["details"]["results"][0]["status"] == "other-crash"


def test_a_crash_the_fix_brings_is_a_finding_whatever_its_kind(tmp_path: Path) -> None:
    rec = _judge(tmp_path, ["SEGV"], [None])
    assert rec["reasons"] == ["fuzz-found-crash"]


def test_not_measurable_says_why_and_never_denies(tmp_path: Path) -> None:
    rec = _judge(tmp_path, [], [], why="the PoC's targets are not compiled programs (Python)")
    assert rec["passed"] and not rec["measurable"] and rec["reasons"] == []
    assert rec["details"]["not_measurable"]["code"] == "fuzz-not-measurable"
    codes = {
        r["code"] for r in tomli.loads((REPO / "policy" / "reasons.toml").read_text())["reasons"]
    }
    assert {"fuzz-found-crash", "fuzz-not-measurable"} <= codes


# --- the default budget against the real decoder, 10 seeds (3 in the fast tier, tests/tiers.py) --

SEEDS = repeats(10, 3)


def _instrumented(tmp: Path) -> Path:
    """urldec with the length special case, compiled as the fuzzing build compiles it."""
    src = tmp / "src"
    shutil.copytree(URLDEC.parent, src)
    subprocess.run(["patch", "-p1", "-i", str(WRONG / "fix.patch")], cwd=src, check=True)
    fuzz_binary(tmp, tmp / "target" / "bin" / "urldec", [src / "urldec.c"])
    return tmp / "target"


def default_executions() -> int:
    policy = tomli.loads((REPO / "policy" / "signing.toml").read_text())
    return int(policy["gates"]["fuzz"]["executions"])


def gate_seeds(
    invs: list[Invocation], files: dict[str, bytes], units: list[Unit]
) -> tuple[list[tuple[int, bytes]], list[bytes]]:
    """The seeds and dictionary the gate's fuzz-plan uses: the PoC's units, then the variants
    gate's variants of them (its policy's budget and seed; good.txt a good input), and the
    variant plan's dictionary (from the patch and the patched file)."""
    policy = tomli.loads((REPO / "policy" / "signing.toml").read_text())["gates"]["variants"]
    sources = [(WRONG / "fix.patch").read_text(), URLDEC.read_text()]
    variants, tokens = generate(
        invs,
        files,
        sources,
        seed=policy["seed"],
        budget=policy["budget"],
        good=frozenset({"good.txt"}),
    )
    index = {u.name: k for k, u in enumerate(units)}
    seeds = [(k, u.data) for k, u in enumerate(units)]
    seeds += [(index[v.unit], v.files[v.unit]) for v in variants if v.unit in v.files]
    return seeds, tokens


@pytest.mark.skipif(not shutil.which("gcc") or not shutil.which("patch"), reason="needs gcc")
def test_the_default_budget_finds_the_length_special_case_with_10_of_10_seeds(
    tmp_path: Path,
) -> None:
    """Seeded as the gate seeds it (the PoC's units, the variants, the dictionary), each seed
    runs until its first crash (a prefix of the full, deterministic run): the crash must come
    within the signing policy's executions, from a line of another length than 16 decoding to
    16 bytes (one of its lines: the input may have several)."""
    target = _instrumented(tmp_path)
    invs = [
        Invocation("bin/urldec", "program", ("good.txt",)),
        Invocation("bin/urldec", "program", ("poc.txt",)),
    ]
    files = {n: (WRONG / n).read_bytes() for n in ("good.txt", "good.out", "poc.txt")}
    units = units_of(invs, files)
    work = tmp_path / "run" / "work"
    work.mkdir(parents=True)
    with ProgramRunner(str(target), invs, files, units, str(work)) as runner:
        found = _first_crashes(runner, invs, files, units)
        assert runner.mode() == "fork-server", runner.fallback  # as the gate runs it
    budget = default_executions()
    assert len(found) == SEEDS and max(found.values()) <= budget, found
    print(f"first crash at execution, by seed: {found}")


def _first_crashes(
    runner: ProgramRunner, invs: list[Invocation], files: dict[str, bytes], units: list[Unit]
) -> dict[int, int]:
    """Seeds 0 to SEEDS - 1 at the default budget: the execution of each seed's first crash."""
    assert runner(0, units[0].data).crash is None  # the wrong fix passes the PoC itself
    seeds, tokens = gate_seeds(invs, files, units)
    assert not any(runner(k, d).crash for k, d in seeds)  # the variants miss it
    budget = default_executions()
    found = {}
    for seed in range(SEEDS):
        result = fuzz(
            seeds, runner, executions=budget, seed=seed, tokens=tokens, stop_on_crash=True
        )
        assert result.crashes, f"seed {seed}: no crash in {budget} executions"
        (crash,) = result.crashes
        texts = [x.split(b"\0")[0] for x in crash.data.split(b"\n")]  # a C string ends at NUL
        assert any(len(x) != 16 and decoded_length(x) == 16 for x in texts), (seed, crash.data)
        assert "heap-buffer-overflow" in crash.signature
        found[seed] = crash.found_at
    return found
