"""Signing decisions for a table of evidence cases, thresholds from the file, effective_on,
bad signing policies and catalogues, and consistency of the one reason catalogue.

The evidence here is explicit fakes of the records `trace verify` and the gates write (built as
JSON documents and validated by the real models); test_policy_decide.py runs the real pipeline.
"""

from __future__ import annotations

import copy
import datetime as dt
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine.build_records import GateRecord
from engine.errors import PolicyError
from engine.policy.evidence_view import Evidence
from engine.policy.reasons import Catalogue, load_catalogue
from engine.policy.routing import RouteDecision, RouteFacts, load_routing, route
from engine.policy.signing_decision import (
    Decision,
    SigningPolicy,
    decide,
    load_signing,
    load_signing_rules,
)
from engine.policy.waivers import NO_WAIVERS, WaiverSet
from engine.verify_result import VerifyResult

REPO = Path(__file__).resolve().parent.parent
POLICY = REPO / "policy"
TODAY = dt.date(2026, 11, 29)
CID = "c1"


# ---- fakes of the records verify and the gates write ---------------------------------------


def run(side: str, i: int, *, exit_code: int = 0, **kw: Any) -> dict[str, Any]:
    return {"side": side, "run": i, "build": "ok", "target_ran": True, "exit_code": exit_code, **kw}


def side(name: str, runs: list[dict[str, Any]], build_ok: bool = True) -> dict[str, Any]:
    return {
        "side": name,
        "build": {"id": f"{name}-fix", "status": "built" if build_ok else "failed"},
        "build_ok": build_ok,
        "runs": runs,
        "run_steps": [{"id": f"{name}-fix-run@{r['run']}", "status": "built"} for r in runs],
        "target_ran": all(r["target_ran"] for r in runs),
        "flaky": False,
    }


def claim(name: str, holds: bool = True, reason: str = "ok") -> dict[str, Any]:
    return {"claim": name, "evidence": "fake", "holds": holds, "reason": reason}


def verify_doc() -> dict[str, Any]:
    """A verify result in which every claim holds: pre fails (exit 1) 3x, post survives 3x."""
    return _as_target_runs(_verify_fields())


def _verify_fields() -> dict[str, Any]:
    return {
        "schema": "trace.verify/v1",
        "candidate": CID,
        "candidate_file": "/x/candidate.toml",
        "package": "cparse",
        "passed": True,
        "reasons": [],
        "claims": [
            claim("pre-fix-fails-as-expected"),
            claim("post-fix-survives"),
            claim("runs-agree"),
            claim("deterministic"),
        ],
        "pre": side("pre", [run("pre", i, exit_code=1) for i in (1, 2, 3)]),
        "post": side("post", [run("post", i) for i in (1, 2, 3)]),
        "expectation": gate("expectation"),
        "deterministic": True,
        "flaky": False,
        "steps": {},
        "graph": "/x/trace.toml",
        "engine_version": "0.1.0",
    }


def gate(name: str, **kw: Any) -> dict[str, Any]:
    return {"schema": "trace.gate/v1", "gate": name, "passed": True, **kw}


def applied(name: str) -> dict[str, Any]:
    """What a gate run under the shipped signing policy states in details.policy."""
    policy, _, _ = load_signing_rules(POLICY / "signing.toml")
    return policy.applied(name)


GATE_SCORES = (
    ("scope", 1.0),
    ("mutation", 0.9),
    ("coverage", 1.0),
    ("variants", 1.0),
    ("regression", 1.0),
)


def gates_doc() -> dict[str, dict[str, Any]]:
    """A passing record of every gate the shipped policy requires (a gate added to the policy
    is included without editing this list; one without a threshold has no score)."""
    policy, _, _ = load_signing_rules(POLICY / "signing.toml")
    scores = dict(GATE_SCORES)
    return {
        name: gate(name, score=scores.get(name), details={"policy": applied(name)})
        for name in policy.gates
        if name != "expectation"
    }


Doc = dict[str, Any]


