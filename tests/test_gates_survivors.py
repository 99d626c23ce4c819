"""Survivors a reviewer can judge (issue 26): a mutant neither the reproducer nor a variant
kills is compared with the post-fix build on every input tried (the reproducer's calls, the
variants, the fuzz corpus). One that behaves exactly as the fix everywhere is possibly
equivalent (left out of the score, `mutation-possibly-equivalent` when it would sink it); one
some input tells from the fix is a distinguished survivor (the oracles' real gap:
`mutation-survivor-distinguished` beside `mutation-score-below-threshold`). Explicit run
records and small shell programs; no nix."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from trace_sandbox.gates import survivors
from trace_sandbox.gates.corpus_replay import replay, write_corpus
from trace_sandbox.gates.mutation import evaluate as mutation_gate
from trace_sandbox.gates.mutation import write_mutants
from trace_sandbox.gates.variants import Invocation, Unit

REPO = Path(__file__).resolve().parent.parent
PTR = REPO / "tests" / "fixtures" / "gates" / "cparse-ptr" / "fix.patch"  # six mutants
JUDGE = str(REPO / "trace_sandbox" / "gates" / "oracle.py")


def policy(min_score: float) -> str:
    return json.dumps({"name": "t", "version": "1", "thresholds": {"min_score": min_score}})


def inv(exit_code: int = 0, stdout: str = "ok\n", stderr: str = "", **kw: Any) -> dict[str, Any]:
    import hashlib

    out = {
        "target": "bin/cparse",
        "args": ["f.conf"],
        "exit_code": exit_code,
        "signal": None,
        "sanitizer": None,
        "stdout": stdout,
        "stdout_tail": stdout,
        "stdout_sha256": hashlib.sha256(stdout.encode()).hexdigest(),
        "stderr": stderr,
    }
    return out | kw


def run(*invs: dict[str, Any]) -> dict[str, Any]:
    return {"schema": "trace.run/v1", "build": "ok", "target_ran": True, "invocations": list(invs)}


def write(path: Path, value: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value))


def gate(
    tmp: Path,
    mutants: list[dict[str, Any]],
    *,
    evidence: list[dict[str, Any] | None],
    variants: dict[int, dict[int, dict[str, Any]]] | None = None,
    baselines: dict[int, dict[str, Any]] | None = None,
    min_score: float = 0.8,
) -> dict[str, Any]:
    """The mutation gate over PTR's six mutants: mutants[k]'s reproducer record, evidence[k]
    its survivor.json (None: none kept), variants[k] its variant runs by index."""
    write_mutants({"patches": [str(PTR)]}, str(tmp / "m"))
    dirs = []
    for k, rec in enumerate(mutants):
        d = tmp / "m" / str(k + 1)
        write(d / "outcome.json", rec)
        write(d / "check.json", {"status": "run"})
        if evidence[k] is not None:
            write(d / "survivor.json", evidence[k])
        for index, vrec in (variants or {}).get(k, {}).items():
            write(d / "variants" / str(index) / "outcome.json", vrec)
        dirs.append(str(d))
    post = tmp / "post"
    write(post / "outcome.json", run(inv()))
    vposts = []
    for index, rec in (baselines or {}).items():
        v = tmp / "vpost" / str(index)
        write(v / "variant.json", {"id": f"v{index:03d}-field", "index": index, "description": "x"})
        write(v / "outcome.json", rec)
        vposts.append(str(v))
    cfg = {
        "patches": [str(PTR)],
        "policy": policy(min_score),
        "mutant_runs": dirs,
        "post_runs": [str(post)],
        "variant_runs": vposts,
        "judge": JUDGE,
    }
    return mutation_gate(cfg)


KILLED = run(inv(1, "", "error\n"))
NO_CORPUS = {"corpus": {"tried": 0, "of": 0, "distinguished_by": None, "why": "no fuzz corpus"}}


def test_a_survivor_no_input_tells_from_the_fix_is_possibly_equivalent(tmp_path: Path) -> None:
    """Two survivors behave exactly as the fix on the reproducer, the variant and 12 corpus
    inputs: possibly equivalent, out of the score (4/4), with the inputs tried; counting them
    the score would be 4/6 < 0.8, so the gate says mutation-possibly-equivalent (waivable) and
    never mutation-score-below-threshold."""
    same = run(inv())
    kept = {"corpus": {"tried": 12, "of": 12, "distinguished_by": None}}
    rec = gate(
        tmp_path,
        [same, same, KILLED, KILLED, KILLED, KILLED],
        evidence=[kept, kept, None, None, None, None],
        variants={0: {1: run(inv(2, "", "bad\n"))}, 1: {1: run(inv(2, "", "bad\n"))}},
        baselines={1: run(inv(2, "", "bad\n"))},
    )
    d = rec["details"]
    assert [r["status"] for r in d["results"][:2]] == ["possibly-equivalent"] * 2
    assert (rec["score"], d["score_all_survivors"]) == (1.0, round(4 / 6, 6))
    assert (rec["reasons"], d["rules"]) == (
        ["mutation-possibly-equivalent"],
        ["mutation.possibly-equivalent"],
    )
    assert rec["measurable"] is True and d["survivors"] == []
    pe = d["possibly_equivalent"][0]
    assert pe["inputs"] == {"reproducer_calls": 1, "variants": 1, "fuzz_corpus": 12}
    assert "1 variant(s), 12 fuzz corpus input(s)" in pe["why"]
    assert "possibly equivalent m001" in d["summary"]
    # the decision's reason says what the gate saw (details.why: code -> text)
    assert d["why"]["mutation-possibly-equivalent"].startswith(
        "score 1 without them, 0.666667 counting the 2 possibly equivalent survivor(s) "
        "(m001, m002) < 0.8; tried: the reproducer's 1 call(s)"
    )
    # with a threshold the whole score meets, possibly-equivalent survivors deny nothing
    lenient = gate(
        tmp_path / "lenient",
        [same, same] + [KILLED] * 4,
        evidence=[kept, kept] + [None] * 4,
        min_score=0.6,
    )
    assert (lenient["passed"], lenient["reasons"]) == (True, [])


def test_a_survivor_an_input_tells_from_the_fix_is_a_real_gap(tmp_path: Path) -> None:
    """m001's reproducer run is acceptable but prints another line; m002 is told apart only by
    variant 1 (exit 0 where the fix rejected with 2, both acceptable: no kill); m003 only by a
    fuzz corpus input. All three count as survivors (score 3/6) and the gate names the
    distinguishing input with both behaviours: mutation-score-below-threshold and
    mutation-survivor-distinguished."""
    by_corpus = {
        "corpus": {
            "tried": 3,
            "of": 40,
            "distinguished_by": {
                "input": "fuzz corpus entry 3",
                "unit": "f.conf",
                "bytes": 17,
                "input_hex": "00",
                "post_fix": [{"class": "rejects", "exit_code": 2}],
                "mutant": [{"class": "crash", "crash": "AddressSanitizer: SEGV"}],
            },
        }
    }
    rec = gate(
        tmp_path,
        [run(inv(0, "other\n")), run(inv()), run(inv()), KILLED, KILLED, KILLED],
        evidence=[NO_CORPUS, NO_CORPUS, by_corpus, None, None, None],
        variants={1: {1: run(inv(0, "ok\n"))}, 2: {1: run(inv(2, "bad\n"))}},
        baselines={1: run(inv(2, "bad\n"))},
    )
    d = rec["details"]
    assert [r["status"] for r in d["results"][:3]] == ["survived"] * 3
    assert rec["score"] == 0.5
    assert rec["reasons"] == ["mutation-score-below-threshold", "mutation-survivor-distinguished"]
    first, second, third = (s["distinguished_by"] for s in d["survivors"])
    assert first["input"] == "the reproducer" and first["mutant"]["stdout_tail"] == "other\n"
    assert second["input"].startswith("variant v001-field")
    assert (second["post_fix"]["exit_code"], second["mutant"]["exit_code"]) == (2, 0)
    assert third["input"] == "fuzz corpus entry 3"
    assert "mutant crash (AddressSanitizer: SEGV)" in d["results"][2]["why"]
    said = d["why"]["mutation-survivor-distinguished"]
    assert said.startswith("m001: the reproducer: bin/cparse f.conf: post-fix exit 0")
    assert said.endswith(
        "m003: fuzz corpus entry 3: f.conf: post-fix exit 2, mutant crash (AddressSanitizer: SEGV)"
    )


def test_without_the_steps_evidence_a_survivor_stays_a_plain_survivor(tmp_path: Path) -> None:
    """A record without survivor.json (made before issue 26) is never assumed equivalent."""
    rec = gate(tmp_path, [run(inv())] * 2 + [KILLED] * 4, evidence=[None] * 6)
    d = rec["details"]
    assert [r["status"] for r in d["results"][:2]] == ["survived"] * 2
    assert rec["reasons"] == ["mutation-score-below-threshold"]  # no distinguishing input named
    assert d["possibly_equivalent"] == []


def test_behaviour_ignores_a_tracebacks_echoed_source_but_not_its_message() -> None:
    """A Python traceback prints the mutated line itself: that is not behaviour. The exception's
    message, the exit code and the output are."""

    def tb(src: str, msg: str) -> str:
        return (
            "Traceback (most recent call last):\n"
            '  File "<target>/lib/python/pager/__init__.py", line 8, in count\n'
            f"    {src}\n"
            "           ~~~~~~^~~~\n"
            f"ValueError: {msg}\n"
        )

    post = run(inv(1, "", tb("return (total + size - 1) // size", "size")))
    assert (
        survivors.difference(run(inv(1, "", tb("return (total + size - 2) // size", "size"))), post)
        is None
    )
    other = survivors.difference(
        run(inv(1, "", tb("return (total + size - 1) // size", "n"))), post
    )
    assert other is not None and other["call"] == "bin/cparse f.conf"
    # a crash is its kind (the mutant's report is unsymbolized, post-fix's is not)
    asan = {"tool": "AddressSanitizer", "kind": "SEGV"}
    a = run(inv(1, "", "#0 in f x.c:3", sanitizer=asan))
    b = run(inv(1, "", "#0 0x4011 (bin/cparse+0x11)", sanitizer=asan))
    assert survivors.difference(a, b) is None
    # a call only one side made
    extra = run(inv(), inv(0, args=["g.conf"]))
    assert survivors.difference(extra, run(inv()))["why"] == "only the mutant made this call"  # type: ignore[index]


def _tool(root: Path, body: str) -> str:
    (root / "bin").mkdir(parents=True)
    tool = root / "bin" / "tool"
    tool.write_text("#!/bin/sh\n" + body)
    tool.chmod(0o755)
    return str(root)


def test_the_corpus_is_kept_and_replayed_against_both_builds(tmp_path: Path) -> None:
    """fuzz-plan writes its corpus; a survivor's step replays it against the mutant and the
    post-fix build, directly, and stops at the first input they handle differently."""
    invs = [Invocation("bin/tool", "program", ("in.txt",))]
    units = [Unit("file", "in.txt", b"ab")]
    plan = tmp_path / "plan"
    write_corpus(str(plan), invs, {"in.txt": b"ab"}, {}, units, [(0, b"ab"), (0, b"abc")])
    # both print the input's length; the mutant rejects 3-byte inputs (and prints its own path,
    # which is each build's placeholder, not a difference)
    post = _tool(tmp_path / "post", 'echo "$0"; wc -c < "$1"\n')
    same = _tool(tmp_path / "same", 'echo "$0"; wc -c < "$1"\n')
    mutant = _tool(
        tmp_path / "mutant", 'echo "$0"; n=$(wc -c < "$1"); [ "$n" = 3 ] && exit 2; echo "$n"\n'
    )
    alike = replay(str(plan / "corpus"), same, post)
    assert (alike["tried"], alike["of"], alike["distinguished_by"]) == (2, 2, None)
    found = replay(str(plan / "corpus"), mutant, post)
    by = found["distinguished_by"]
    assert (found["tried"], by["input"], by["bytes"]) == (2, "fuzz corpus entry 2", 3)
    assert (by["post_fix"][0]["class"], by["mutant"][0]["class"]) == ("ok", "rejects")
    assert by["mutant"][0]["exit_code"] == 2
    assert replay(str(tmp_path / "none"), mutant, post)["why"] == "no fuzz corpus"
    assert not os.path.exists(plan / "v")  # the corpus only: the plan's variants are its own


def test_with_nothing_killed_a_possibly_equivalent_survivor_still_counts(tmp_path: Path) -> None:
    """cparse-wrong-fix's shape (`KEY_MAX 32` -> `64`): no mutant is killed and every survivor
    behaves as the fix on every input tried. The reproducer pins nothing of the fix: the
    survivors count (score 0, mutation-score-below-threshold, as before), each with its
    evidence; none is named distinguished (no input told it apart)."""
    same = run(inv())
    kept = {"corpus": {"tried": 40, "of": 40, "distinguished_by": None}}
    rec = gate(tmp_path, [same] * 6, evidence=[kept] * 6)
    d = rec["details"]
    assert (rec["measurable"], rec["score"], d["score_all_survivors"]) == (True, 0.0, 0.0)
    assert rec["reasons"] == ["mutation-score-below-threshold"]
    assert [r["status"] for r in d["results"]] == ["survived"] * 6
    assert d["results"][0]["why"].startswith("nothing is killed, so it counts as a survivor; ")
    assert [s["distinguished_by"] for s in d["survivors"]] == [None] * 6
    assert d["possibly_equivalent"] == []


def _replay_plan(tmp_path: Path, entries: list[tuple[int, bytes]]) -> str:
    """Three invocations: `tool in.txt`, `tool seen`, `tool 7`; units: the file, each arg."""
    invs = [
        Invocation("bin/tool", "program", ("in.txt",)),
        Invocation("bin/tool", "program", ("seen",)),
        Invocation("bin/tool", "program", ("7",)),
    ]
    units = [
        Unit("file", "in.txt", b"ab"),
        Unit("arg", "arg:1:0", b"seen"),
        Unit("arg", "arg:2:0", b"7"),
    ]
    plan = tmp_path / "plan"
    write_corpus(str(plan), invs, {"in.txt": b"ab"}, {}, units, entries)
    return str(plan / "corpus")


# Every run is logged outside the work directory ($REPLAY_LOG). `tool FILE` copies FILE into
# `kept` in the work directory when its first byte is `w` (a run that changes what the later
# invocations read), `tool seen` prints what `kept` holds, `tool N` prints N doubled.
TOOL = """echo "$0 $*" >> "$REPLAY_LOG"
case "$1" in
  seen) cat kept 2>/dev/null || echo none ;;
  *.txt) head -c1 "$1" | grep -q w && cp "$1" kept; wc -c < "$1" ;;
  *) echo $(( $1 * 2 )) ;;
