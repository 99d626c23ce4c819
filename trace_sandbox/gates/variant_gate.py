"""The variants gate ("PoC+"), sandbox side: write the variant plan, and judge the variant runs.

`write_plan` (derivation `variant-plan`) reads the PoC as the harness observed it (the first
pre-fix run's target invocations: target, arguments, stdin when recorded), the reproducer's
data files, the patches and the patched files of the package's source, and writes
`plan.json` plus one directory per variant (`v/<n>/repro.sh`, `v/<n>/data/*`,
`v/<n>/variant.json`): an ordinary reproducer. Each `variant-run` derivation runs variant n
under the verify harness against one side (same sanitizer, same isolation as the PoC).

`evaluate` (derivation `gate-variants`): a variant *still fails* when a target invocation of
its post-fix run crashed (a sanitizer report on its own stderr, or a fatal signal the harness
did not cause) and either the crash is of the kind `[expect]` names (the advisory's bug, reached
another way) or the pre-fix build did not crash on the same variant (the fix brought it).
A clean rejection (a non-zero exit) is never a crash. A post-fix crash of another kind that the
pre-fix build shows too is a bug the fix does not claim to fix: listed, not failing.

Without a crash, each call of the variant is judged by what the pre-fix side did with it
(variant_oracle.py `variant_judgement`, input-independent [accept] fields only: exit-code sets,
signal, sanitizer, stderr; a golden or stdout oracle was declared for the PoC's exact input). A BAD
input (the pre-fix side shows [expect]'s bug on it) must be handled as the PoC's declared
rejection (`mishandled`: variant-mishandled). A GOOD input (the pre-fix side handled it well)
must still meet a declared oracle it met pre-fix (`breaks-oracle`: variant-breaks-oracle, a fix
that refuses everything) and must not newly fail (`regressed`: variant-regressed); the PoC's
rejection never judges it (a variant of Jinja2's PoC whose key lost its space is rightly
accepted by the fix). The number of variants that crash the pre-fix build, and of bad inputs,
is context for reviewers (docs/oracles.md).
"""

from __future__ import annotations

import base64
import json
import os
import shutil

from .applied import applied_policy, bound
from .codes import gate_record
from .modules import load_json_object
from .oracle import declared_sanitizer, shows_the_bug
from .variant_oracle import variant_judgement
from .variant_patch import patch_chars, patch_constants, patched_sources
from .variant_runs import run_dirs
from .variants import Invocation, generate

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

FATAL = ("SIGSEGV", "SIGABRT", "SIGBUS", "SIGILL", "SIGFPE", "SIGTRAP", "SIGSYS")
NOT_CRASHES = ("killed-by-harness", "timed-out", "broken-pipe")
FAILING = ("still-fails", "breaks-oracle", "mishandled", "regressed")  # a failing variant
NEIGHBOURS = ("+1", "-1")  # a compared value's neighbours: both must undo the fix
BUNDLED = (*FAILING, "special-cased")  # a variant the bundle carries as evidence
MEASURED = (
    "variants.still-fails",
    "variants.breaks-oracle",
    "variants.mishandled",
    "variants.regressed",
    "variants.special-cased",
)
DEFAULT_BUDGET = 24
DEFAULT_SEED = 0


def _store_name(path: str) -> str:
    base = os.path.basename(path.rstrip("/"))
    head, sep, rest = base.partition("-")
    return rest if sep and len(head) == 32 and head.isalnum() else base


def budget_and_seed(policy: dict[str, Any]) -> tuple[int, int]:
    budget = bound(policy, "budget")
    seed = bound(policy, "seed")
    return (DEFAULT_BUDGET if budget is None else budget, DEFAULT_SEED if seed is None else seed)