def _as_target_runs(v: Doc) -> Doc:
    """Each fake run invoked the target once, which ended as the run's exit_code/signal/sanitizer
    say (a verdict rests on the target's invocations, engine/build_records.py); the script exited
    alike."""
    v = copy.deepcopy(v)
    for name in ("pre", "post"):
        for r in v[name]["runs"]:
            if not r["target_ran"] or r["build"] != "ok":
                r["invocations"], r["target_failed"] = [], False
                continue
            inv = {"target": "bin/cparse", "exit_code": r["exit_code"], "signal": r.get("signal")}
            inv["sanitizer"] = r.get("sanitizer")
            r["invocations"] = [inv]
            failed = inv["exit_code"] not in (0, None) or inv["signal"] or inv["sanitizer"]
            r["target_failed"] = bool(failed)
    return v


def evidence(v: Doc | None, gates: dict[str, Doc]) -> Evidence:
    verify = VerifyResult.model_validate(_as_target_runs(v)) if v is not None else None
    records = {n: GateRecord.model_validate(g) for n, g in gates.items()}
    if verify is not None and verify.expectation is not None:
        records["expectation"] = verify.expectation
    return Evidence(candidate=CID, verify=verify, gates=records)


@pytest.fixture(scope="module")
def signing() -> tuple[SigningPolicy, Catalogue]:
    return load_signing(POLICY / "signing.toml")


@pytest.fixture(scope="module")
def routed() -> RouteDecision:
    return shipped_route()


def shipped_route() -> RouteDecision:
    """The shipped routing policy's decision for an upstream backport of a high bug."""
    facts = RouteFacts(
        candidate=CID,
        package="cparse",
        advisory="OSV-1",
        severity="high",
        score=7.8,
        upstream_fix=True,
        critical=False,
        origin="upstream",
    )
    return route(facts, load_routing(POLICY / "routing.toml"))


def run_case(
    signing: tuple[SigningPolicy, Catalogue],
    routed: RouteDecision,
    mutate: Callable[[Doc, dict[str, Doc]], Doc | None],
    waivers: WaiverSet = NO_WAIVERS,
    today: dt.date = TODAY,
) -> Decision:
    v, g = verify_doc(), gates_doc()
    v2 = mutate(v, g)
    policy, catalogue = signing
    return decide(evidence(v2, g), routed, policy, catalogue, waivers, today)


def _set(path: str, value: Any) -> Callable[[Doc, dict[str, Doc]], Doc]:
    """A mutation of the verify document: 'post.runs.1.exit_code' = value."""

    def mutate(v: Doc, g: dict[str, Doc]) -> Doc:
        cur: Any = v
        *head, last = path.split(".")
        for part in head:
            cur = cur[int(part)] if isinstance(cur, list) else cur[part]
        if isinstance(cur, list):
            cur[int(last)] = value
        else:
            cur[last] = value
        return v

    return mutate


def _gate(name: str, **kw: Any) -> Callable[[Doc, dict[str, Doc]], Doc]:
    def mutate(v: Doc, g: dict[str, Doc]) -> Doc:
        g[name] = {**g[name], **kw}
        return v

    return mutate


def _add_gate(name: str) -> Callable[[Doc, dict[str, Doc]], Doc]:
    def mutate(v: Doc, g: dict[str, Doc]) -> Doc:
        g[name] = gate(name)
        return v

    return mutate


def _drop_gate(name: str) -> Callable[[Doc, dict[str, Doc]], Doc]:
    def mutate(v: Doc, g: dict[str, Doc]) -> Doc:
        del g[name]
        return v

    return mutate


def _pre_all(**kw: Any) -> Callable[[Doc, dict[str, Doc]], Doc]:
    def mutate(v: Doc, g: dict[str, Doc]) -> Doc:
        v["pre"]["runs"] = [{**r, **kw} for r in v["pre"]["runs"]]
        return v

    return mutate


def _post_broken(v: Doc, g: dict[str, Doc]) -> Doc:
    v["post"] = side("post", [run("post", i, build="failed", exit_code=None) for i in (1, 2, 3)])
    v["post"]["build_ok"] = False
    return v


def _wrong_failure(v: Doc, g: dict[str, Doc]) -> Doc:
    v["claims"][0] = claim("pre-fix-fails-as-expected", False, "pre-fix-wrong-failure")
    v["reasons"] = ["pre-fix-wrong-failure"]
    v["expectation"] = gate("expectation", passed=False, reasons=["pre-fix-wrong-failure"])
    return v


