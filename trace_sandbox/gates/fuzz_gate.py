"""The fuzzing gate, sandbox side: explore the post-fix build, then judge what was found.

`write_plan` (derivation `fuzz-plan`) runs the PoC's own invocations (the first pre-fix run's
targets, arguments, stdin and data files, as the variants gate reads them) against the post-fix
package built with coverage (templates/gates/fuzz-cc), seeded with the PoC's units, the
variants' versions of them and the good inputs (variant-plan's), for `executions` executions
with `seed` ([gates.fuzz] of the signing policy; fuzz.py). Each distinct crash is minimised and
written as a variant in the variant plan's format (`v/<n>/repro.sh`, `data/`, `variant.json`,
`plan.json`, `poc.json`): ordinary reproducers that `fuzz-post` and `fuzz-pre` (variant-run
steps) run under the verify harness against the real post-fix and pre-fix builds, so each found
crash is a deterministic step of its own, run on both sides and bundled as a replayable
reproducer. The corpus it kept is written too (`corpus/corpus.json`, corpus_replay.py): the
mutation gate replays it against each surviving mutant.

`evaluate` (derivation `gate-fuzz`): a found input whose post-fix run crashes, with the kind
[expect] names or a crash the pre-fix build does not show, is `fuzz-found-crash` (not
waivable). Python targets are traced in one interpreter (fuzz_python.py). Nothing to fuzz (no
program invocation, an instrumented build that failed, no instrumented or traced code ran) is
not measurable: the record passes with
`measurable: false` and says why (`details.not_measurable`: fuzz-not-measurable); it never
denies, so "not measurable" never catches a wrong fix and never blocks a right one.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable

from .applied import applied_policy, bound
from .codes import gate_record
from .corpus_replay import write_corpus
from .fuzz import Crash, FuzzResult, fuzz, minimise
from .fuzz_python import (
    CRASH_PREFIX,
    PythonRunner,
    Ran,
    is_python_target,
    script_names,
    traceback_crash,
)
from .fuzz_runner import ProgramRunner
from .modules import load_json_object
from .oracle import mismatches, shows_the_bug
from .scratch import scratch_root
from .variant_gate import (
    _store_name,
    crashes,
    declared_oracles,
    poc_invocations,
    runs_by_index,
    same_bug,
    signature,
    write_taint,
)
from .variant_oracle import rejections
from .variants import Invocation, Unit, _variant, units_of

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

DEFAULT_EXECUTIONS = 500
DEFAULT_SEED = 0
MINIMISE_SHARE = 4  # minimisation may spend executions // MINIMISE_SHARE more
NOT_MEASURABLE = "fuzz-not-measurable"


def _variant_seeds(plan: str | None, units: list[Unit]) -> list[tuple[int, bytes]]:
    """The variants gate's variants (and good inputs' variants) of each file or stdin unit."""
    out: list[tuple[int, bytes]] = []
    root = os.path.join(plan or "", "v")
    if not plan or not os.path.isdir(root):
        return out
    names = {u.name: k for k, u in enumerate(units)}
    for n in sorted(os.listdir(root), key=lambda s: int(s) if s.isdigit() else 0):
        meta = load_json_object(os.path.join(root, n, "variant.json"))
        k = names.get(str(meta.get("unit")))
        if k is None or units[k].kind == "arg":
            continue
        u = units[k]
        name = u.name if u.kind == "file" else f"stdin-{u.name.split(':')[1]}.bin"
        path = os.path.join(root, n, "data", name)
        if os.path.isfile(path):
            with open(path, "rb") as fh:
                out.append((k, fh.read()))
    return out


def _read_data(paths: list[str]) -> tuple[dict[str, bytes], dict[str, str]]:
    files: dict[str, bytes] = {}
    trees: dict[str, str] = {}
    for path in paths:
        if os.path.isdir(path):
            trees[_store_name(path)] = path
        else:
            with open(path, "rb") as fh:
                files[_store_name(path)] = fh.read()
    return files, trees


def why_not_measurable(
    cfg: dict[str, Any], first: dict[str, Any], invs: list[Invocation]
) -> str | None:
    target = str(cfg.get("target") or "")
    if not first.get("target_ran") or not invs:
        return "no target invocation in the pre-fix run: no PoC to fuzz from"
    if not target or os.path.exists(os.path.join(target, ".trace-build-failed")):
        return "the post-fix build with coverage did not build"
    if not any(i.kind == "program" for i in invs) and not python_targets(target, invs):
        return "the PoC's targets are neither compiled programs nor Python: nothing to trace"
    return None


def python_targets(target: str, invs: list[Invocation]) -> bool:
    """The PoC's targets are Python (fuzz_python.py): each is a Python invocation or a Python
    script of the package, so the loop traces them in-process instead of reading an edge map."""
    return bool(invs) and all(is_python_target(i, target) for i in invs)


def write_plan(cfg: dict[str, Any], out: str) -> None:
    """cfg: target (the coverage build), pre_runs, data, seeds (variant-plan dir), policy,
    oracles (the candidate's {expect, accept}: a Python fix's declared rejection is no crash)."""
    policy = applied_policy(cfg)
    executions = bound(policy, "executions") or DEFAULT_EXECUTIONS
    seed = bound(policy, "seed")
    seed = DEFAULT_SEED if seed is None else seed
    runs = [load_json_object(os.path.join(d, "outcome.json")) for d in cfg["pre_runs"]]
    first = runs[0] if runs else {}
    invs = poc_invocations(first)
    files, trees = _read_data(list(cfg.get("data") or []))
    units = units_of(invs, files)
    if python_targets(str(cfg.get("target") or ""), invs):  # a script is code, not an input
        units = [u for u in units if u.kind != "file" or u.name not in script_names(invs)]
    stats: dict[str, Any] = {"executions": 0, "budget": executions, "seed": seed}
    why = why_not_measurable(cfg, first, invs) or (
        None if units else "the PoC has no input to vary"
    )
    result = FuzzResult()
    found: list[tuple[Crash, bytes, int]] = []
    if why is None:
        result, found, why, ways = _explore(cfg, invs, files, trees, units, executions, seed)
        stats.update(
            ways,
            executions=result.executions,
            corpus=len(result.corpus),
            edges=result.edges,
            hangs=result.hangs,
            minimise=sum(u for _, _, u in found),
        )
    os.makedirs(os.path.join(out, "v"))
    # kept for the mutation gate's survivors (corpus_replay.py, issue 26); not a Python target's:
    # that replay starts a python3 per call and per build (pager-relation-fix: ~35 calls per
    # input, 106 inputs, each survivor) where the loop ran them in one interpreter
    if result.corpus and not python_targets(str(cfg.get("target") or ""), invs):
        write_corpus(out, invs, files, trees, units, result.corpus)
    write_taint(out, invs, [p for p in cfg.get("data") or [] if not os.path.isdir(p)])
    stdin_ids = {i for i, inv in enumerate(invs) if inv.stdin}
    base = dict(files)
    for i in stdin_ids:
        base[f"stdin-{i}.bin"] = invs[i].stdin or b""
    variants = []
    for n, (crash, small, _) in enumerate(found, 1):
        variants.append(_write_variant(out, n, crash, small, invs, base, stdin_ids, units, trees))
    plan = {
        "budget": executions,
        "seed": seed,
        "fuzz": {**stats, "not_measurable": why},
        "poc": {
            "target_ran": bool(first.get("target_ran")),
            "pre_fix": signature(first),
            "files": sorted(files),
        },
        "dictionary": [],
        "variants": variants,
    }
    with open(os.path.join(out, "plan.json"), "w", encoding="utf-8") as fh:
        json.dump(plan, fh, indent=2, sort_keys=True)
        fh.write("\n")


def _tokens(cfg: dict[str, Any]) -> list[bytes]:
    plan = cfg.get("seeds")
    path = os.path.join(plan, "plan.json") if plan else ""
    if not path or not os.path.isfile(path):
        return []
    words = load_json_object(path).get("dictionary") or []
    return [w.encode("utf-8", "surrogateescape") for w in words if isinstance(w, str) and w]


def _explore(
    cfg: dict[str, Any],
    invs: list[Invocation],
    files: dict[str, bytes],
    trees: dict[str, str],
    units: list[Unit],
    executions: int,
    seed: int,
) -> tuple[FuzzResult, list[tuple[Crash, bytes, int]], str | None, dict[str, Any]]:
    seeds = [(k, u.data) for k, u in enumerate(units)] + _variant_seeds(cfg.get("seeds"), units)
    with tempfile.TemporaryDirectory(prefix="fuzz-", dir=scratch_root()) as tmp:
        work = os.path.join(tmp, "work")
        os.makedirs(work)
        for name, tree in trees.items():
            shutil.copytree(tree, os.path.join(work, name))
        target = str(cfg["target"])
        if python_targets(target, invs):
            from ..harness.targetview import python_paths

            refused = _refusal(cfg)
            py = PythonRunner(
                target, invs, files, units, work, python_paths(target), refused=refused
            )
            result, found = _loop(py, seeds, executions, seed, _tokens(cfg))
            runner: ProgramRunner | PythonRunner = py
        else:
            with ProgramRunner(target, invs, files, units, work) as runner:
                result, found = _loop(runner, seeds, executions, seed, _tokens(cfg))
    # how the executions ran: each target's fork server, or exec where it had none (why)
    ways = {
        "runner": runner.mode(),
        "fallback": dict(sorted(runner.fallback.items())),
        "poc_reused": runner.reused,  # inputs that were the PoC's own execution, run once
    }
    if result.edges == 0 and not result.crashes:
        why = "the instrumented build ran no instrumented code (no coverage map)"
        return result, [], why, ways
    return result, found, None, ways


def _refusal(cfg: dict[str, Any]) -> Callable[[Ran], bool]:
    """Whether a Python run that raised is the fix refusing its input as [accept] declares
    (variant_oracle.rejections: exit code and output), judged on what the run printed."""
    _, oracles = declared_oracles(cfg)
    rules = rejections(oracles.get("accept") or {})

    def refused(ran: Ran) -> bool:
        inv = {
            "exit_code": ran.exit_code,
            "signal": None,
            "sanitizer": None,
            "stdout": ran.stdout.decode("utf-8", "replace"),
            "stderr": ran.stderr.decode("utf-8", "replace"),
        }
        return any(not mismatches(inv, o) for o in rules)

    return refused


def _loop(
    runner: ProgramRunner | PythonRunner,
    seeds: list[tuple[int, bytes]],
    executions: int,
    seed: int,
    tokens: list[bytes],
) -> tuple[FuzzResult, list[tuple[Crash, bytes, int]]]:
    """Explore for `executions`, then minimise each crash found (a share of the budget more)."""
    result = fuzz(seeds, runner, executions=executions, seed=seed, tokens=tokens)
    found = []
    if result.edges or result.crashes:
        budget = executions // MINIMISE_SHARE
        found = [_minimise(runner, c, budget) for c in result.crashes]
    return result, found


def _minimise(
    runner: ProgramRunner | PythonRunner, crash: Crash, budget: int
) -> tuple[Crash, bytes, int]:
    def same(data: bytes) -> bool:
        return runner(crash.unit, data).crash == crash.signature

    small, used = minimise(crash.data, same, budget)
    return crash, small, used


def _write_variant(
    out: str,
    n: int,
    crash: Crash,
    data: bytes,
    invs: list[Invocation],
    base: dict[str, bytes],
    stdin_ids: set[int],
    units: list[Unit],
    trees: dict[str, str],
) -> dict[str, Any]:
    import hashlib

    unit = units[crash.unit]
    made = _variant(invs, base, stdin_ids, unit, data)
    files, script = made if made is not None else (base, "")
    d = os.path.join(out, "v", str(n))
    os.makedirs(os.path.join(d, "data"))
    script = script.replace("made by trace's variants gate", "found by trace's fuzzing gate")
    with open(os.path.join(d, "repro.sh"), "w", encoding="utf-8") as fh:
        fh.write(script)
    for name, content in files.items():
        with open(os.path.join(d, "data", name), "wb") as fh:
            fh.write(content)
    for name, tree in trees.items():
        shutil.copytree(tree, os.path.join(d, "data", name))
    meta = {
        "id": f"f{n:03d}-crash",
        "operator": "fuzz",
        "unit": unit.name,
        "description": f"{unit.name}: {len(data)} bytes found at execution {crash.found_at}, "
        f"minimised from {len(crash.data)} ({crash.signature})",
        "files": {k: hashlib.sha256(v).hexdigest() for k, v in sorted(files.items())},
        "index": n,
        "script": script,
        "input_hex": data.hex(),
    }
    with open(os.path.join(d, "variant.json"), "w", encoding="utf-8") as fh:
        json.dump(meta, fh, indent=2, sort_keys=True)
        fh.write("\n")
    return {k: meta[k] for k in ("id", "operator", "unit", "description", "files")}


# --- judging ---------------------------------------------------------------------------------


def python_crash(inv: dict[str, Any], accept: dict[str, Any]) -> str | None:
    """A Python target's crash in a run record: an exception escaped (its traceback ends the
    invocation's stderr, exit non-zero), unless the call meets a rejection [accept] declares
    (variant_oracle.rejections: `exit_code = 1` + `stderr = "ValueError: …"`, a fix refusing the
    input by raising). A clean exit, whatever its code, is never a crash."""
    if inv.get("sanitizer") or inv.get("signal") or inv.get("exit_code") in (0, None):
        return None
    crash = traceback_crash(str(inv.get("stderr") or ""))
    if crash is not None and any(not mismatches(inv, o) for o in rejections(accept)):
        return None
    return crash


def all_crashes(record: dict[str, Any], accept: dict[str, Any]) -> list[str]:
    """The C crashes (variant_gate.crashes) and the Python ones (`Python: <type>`)."""
    found = crashes(record)
    for inv in record.get("invocations") or []:
        c = python_crash(inv, accept)
        if c is not None:
            found.append(c)
    return found


def shows_python_bug(record: dict[str, Any], expect: dict[str, Any], accept: Any) -> bool:
    """A Python crash on a call that shows the bug as [expect] declares it (its exit code, its
    output naming the exception: oracle.shows_the_bug): the advisory's bug reached again. An
    [expect] that declares only relations says nothing of a crash: only a new one counts."""
    return any(
        python_crash(inv, accept) is not None and shows_the_bug(inv, expect)
        for inv in record.get("invocations") or []
    )


def evaluate(cfg: dict[str, Any]) -> dict[str, Any]:
    """cfg: plan (the fuzz-plan dir), post and pre (its variant-run dirs), expect, oracles
    (the candidate's {expect, accept}: a Python fix's declared rejection), policy."""
    policy = applied_policy(cfg)
    plan = load_json_object(os.path.join(cfg["plan"], "plan.json"))
    expect, oracles = declared_oracles(cfg)
    accept = oracles.get("accept") or {}
    declared = oracles.get("expect") or expect  # [expect] whole: its per-invocation oracles too
    stats = plan.get("fuzz") or {}
    post, pre = runs_by_index(cfg["post"]), runs_by_index(cfg["pre"])
    results = []
    for n in sorted(post):
        meta, post_rec = post[n]
        pre_crash = all_crashes(pre[n][1], accept) if n in pre else []
        post_crash = all_crashes(post_rec, accept)
        failing = bool(post_crash) and (
            any(same_bug(c, expect) for c in post_crash if not c.startswith(CRASH_PREFIX))
            or shows_python_bug(post_rec, declared, accept)
            or bool(set(post_crash) - set(pre_crash))
        )
        results.append(
            {
                "index": n,
                "id": meta["id"],
                "description": meta["description"],
                "files": meta["files"],
                "post_crash": post_crash,
                "pre_crash": pre_crash,
                "status": "found-crash"
                if failing
                else ("other-crash" if post_crash else "no-crash"),
            }
        )
    found = [r for r in results if r["status"] == "found-crash"]
    why = stats.get("not_measurable")
    rules = ["fuzz.found-crash"] if found else []
    summary = (
        f"fuzzing not measurable: {why}"
        if why
        else f"{stats.get('executions', 0)} executions (seed {plan.get('seed')}), "
        f"{stats.get('corpus', 0)} inputs in the corpus, {stats.get('edges', 0)} edge "
        f"classes; {len(results)} crash(es) found, {len(found)} still crash post-fix"
    )
    if found:
        summary += f" (replay: fuzz/{found[0]['id']}/, {found[0]['description']})"
    details: dict[str, Any] = {
        "summary": summary,
        "policy": policy,
        "fuzz": stats,
        "results": results,
        "still_failing": [
            {k: r[k] for k in ("index", "id", "description", "files", "post_crash")}
            | {"broken": []}
            for r in found
        ],
    }
    if why:
        details["not_measurable"] = {"code": NOT_MEASURABLE, "why": why}
    return gate_record("fuzz", rules, measurable=why is None, score=None, details=details)