def poc_invocations(record: dict[str, Any]) -> list[Invocation]:
    """The PoC's target invocations as the harness recorded them: target, arguments, and
    stdin when the harness recorded it whole (a file or a pipe up to 64 KiB)."""
    out = []
    for inv in record.get("invocations") or []:
        rec = inv.get("stdin") if isinstance(inv.get("stdin"), dict) else {}
        raw = rec.get("b64") if rec.get("complete") else None
        stdin = base64.b64decode(raw) if isinstance(raw, str) and raw else None
        out.append(
            Invocation(
                target=str(inv.get("target")),
                kind=str(inv.get("kind") or "program"),
                args=tuple(str(a) for a in inv.get("args") or ()),
                stdin=stdin,
            )
        )
    return out


def write_taint(out: str, invocations: list[Invocation], files: list[str]) -> None:
    """`poc.json`: the inputs every variant is derived from (the data files' store paths, the
    recorded stdin, the arguments). A variant run's harness redacts, in what it keeps of the
    variant's output, every piece of a secret found in them (a variant mutates secrets too: a
    PEM line with one byte changed no longer has a shape any redaction rule knows)."""
    doc = {
        "files": sorted(files),
        "stdin_b64": [base64.b64encode(i.stdin).decode() for i in invocations if i.stdin],
        "args": [a for i in invocations for a in i.args],
    }
    with open(os.path.join(out, "poc.json"), "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=2, sort_keys=True)
        fh.write("\n")


def _clean(inv: dict[str, Any]) -> bool:
    return inv.get("exit_code") == 0 and not inv.get("signal") and not inv.get("sanitizer")


def good_units(record: dict[str, Any]) -> frozenset[str]:
    """The data files only invocations that ran cleanly pre-fix name (exit 0, no signal, no
    sanitizer report) while another invocation did not: a good input beside the PoC, varied
    on a budget of its own. When every invocation ran cleanly (a wrong output, exit 0), none
    is set apart: the PoC's input is among them."""
    clean: dict[str, bool] = {}
    invocations = record.get("invocations") or []
    if all(_clean(inv) for inv in invocations):
        return frozenset()
    for inv in invocations:
        ok = _clean(inv)
        for a in inv.get("args") or ():
            name = str(a).removeprefix("./").removeprefix("<work>/")
            clean[name] = clean.get(name, True) and ok
    return frozenset(n for n, ok in clean.items() if ok)


def signature(record: dict[str, Any]) -> list[list[Any]]:
    """How a run's target invocations ended and what they printed: exit code, signal,
    sanitizer kind, stdout digest (the PoC's pre-fix run, a variant's runs)."""
    from .oracle import stdout_digest

    out = []
    for inv in record.get("invocations") or []:
        san = inv.get("sanitizer")
        kind = f"{san.get('tool')}: {san.get('kind')}" if isinstance(san, dict) else None
        out.append([inv.get("exit_code"), inv.get("signal"), kind, stdout_digest(inv)])
    return out


def write_plan(cfg: dict[str, Any], out: str) -> None:
    policy = applied_policy(cfg)
    budget, seed = budget_and_seed(policy)
    runs = [load_json_object(os.path.join(d, "outcome.json")) for d in cfg["pre_runs"]]
    first = runs[0] if runs else {}
    invocations = poc_invocations(first)
    files: dict[str, bytes] = {}
    trees: dict[str, str] = {}
    for path in cfg.get("data") or []:
        if os.path.isdir(path):
            trees[_store_name(path)] = path
        else:
            with open(path, "rb") as fh:
                files[_store_name(path)] = fh.read()
    sources = patched_sources(list(cfg["patches"]), cfg.get("src"))
    variants, tokens = generate(
        invocations,
        files,
        sources,
        seed=seed,
        budget=budget,
        constants=patch_constants(list(cfg["patches"])),
        chars=patch_chars(list(cfg["patches"])),
        good=good_units(first),
    )
    os.makedirs(os.path.join(out, "v"))
    write_taint(out, invocations, [p for p in cfg.get("data") or [] if not os.path.isdir(p)])
    for n, v in enumerate(variants, 1):
        d = os.path.join(out, "v", str(n))
        os.makedirs(os.path.join(d, "data"))
        with open(os.path.join(d, "repro.sh"), "w", encoding="utf-8") as fh:
            fh.write(v.script)
        for name, data in v.files.items():
            with open(os.path.join(d, "data", name), "wb") as fh:
                fh.write(data)
        for name, tree in trees.items():
            shutil.copytree(tree, os.path.join(d, "data", name))
        meta = {**v.summary(), "index": n, "script": v.script}
        with open(os.path.join(d, "variant.json"), "w", encoding="utf-8") as fh:
            json.dump(meta, fh, indent=2, sort_keys=True)
            fh.write("\n")
    plan = {
        "budget": budget,
        "seed": seed,
        "poc": {
            "target_ran": bool(first.get("target_ran")),
            "invocations": [
                {
                    "target": i.target,
                    "kind": i.kind,
                    "args": list(i.args),
                    "stdin": i.stdin is not None,
                }
                for i in invocations
            ],
            "files": sorted(files),
            "pre_fix": signature(first),
        },
        "dictionary": [t.decode("utf-8", "backslashreplace") for t in tokens],
        "variants": [v.summary() for v in variants],
    }
    with open(os.path.join(out, "plan.json"), "w", encoding="utf-8") as fh:
        json.dump(plan, fh, indent=2, sort_keys=True)
        fh.write("\n")


# --- judging ---------------------------------------------------------------------------------


def crashes(record: dict[str, Any]) -> list[str]:
    """How the record's target invocations crashed: `Tool: kind` or a fatal signal name."""
    found = []
    for inv in record.get("invocations") or []:
        s = inv.get("sanitizer")
        if s:
            found.append(f"{s['tool']}: {s['kind']}")
        elif inv.get("signal") in FATAL and inv.get("ended") not in NOT_CRASHES:
            found.append(str(inv["signal"]))
    return found


def same_bug(crash: str, expect: dict[str, Any]) -> bool:
    """The crash is of the kind [expect] names (any crash, when it names neither)."""
    want_san = expect.get("sanitizer")
    want_sig = expect.get("signal")
    if want_san is None and want_sig is None:
        return True
    return (want_san is not None and declared_sanitizer(str(want_san)) in crash) or (
        want_sig is not None and crash == str(want_sig)
    )


def _is_the_bug(post_crash: list[str], pre_rec: dict[str, Any], expect: dict[str, Any]) -> bool:
    """A post-fix crash is the declared bug: of the kind [expect] names. When it names no kind
    (a wrong-output bug), any crash is taken for the bug, except on an input the unpatched build
    did not show the bug on: there a crash both builds have (a leak on an error path of the
    program, on a truncated document) is a failure the bug is not, and the fix did not bring."""
    if expect.get("sanitizer") is None and expect.get("signal") is None:
        return _bad_input(pre_rec, expect)
    return any(same_bug(c, expect) for c in post_crash)


def _bad_input(pre: dict[str, Any], expect: dict[str, Any]) -> bool:
    """The variant is a bad input: the pre-fix side shows the declared bug on some call."""
    return any(shows_the_bug(i, expect) for i in pre.get("invocations") or [])


def runs_by_index(dirs: list[str]) -> dict[int, tuple[dict[str, Any], dict[str, Any]]]:
    """Each variant's (variant.json, run record) by index, from variant-run step outputs."""
    out = {}
    for d in run_dirs(dirs):
        meta = load_json_object(os.path.join(d, "variant.json"))
        if meta.get("id") is None:
            continue  # a placeholder step: the plan made fewer variants than the budget
        out[int(meta["index"])] = (meta, load_json_object(os.path.join(d, "outcome.json")))
    return out


def special_cased(
    results: list[dict[str, Any]],
    plan: dict[str, Any],
    poc_post: list[dict[str, Any]],
    post: dict[int, tuple[dict[str, Any], dict[str, Any]]],
    pre: dict[int, tuple[dict[str, Any], dict[str, Any]]],
) -> list[int]:
    """The PoC values the fix special-cases: the patch compares with the value, the fix
    changed how the PoC's own run ends or what it prints, and with the value moved by one
    (both neighbours) the post-fix build behaves exactly as the unpatched one."""
    before = plan["poc"].get("pre_fix")
    if before is None or not poc_post or signature(poc_post[0]) == before:
        return []
    undone: dict[int, set[str]] = {}
    for r in results:
        facts = post[r["index"]][0].get("field") or {}
        if not facts.get("compared") or facts.get("neighbour") not in NEIGHBOURS:
            continue
        if r["status"] == "not-run":
            continue
        same = signature(post[r["index"]][1]) == signature(pre[r["index"]][1])
        if same:
            undone.setdefault(int(facts["value"]), set()).add(str(facts["neighbour"]))
    return sorted(v for v, sides in undone.items() if set(NEIGHBOURS) <= sides)


Record = dict[str, "Any"]  # a string: no `typing` at run time
REASONED = ("still-fails", "breaks-oracle", "regressed", "mishandled")


def _status(post_rec: Record, pre_rec: Record, expect: Record, seen: Any) -> str:
    """How one variant ended against the post-fix build (first match wins)."""
    post_crash, pre_crash = crashes(post_rec), crashes(pre_rec)
    if post_rec.get("build") == "failed" or not post_rec.get("target_ran"):
        return "not-run"
    if post_crash and (
        _is_the_bug(post_crash, pre_rec, expect) or set(post_crash) - set(pre_crash)
    ):
        return "still-fails"
    if post_crash:
        return "other-crash"
    if seen.still_shown:
        return "still-fails"  # no signal, no sanitizer: the declared failure (an exception)
    if seen.broken:
        return "breaks-oracle"
    if seen.mishandled:
        return "mishandled"
    return "regressed" if seen.regressed else "survives"


def _result(n: int, meta: Record, post_rec: Record, pre_rec: Record, declared: Record) -> Record:
    """Variant n's entry in the record: what it is, its status and what it broke."""
    seen = variant_judgement(post_rec, pre_rec, declared)
    status = _status(post_rec, pre_rec, declared["expect"], seen)
    broken = {"breaks-oracle": seen.broken, "mishandled": seen.mishandled}
    broken["still-fails"] = seen.still_shown
    return (
        {"index": n}
        | {k: meta[k] for k in ("id", "operator", "unit", "description", "files")}
        | {
            "status": status,
            "post_crash": crashes(post_rec),
            "pre_crash": crashes(pre_rec),
            "broken": (broken | {"regressed": seen.regressed}).get(status, []),
            "bad_input": _bad_input(pre_rec, declared["expect"]),
        }
    )


def _blocking(plan: Record, results: list[Record], poc_post: list[Record]) -> list[str]:
    """The reason the gate measured nothing (at most one)."""
    if not plan["poc"]["target_ran"]:
        return ["variants.no-poc"]
    if not results:
        return ["variants.none-generated"]
    if any(r.get("build") == "failed" or crashes(r) for r in poc_post) or not poc_post:
        return ["variants.post-fix-fails"]
    if all(r["status"] == "not-run" for r in results):
        return ["variants.none-run"]
    return []


def _summary(results: list[Record], by: dict[str, list[Record]], special: list[int]) -> str:
    still = by["bundled"]
    summary = f"{len(results)} variants of the PoC; {len(by['still-fails'])} still crash post-fix"
    if by["breaks-oracle"]:
        summary += f", {len(by['breaks-oracle'])} break a declared post-fix oracle"
    if by["mishandled"]:
        summary += f", {len(by['mishandled'])} bad input(s) not handled as the PoC"
    if by["regressed"]:
        summary += f", {len(by['regressed'])} good input(s) the fix made fail"
    if still:
        summary += f" (replay: variants/{still[0]['id']}/, {still[0]['description']}"
        summary += f": {still[0]['broken'][0]})" if still[0]["broken"] else ")"
    summary += f"; {sum(bool(r['pre_crash']) for r in results)} crash pre-fix"
    if special:
        summary += f"; the fix's effect vanishes when the PoC's value {special[0]} moves by one"
    return summary


def declared_oracles(cfg: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A gate cfg's `expect` (the candidate's [expect]) and `oracles` ({expect, accept}), each
    given as an object or as JSON text."""
    expect = cfg.get("expect") or {}
    if isinstance(expect, str):
        expect = json.loads(expect)
    oracles = cfg.get("oracles") or {}
    if isinstance(oracles, str):
        oracles = json.loads(oracles)
    return expect, oracles


def evaluate(cfg: dict[str, Any]) -> dict[str, Any]:
    """cfg: plan (dir), post and pre (variant run dirs), post_runs (the PoC's post-fix run
    dirs), expect (the candidate's [expect]), oracles (its {expect, accept}), policy."""
    policy = applied_policy(cfg)
    plan = load_json_object(os.path.join(cfg["plan"], "plan.json"))
    expect, oracles = declared_oracles(cfg)
    # which variant is a bad input: [expect] whole (its per-invocation oracles too)
    declared = {"expect": oracles.get("expect") or expect, "accept": oracles.get("accept") or {}}
    post = runs_by_index(cfg["post"])
    pre = runs_by_index(cfg["pre"])
    want = list(range(1, len(plan["variants"]) + 1))
    if sorted(post) != want or sorted(pre) != want:
        raise ValueError(f"variant runs {sorted(post)}/{sorted(pre)} do not match the plan {want}")
    poc_post = [load_json_object(os.path.join(d, "outcome.json")) for d in cfg["post_runs"]]
    results = [_result(n, post[n][0], post[n][1], pre[n][1], declared) for n in want]
    rules = _blocking(plan, results, poc_post)
    special = special_cased(results, plan, poc_post, post, pre) if not rules else []
    for r in results:
        facts = post[r["index"]][0].get("field") or {}
        neighbour = facts.get("value") in special and facts.get("neighbour") in NEIGHBOURS
        if r["status"] == "survives" and neighbour:
            r["status"] = "special-cased"
    by = {s: [r for r in results if r["status"] == s] for s in REASONED}
    by["bundled"] = still = [r for r in results if r["status"] in BUNDLED]
    crashing, breaking = by["still-fails"], by["breaks-oracle"]
    regressing, mishandling = by["regressed"], by["mishandled"]
    if not rules and crashing:
        rules.append("variants.still-fails")
    if not rules or set(rules) <= {"variants.still-fails"}:
        rules += ["variants.breaks-oracle"] if breaking else []
        rules += ["variants.mishandled"] if mishandling else []
        rules += ["variants.regressed"] if regressing else []
    rules += ["variants.special-cased"] if special else []
    measurable = all(r in MEASURED for r in rules)
    judged = [r for r in results if r["status"] != "not-run"]
    score = (
        round(sum(r["status"] not in BUNDLED for r in judged) / len(judged), 6)
        if judged and measurable
        else None
    )
    summary = _summary(results, by, special)
    return gate_record(
        "variants",
        rules,
        measurable=measurable,
        score=score,
        details={
            "summary": summary,
            "policy": policy,
            "budget": plan["budget"],
            "seed": plan["seed"],
            "variants": len(results),
            "still_fails": len(still),
            "post_fix_crashes": sum(bool(r["post_crash"]) for r in results),
            "pre_fix_crashes": sum(bool(r["pre_crash"]) for r in results),
            "poc": plan["poc"],
            "dictionary": plan["dictionary"],
            "results": results,
            "oracle_breaks": len(breaking),
            "special_cased": special,
            "regressions": len(regressing),
            "mishandled": len(mishandling),
            "bad_inputs": sum(bool(r["bad_input"]) for r in results),
            "still_failing": [
                {k: r[k] for k in ("index", "id", "description", "files", "post_crash", "broken")}
                for r in still
            ],
        },
    )