def _two_runs(v: Doc, g: dict[str, Doc]) -> Doc:
    for s in ("pre", "post"):
        v[s]["runs"] = v[s]["runs"][:2]
    return v


def _asan_pre(v: Doc, g: dict[str, Doc]) -> Doc:
    asan = {"tool": "AddressSanitizer", "kind": "heap-buffer-overflow"}
    v["pre"]["runs"] = [run("pre", i, exit_code=1, sanitizer=asan) for i in (1, 2, 3)]
    v["pre"]["runs"][2]["sanitizer"] = {**asan, "kind": "stack-buffer-overflow"}
    return v


CASES: list[tuple[str, Callable[[Doc, dict[str, Doc]], Doc | None], set[str]]] = [
    ("everything holds", lambda v, g: v, set()),
    # the raw run records are read, even when verify's own claims say "ok"
    ("pre-fix runs all survive", _pre_all(exit_code=0), {"pre-fix-did-not-fail"}),
    ("one post-fix run fails", _set("post.runs.1.exit_code", 1), {"post-fix-still-fails", "flaky"}),
    ("post-fix run crashes", _set("post.runs.0.signal", "SIGSEGV"),
     {"post-fix-still-fails", "flaky"}),
    ("pre-fix runs disagree", _set("pre.runs.2.exit_code", 0), {"flaky"}),
    ("pre-fix sanitizer kinds disagree", _asan_pre, {"flaky"}),
    # the run that never reached the target also disagrees with the two that did
    ("target never ran", _set("pre.runs.0.target_ran", False), {"target-never-ran", "flaky"}),
    ("too few runs", _two_runs, {"too-few-runs"}),
    ("post-fix build broken", _post_broken, {"post-fix-build-broken"}),
    ("pre-fix build broken", _set("pre.build_ok", False), {"pre-fix-build-broken"}),
    ("nondeterministic", _set("deterministic", False), {"nondeterministic"}),
    ("determinism unchecked", _set("deterministic", None), {"determinism-unchecked"}),
    ("wrong failure (claims)", _wrong_failure, {"pre-fix-wrong-failure"}),
    ("no verify result", lambda v, g: None, {"evidence-missing"}),
    ("other candidate's result", _set("candidate", "c2"), {"evidence-candidate-mismatch"}),
    ("coverage gate absent", _drop_gate("coverage"), {"evidence-missing"}),
    ("expectation gate absent", _set("expectation", None), {"evidence-missing"}),
    ("mutation below threshold", _gate("mutation", passed=False, score=0.5,
     reasons=["mutation-score-below-threshold"]), {"mutation-score-below-threshold"}),
    # the policy's threshold applies even when the gate's own copy said pass
    ("mutation gate lenient", _gate("mutation", score=0.79), {"mutation-score-below-threshold"}),
    ("mutation score absent", _gate("mutation", score=None), {"evidence-missing"}),
    ("coverage not measurable", _gate("coverage", measurable=False, score=None,
     reasons=["coverage-not-measurable"]), {"coverage-not-measurable"}),
    ("coverage below threshold", _gate("coverage", score=0.5), {"coverage-below-threshold"}),
    ("scope: weakened checks", _gate("scope", passed=False, reasons=["scope-weakened-checks",
     "scope-too-large"]), {"scope-weakened-checks", "scope-too-large"}),
    ("gate names an uncatalogued code", _gate("scope", passed=False, reasons=["scope.nope"]),
     {"evidence-unknown-reason"}),
    ("gate fails without a reason", _gate("scope", passed=False), {"evidence-unexplained-failure"}),
    ("gate under an old policy version", _gate("mutation", details={"policy": {
     **applied("mutation"), "version": "0.9"}}), {"policy-unknown-version"}),
    ("gate under another policy", _gate("mutation", details={"policy": {
     **applied("mutation"), "name": "other"}}), {"policy-unknown-version"}),
    ("gate applied other thresholds", _gate("scope", details={"policy": {
     **applied("scope"), "thresholds": {"max_files": 50}}}), {"policy-unknown-version"}),
    ("thresholded gate names no policy", _gate("coverage", details={}),
     {"policy-unknown-version"}),
    # a gate the policy sets no thresholds for need not name one (a fork's own gates)
    ("extra gate without thresholds", _add_gate("same-files"), set()),
]  # fmt: skip