esac
"""


def test_a_replay_runs_each_invocation_once_per_situation(tmp_path: Path, monkeypatch: Any) -> None:
    """Issue 30: an entry replaces one unit, so the other invocations are what they were for
    the entries before: their behaviour is reused, not run again (one process per distinct
    argv, stdin and work directory content, per build). Every entry's behaviours are exactly
    what a replay of that entry alone gives; a run that changed the work directory (`tool
    w...` writes `kept`, which `tool seen` then reads) is never reused."""
    from trace_sandbox.gates.corpus_replay import Replayer

    log = tmp_path / "runs.log"
    monkeypatch.setenv("REPLAY_LOG", str(log))
    entries = [(2, b"7"), (2, b"8"), (2, b"7"), (1, b"seen"), (0, b"wx"), (1, b"seen"), (0, b"wx")]
    entries += [(2, b"9"), (0, b"ab")]
    corpus = _replay_plan(tmp_path, entries)
    post = _tool(tmp_path / "post", TOOL)
    same = _tool(tmp_path / "same", TOOL)
    result = replay(corpus, same, post)
    assert (result["tried"], result["distinguished_by"]) == (9, None)
    runs = log.read_text().splitlines()
    # without reuse: 9 entries x 3 invocations x 2 builds; `tool wx` (and `tool seen` after it,
    # whose work directory then holds `kept`) run again each time
    assert result["invocations"]["ran"] == len(runs) < 9 * 3 * 2
    assert result["invocations"]["ran"] + result["invocations"]["reused"] == 9 * 3 * 2
    for build in (post, same):
        mine = [r.removeprefix(f"{build}/bin/tool ") for r in runs if r.startswith(build)]
        # `in.txt` as "ab" once (an entry of "ab" is the PoC's own file: reused), as "wx" every
        # time (it writes `kept`); `seen` and `7` once without `kept`, once with it; 8, 9 once
        assert sorted(mine) == ["7", "7", "8", "9", "in.txt", "in.txt", "in.txt", "seen", "seen"]
    # each entry as a fresh replayer (nothing reused) sees it
    doc = json.loads((Path(corpus) / "corpus.json").read_text())
    (tmp_path / "w1").mkdir()
    (tmp_path / "w2").mkdir()
    shared = Replayer(doc, str(tmp_path / "w1"))
    for unit, data in entries:
        fresh = Replayer(doc, str(tmp_path / "w2"))
        assert shared.run(post, unit, data) == fresh.run(post, unit, data), (unit, data)
    wx = shared.run(post, 0, b"wx")
    assert [b["stdout_sha256"] for b in wx[1:2]] != [
        b["stdout_sha256"] for b in shared.run(post, 1, b"seen")[1:2]
    ]


def test_a_reused_run_still_tells_a_mutant_from_the_fix(tmp_path: Path, monkeypatch: Any) -> None:
    """The mutant differs only after `tool w...` changed the work directory (its `tool seen`
    prints `kept` differently): the replay still finds it, at the same entry as without reuse,
    though `tool seen` with the same argv ran (and was reused) for every entry before."""
    monkeypatch.setenv("REPLAY_LOG", str(tmp_path / "runs.log"))
    corpus = _replay_plan(tmp_path, [(2, b"1"), (2, b"2"), (1, b"seen"), (0, b"wz"), (2, b"3")])
    post = _tool(tmp_path / "post", TOOL)
    mutant = _tool(tmp_path / "mutant", TOOL.replace("cat kept", "tr z y 2>/dev/null < kept"))
    found = replay(corpus, mutant, post)
    by = found["distinguished_by"]
    assert (found["tried"], by["input"], by["unit"]) == (4, "fuzz corpus entry 4", "in.txt")
    assert by["post_fix"][1] != by["mutant"][1]
    assert by["post_fix"][0] == by["mutant"][0] and by["post_fix"][2] == by["mutant"][2]


def test_the_survivors_of_a_step_share_one_post_fix_replay(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Issue 30: every survivor of a mutant-runs step replayed the corpus against the same
    post-fix build again. With the step's PostFix each entry's post-fix side runs once for all
    of them, in a work directory of its own, and every survivor's verdict is the one it gets
    alone: the same entries tried, the same first difference with the same behaviours (a tool
    that prints its work directory is no difference: the directory is a placeholder)."""
    from trace_sandbox.gates.corpus_replay import PostFix

    log = tmp_path / "runs.log"
    monkeypatch.setenv("REPLAY_LOG", str(log))
    body = TOOL.replace("*) echo", "cwd) pwd ;;\n  *) echo")
    corpus = _replay_plan(tmp_path, [(2, b"1"), (2, b"2"), (1, b"cwd"), (0, b"wz"), (2, b"3")])
    post = _tool(tmp_path / "post", body)
    survivors = [
        _tool(tmp_path / "same", body),
        _tool(tmp_path / "other", body),
        _tool(tmp_path / "mutant", body.replace("cat kept", "tr z y 2>/dev/null < kept")),
    ]

    def post_runs() -> int:  # the post-fix build's runs logged since the last call
        ran = log.read_text().splitlines() if log.exists() else []
        log.write_text("")
        return len([r for r in ran if r.startswith(f"{post}/")])

    first = replay(corpus, survivors[0], post)
    first_runs = post_runs()  # the post-fix side of one replay of every entry
    alone = [first] + [replay(corpus, m, post) for m in survivors[1:]]
    alone_runs = first_runs + post_runs()
    shared = PostFix(corpus, post)
    together = [replay(corpus, m, post, shared) for m in survivors]
    shared.close()
    for a, t in zip(alone, together, strict=True):
        assert (t["tried"], t["distinguished_by"]) == (a["tried"], a["distinguished_by"])
        assert t["invocations"]["post_fix"] == "shared"
    assert [a["tried"] for a in alone] == [5, 5, 4] and alone[2]["distinguished_by"]
    # the post-fix side ran once for the three survivors: as often as for the first alone
    assert post_runs() == first_runs < alone_runs
    assert not os.path.exists(shared.tmp or "")
    # another build or corpus than the shared side's is replayed beside the mutant, as alone
    other = replay(corpus, survivors[2], survivors[0], shared)
    assert "post_fix" not in other["invocations"]