@pytest.mark.parametrize(("name", "mutate", "codes"), CASES, ids=[c[0] for c in CASES])
def test_signing_table(
    signing: tuple[SigningPolicy, Catalogue],
    routed: RouteDecision,
    name: str,
    mutate: Callable[[Doc, dict[str, Doc]], Doc | None],
    codes: set[str],
) -> None:
    d = run_case(signing, routed, mutate)
    assert {r.code for r in d.reasons} == codes
    assert d.decision == ("deny" if codes else "allow")
    assert d.warnings == [] and d.waived == []
    for r in d.reasons:  # every deny carries the catalogue's text
        spec = signing[1].reasons[r.code]
        assert (r.message, r.solution) == (spec.message, spec.solution)
        assert r.sources


def test_missing_evidence_names_each_absent_record(
    signing: tuple[SigningPolicy, Catalogue], routed: RouteDecision
) -> None:
    d = run_case(signing, routed, lambda v, g: (g.clear(), None)[1])
    (reason,) = d.reasons
    assert reason.code == "evidence-missing"
    expected = ["verify", *(f"gate:{name}" for name in sorted(signing[0].gates))]
    assert {"gate:expectation", "gate:scope", "gate:variants"} <= set(expected)
    assert reason.sources == expected


def test_unknown_reason_detail_names_the_code(
    signing: tuple[SigningPolicy, Catalogue], routed: RouteDecision
) -> None:
    d = run_case(signing, routed, _gate("scope", passed=False, reasons=["scope.nope"]))
    assert d.reasons[0].details == ["scope.nope"] and d.reasons[0].sources == ["gate:scope"]


@pytest.mark.parametrize("state", ["reject", "advisory-only"])
def test_unsignable_routes_deny(
    signing: tuple[SigningPolicy, Catalogue], routed: RouteDecision, state: str
) -> None:
    policy, catalogue = signing
    d = decide(
        evidence(verify_doc(), gates_doc()),
        routed.model_copy(update={"state": state}),
        policy,
        catalogue,
        NO_WAIVERS,
        TODAY,
    )
    assert [r.code for r in d.reasons] == ["routing-not-signable"]
    assert d.reasons[0].details == [state]


def test_decision_record_names_policies_and_is_pure(
    signing: tuple[SigningPolicy, Catalogue], routed: RouteDecision
) -> None:
    first = run_case(signing, routed, lambda v, g: v)
    again = run_case(signing, routed, lambda v, g: v)
    assert first == again
    doc = first.model_dump(mode="json", by_alias=True)
    assert doc["schema"] == "trace.decision/v1"
    assert doc["policy"]["name"] == "trace-signing" and len(doc["policy"]["digest"]) == 64
    assert doc["catalogue"]["name"] == "trace-reasons"
    assert doc["routing"]["state"] == "auto-merge-eligible"
    assert doc["date"] == "2026-11-29" and doc["waivers_file"] is None


# ---- policy files edited in a temporary copy -----------------------------------------------


@pytest.fixture
def policy_copy(tmp_path: Path) -> Path:
    for name in ("signing.toml", "reasons.toml"):
        shutil.copy(POLICY / name, tmp_path / name)
    return tmp_path


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


def _real_mutation_record(tmp: Path, signing_file: Path) -> dict[str, Any]:
    """The mutation gate's own record (trace_sandbox/gates, as the sandbox runs it) for six
    mutants of which two are killed and two are stillborn (score 0.5), given the `policy`
    parameter that engine.gates.context makes from `signing_file`."""
    from engine.gates.context import gate_policies
    from tests.test_gates_records import JUDGE, PTR, mutant_dirs, post_dir, run_record
    from trace_sandbox.gates.mutation import evaluate

    tmp.mkdir()
    runs = [run_record(0)] * 2 + [run_record(1)] * 4
    return evaluate(
        {
            "patches": [str(PTR)],
            "policy": gate_policies(signing_file)["mutation"],
            "mutant_runs": mutant_dirs(tmp, PTR, runs, ["run"] * 4 + ["stillborn"] * 2),
            "post_runs": [post_dir(tmp, run_record(0))],
            "judge": JUDGE,
        }
    )


def _decide_with(signing_file: Path, mutation: dict[str, Any], routed: RouteDecision) -> Decision:
    """Decide under `signing_file`, the other gates' records made under that same policy."""
    policy, catalogue = load_signing(signing_file)
    gates = {
        n: gate(n, score=1.0 if rule.min_score is not None else None,
                details={"policy": policy.applied(n)})
        for n, rule in policy.gates.items()
        if n != "expectation"
    }  # fmt: skip
    gates["mutation"] = mutation
    return decide(evidence(verify_doc(), gates), routed, policy, catalogue, NO_WAIVERS, TODAY)


def test_thresholds_come_from_the_policy_file(
    policy_copy: Path, routed: RouteDecision, tmp_path: Path
) -> None:
    strict_file = policy_copy / "signing.toml"
    lenient_dir = tmp_path / "lenient"
    lenient_dir.mkdir()
    shutil.copy(policy_copy / "reasons.toml", lenient_dir / "reasons.toml")
    lenient_file = lenient_dir / "signing.toml"
    text = strict_file.read_text()
    # another version of whatever version the shipped policy has
    lenient_text = re.sub(r'^version = "[^"]*"', 'version = "0.0.1"', text, count=1, flags=re.M)
    lenient_file.write_text(
        lenient_text.replace(
            'min_score = 0.8\nbelow_threshold = "mutation',
            'min_score = 0.0\nbelow_threshold = "mutation',
        )
    )
    strict_rec = _real_mutation_record(tmp_path / "strict", strict_file)
    lenient_rec = _real_mutation_record(tmp_path / "lenient-run", lenient_file)
    # the gate itself applied each policy's threshold, and says whose
    assert (strict_rec["passed"], strict_rec["reasons"]) == (
        False,
        ["mutation-score-below-threshold"],
    )
    assert (lenient_rec["passed"], lenient_rec["reasons"], lenient_rec["score"]) == (True, [], 0.5)
    assert lenient_rec["details"]["policy"] == {
        "name": "trace-signing",
        "version": "0.0.1",
        "thresholds": {"min_score": 0.0},
    }
    # each policy allows or denies its own gate's record
    assert _decide_with(lenient_file, lenient_rec, routed).decision == "allow"
    strict = _decide_with(strict_file, strict_rec, routed)
    assert [r.code for r in strict.reasons] == ["mutation-score-below-threshold"]
    # a record made under the other policy is not trusted, whichever way it leans
    for policy_file, rec in ((strict_file, lenient_rec), (lenient_file, strict_rec)):
        d = _decide_with(policy_file, rec, routed)
        codes = {r.code: r for r in d.reasons}
        assert set(codes) == {"mutation-score-below-threshold", "policy-unknown-version"}
        assert codes["policy-unknown-version"].sources == ["gate:mutation"]
    # the same name and version with other thresholds: edited without a version bump
    unbumped = lenient_dir / "unbumped.toml"
    unbumped.write_text(lenient_file.read_text().replace('version = "0.0.1"', 'version = "1.9.0"'))
    d = _decide_with(unbumped, strict_rec, routed)
    (mismatch,) = [r for r in d.reasons if r.code == "policy-unknown-version"]
    assert mismatch.details == [
        "applied thresholds min_score=0.8, but trace-signing 1.9.0 sets min_score=0.0 "
        "(was the policy edited without a version bump?)"
    ]


def test_a_rule_not_yet_effective_only_warns(policy_copy: Path, routed: RouteDecision) -> None:
    reasons = policy_copy / "reasons.toml"
    text = reasons.read_text()
    start = text.index('code = "flaky"')
    reasons.write_text(
        text[:start] + text[start:].replace("2026-01-01", "2027-06-01", 1)
    )  # fmt: skip
    policy = load_signing(policy_copy / "signing.toml")
    flaky = _set("pre.runs.2.exit_code", 0)
    before = run_case(policy, routed, flaky, today=dt.date(2027, 5, 31))
    assert before.decision == "allow"
    assert [w.code for w in before.warnings] == ["flaky"]
    on_the_day = run_case(policy, routed, flaky, today=dt.date(2027, 6, 1))
    assert on_the_day.decision == "deny" and [r.code for r in on_the_day.reasons] == ["flaky"]


BAD_SIGNING = [
    ('below_threshold = "mutation-score-below-threshold"', 'below_threshold = "mutation-low"',
     "gates.mutation.below_threshold", "unknown reason code 'mutation-low'"),
    ("min_runs = 3", "min_runs = 3\nmax_runs = 9", "signing.max_runs", "unknown key 'max_runs'"),
    ("min_score = 0.8", "min_score = 80", "gates.mutation.min_score", "less than or equal to 1"),
    ('below_threshold = "mutation-score-below-threshold"\n', "",
     "gates.mutation.min_score", "min_score without below_threshold"),
    ('routes = ["auto-merge-eligible"', 'routes = ["auto-merge"', "signing.routes.0", "Input"),
    ('schema = "trace.signing/v1"', 'schema = "trace.signing/v2"', "policy.schema", "schema"),
    ('[gates.scope]\nrequired = true', '[gates.scope]\nrequird = true', "gates.scope.requird",
     "unknown key 'requird'"),
    ('[gates.coverage]\nrequired = true', '[gates.coverage]\nrequired = true\nmax_lines = 9',
     "gates.coverage.max_lines", "size bound 'max_lines' on gate 'coverage'"),
    ("max_hunks = 10", "max_hunks = 0", "gates.scope.max_hunks", "greater than or equal to 1"),
    ('[gates.coverage]\nrequired = true', '[gates.coverage]\nrequired = true\nreruns = 2',
     "gates.coverage.reruns", "'reruns' on gate 'coverage'"),
    ("reruns = 2", "reruns = 9", "gates.regression.reruns", "less than or equal to 5"),
    # issue 26: the fuzzing gate's budget is its own; a seed belongs to variants and fuzz only
    ('[gates.coverage]\nrequired = true', '[gates.coverage]\nrequired = true\nexecutions = 9',
     "gates.coverage.executions", "'executions' on gate 'coverage'"),
    ('[gates.coverage]\nrequired = true', '[gates.coverage]\nrequired = true\nseed = 1',
     "gates.coverage.seed", "'seed' on gate 'coverage'"),
    ("executions = 500", "executions = 0", "gates.fuzz.executions", "greater than or equal to 1"),
]  # fmt: skip


@pytest.mark.parametrize(("old", "new", "key", "needle"), BAD_SIGNING)
def test_bad_signing_policies_are_rejected(
    policy_copy: Path, old: str, new: str, key: str, needle: str
) -> None:
    path = policy_copy / "signing.toml"
    edit(path, old, new)
    with pytest.raises(PolicyError) as exc:
        load_signing(path)
    err = exc.value
    assert needle in err.message
    assert (err.file, err.key) == (str(path), key)
    assert err.line is not None and err.hint
    # the line named is the line that holds the key
    line = path.read_text().splitlines()[err.line - 1]
    assert key.split(".")[-1] in line or key.split(".")[-1].isdigit()


BAD_CATALOGUE = [
    ('code = "flaky"', 'code = "nondeterministic"', "reasons.9.code", "declared twice"),
    ('code = "flaky"', 'code = "Flaky Runs"', "reasons.8.code", "should match pattern"),
    ('waivable = true\n', 'waivable = "yes"\n', "reasons.8.waivable", "valid boolean"),
    ("effective_on = 2026-01-01", "effective_on = 2026-13-01", None, "TOML syntax error"),
]  # fmt: skip


@pytest.mark.parametrize(("old", "new", "key", "needle"), BAD_CATALOGUE)
def test_bad_catalogues_are_rejected(
    policy_copy: Path, old: str, new: str, key: str | None, needle: str
) -> None:
    path = policy_copy / "reasons.toml"
    text = path.read_text()
    if old == "waivable = true\n":  # the first waivable reason is 'flaky'
        start = text.index('code = "flaky"')
        text = text[:start] + text[start:].replace(old, new, 1)
        path.write_text(text)
    else:
        edit(path, old, new)
    with pytest.raises(PolicyError) as exc:
        load_catalogue(path)
    assert needle in exc.value.message
    assert (exc.value.file, exc.value.key) == (str(path), key)
    assert exc.value.line is not None


def test_every_code_the_engine_emits_is_catalogued(
    signing: tuple[SigningPolicy, Catalogue],
) -> None:
    from engine.verify_result import REASONS
    from trace_sandbox.gates.codes import codes

    catalogue = signing[1]
    emitted = set(codes()) | (set(REASONS) - {"ok"})
    assert emitted - set(catalogue.reasons) == set()
    # and the policy's own codes
    own = {"evidence-missing", "evidence-unknown-reason", "evidence-unexplained-failure",
           "evidence-candidate-mismatch", "policy-unknown-version", "routing-not-signable",
           "too-few-runs"}  # fmt: skip
    assert own <= set(catalogue.reasons)


def test_fake_documents_are_not_shared_between_cases() -> None:
    a = verify_doc()
    b = copy.deepcopy(a)
    _set("post.runs.1.exit_code", 1)(a, {})
    assert verify_doc() == b


def test_docs_list_every_catalogued_code(signing: tuple[SigningPolicy, Catalogue]) -> None:
    docs = (REPO / "docs" / "policy.md").read_text()
    undocumented = [c for c in signing[1].reasons if f"| `{c}` |" not in docs]
    assert undocumented == [], "add them to the table in docs/policy.md"


def test_policy_schemas_export() -> None:
    import importlib

    from engine.policy.registry import SCHEMAS

    for name, target in SCHEMAS.items():
        module, attr = target.split(":")
        schema = getattr(importlib.import_module(module), attr).model_json_schema()
        assert schema["type"] == "object" and schema["properties"], name
    routing_schema = importlib.import_module("engine.policy.routing").RoutingFile
    assert {"policy", "rules", "critical_packages"} <= set(
        routing_schema.model_json_schema()["properties"]
    )


@pytest.mark.parametrize("tail", ["sh: gcc: not found", "make: *** [Makefile:3: test] Error 1"])
def test_a_regression_deny_whose_tests_never_ran_says_it_is_the_environment(
    tail: str, signing: tuple[SigningPolicy, Catalogue], routed: RouteDecision
) -> None:
    """`gcc: not found` in the regression record's log: the deny names the environment and the
    record, and its advice is the sandbox's (extra_sandbox_paths), not 'change the patch'; an
    ordinary test failure keeps the catalogue's advice (issue 28)."""
    from engine.hostpaths import ADVICE

    def regressed(v: Doc, g: dict[str, Doc]) -> Doc:
        g["regression"].update(
            passed=False,
            score=0.0,
            reasons=["regression-introduced"],
            details={
                **g["regression"]["details"],
                "why": {"regression-introduced": "unit-1 (post-fix, base tests: failed)"},
                "post_log_tail": f"building\n{tail}\n",
            },
        )
        return v

    d = run_case(signing, routed, regressed)
    reason = next(r for r in d.reasons if r.code == "regression-introduced")
    if "gcc" in tail:
        assert reason.solution == ADVICE
        assert reason.details[0].startswith("environmental: `sh: gcc: not found` in the regression")
        assert "payload/gates/regression.json, details.post_log_tail" in reason.details[0]
        assert "unit-1" in reason.details[0]
    else:
        assert "change the patch" in reason.solution
        assert not reason.details[0].startswith("environmental")


def test_a_gate_that_could_not_measure_for_a_missing_tool_says_so(
    signing: tuple[SigningPolicy, Catalogue], routed: RouteDecision
) -> None:
    """The regression gate measured nothing because the build never reached the tests: the
    not-measurable reason names the environment and the record, with the sandbox's advice."""
    from engine.hostpaths import ADVICE

    def unmeasured(v: Doc, g: dict[str, Doc]) -> Doc:
        g["regression"].update(
            passed=False,
            measurable=False,
            score=None,
            reasons=["regression-not-measurable"],
            details={
                **g["regression"]["details"],
                "summary": "6 tests; 0 pass pre-fix, 0 of them fail post-fix",
                "pre_log_tail": "Running phase: buildPhase\nsh: gcc: not found\n",
            },
        )
        return v

    d = run_case(signing, routed, unmeasured)
    reason = next(r for r in d.reasons if r.code == "regression-not-measurable")
    assert reason.details[0].startswith("environmental: `sh: gcc: not found` in the regression")
    assert "details.pre_log_tail" in reason.details[0]
    assert reason.solution == ADVICE
