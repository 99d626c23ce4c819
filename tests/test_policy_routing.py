"""Routing: a table of cases against the shipped policy, rule order, bad policy files, the CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from engine.errors import PolicyError
from engine.policy.routing import RouteFacts, RoutingPolicy, load_routing, route

REPO = Path(__file__).resolve().parent.parent
POLICY = REPO / "policy"
CANDIDATES = REPO / "tests" / "fixtures" / "fork" / "trace" / "candidates"


@pytest.fixture(scope="module")
def shipped() -> RoutingPolicy:
    return load_routing(POLICY / "routing.toml")


def facts(**kw: Any) -> RouteFacts:
    base: dict[str, Any] = {
        "candidate": "c1",
        "package": "cparse",
        "advisory": "OSV-1",
        "severity": "high",
        "score": 7.5,
        "ecosystems": ["Nix"],
        "upstream_fix": True,
        "critical": False,
        "origin": "model",
    }
    return RouteFacts(**{**base, **kw})


HR, LOW, MED, HIGH, CRIT = "human-review-required", "low", "medium", "high", "critical"
CASES = [
    # (facts, state, rule)
    ({"withdrawn": True, "critical": True}, "reject", "withdrawn-advisory"),
    ({"critical": True, "severity": LOW, "origin": "upstream"}, HR, "critical-package"),
    ({"critical": True, "severity": CRIT}, HR, "critical-package"),
    ({"severity": "unknown", "score": None}, HR, "unknown-severity"),
    ({"severity": CRIT, "score": 9.8, "origin": "upstream"}, HR, "critical-severity"),
    ({"origin": "upstream", "severity": HIGH}, "auto-merge-eligible", "upstream-backport"),
    (
        {"origin": "upstream", "severity": LOW, "score": 3.1},
        "auto-merge-eligible",
        "upstream-backport",
    ),
    (
        {"origin": "model", "severity": MED, "score": 5.3},
        "auto-merge-eligible",
        "model-fix-with-upstream-reference",
    ),
    ({"origin": "model", "severity": HIGH}, HR, "reviewed-fix"),
    ({"origin": "human", "severity": LOW, "upstream_fix": True}, HR, "reviewed-fix"),
    (
        {"origin": "model", "severity": LOW, "upstream_fix": False},
        "advisory-only",
        "no-fix-negligible",
    ),
    (
        {"severity": "none", "score": 0.0, "upstream_fix": False},
        "advisory-only",
        "no-fix-negligible",
    ),
    ({"origin": "upstream", "severity": MED, "upstream_fix": False}, HR, "reviewed-fix"),
    # nothing matches: severity none with an upstream fix -> the default, reject
    ({"origin": "model", "severity": "none", "score": 0.0}, "reject", None),
]


@pytest.mark.parametrize(("overrides", "state", "rule"), CASES)
def test_routing_table(
    shipped: RoutingPolicy, overrides: dict[str, Any], state: str, rule: str | None
) -> None:
    d = route(facts(**overrides), shipped)
    assert (d.state, d.rule) == (state, rule)
    assert d.policy.name == "trace-routing" and d.policy.version == shipped.ref.version
    assert len(d.policy.digest) == 64


def write_policy(tmp_path: Path, body: str, critical: str | None = None) -> Path:
    crit = critical or textwrap.dedent("""\
        [policy]
        name = "crit"
        version = "1"
        schema = "trace.critical/v1"
        [[packages]]
        pattern = "python3Packages.*"
        why = "test"
        """)
    (tmp_path / "critical-packages.toml").write_text(crit)
    path = tmp_path / "routing.toml"
    path.write_text(textwrap.dedent(body))
    return path


HEADER = """\
[policy]
name = "test-routing"
version = "2.1"
schema = "trace.routing/v1"
"""


def test_conditions_scores_ecosystem_globs_and_package_globs(tmp_path: Path) -> None:
    path = write_policy(
        tmp_path,
        HEADER
        + """
[[rules]]
name = "debian-mid"
state = "advisory-only"
when = { ecosystem = ["Debian:*"], min_score = 4.0, max_score = 6.9 }

[[rules]]
name = "python-libs"
state = "human-review-required"
when = { package = ["python3Packages.*"] }

[[rules]]
name = "any"
state = "auto-merge-eligible"
""",
    )
    policy = load_routing(path)
    assert policy.critical.match("python3Packages.requests") is not None
    assert policy.critical.match("python3") is None
    got = route(facts(ecosystems=["PyPI", "Debian:12"], score=5.0), policy)
    assert got.rule == "debian-mid"
    # a score condition never holds when the advisory has no score
    assert route(facts(ecosystems=["Debian:12"], score=None), policy).rule == "any"
    assert route(facts(ecosystems=["Debian:12"], score=7.0), policy).rule == "any"
    assert route(facts(package="python3Packages.foo"), policy).rule == "python-libs"
    assert route(facts(), policy).state == "auto-merge-eligible"


R = "[[rules]]\nname = 'a'\nstate = 'reject'\n"  # lines 5-7 after HEADER


@pytest.mark.parametrize(
    ("body", "key", "line", "needle"),
    [
        (HEADER + "[[rules]]\nname = 'a'\nstate = 'merge'\n", "rules.0.state", 7, "Input should"),
        (HEADER + R + "[[rules]]\nname = 'b'\nstat = 'reject'\n", "rules.1.stat", 10, "'stat'"),
        (HEADER + R + "when = { severty = ['high'] }\n", "rules.0.when.severty", 8, "'severty'"),
        (HEADER + R + "[rules.when]\nseverity = ['hgh']\n", "rules.0.when.severity.0", 9, "Input"),
        (HEADER + R + R, "rules.1.name", 9, "used twice"),
        (HEADER + R + "when = { min_score = 7.0, max_score = 3.0 }\n", "rules.0.when", 8, "above"),
        (HEADER.replace("/v1", "/v9") + R, "policy.schema", 4, "unknown policy schema"),
        (HEADER.replace('"2.1"', '"two"') + R, "policy.version", 3, "should match pattern"),
        ("rules = []\n" + HEADER, "rules", 1, "at least 1 item"),
        (HEADER + "rules = []\n", "policy.rules", 5, "unknown key 'rules'"),
        ("[policy\nname = 'x'\n", None, 1, "TOML syntax error"),
    ],
)
def test_bad_routing_files_are_rejected_with_location(
    tmp_path: Path, body: str, key: str | None, line: int, needle: str
) -> None:
    path = write_policy(tmp_path, body)
    with pytest.raises(PolicyError) as exc:
        load_routing(path)
    err = exc.value
    assert needle in err.message
    assert (err.file, err.key, err.line) == (str(path), key, line)
    assert err.hint  # says what to do


def test_unknown_key_hint_suggests_the_right_key(tmp_path: Path) -> None:
    path = write_policy(tmp_path, HEADER + "[[rules]]\nname = 'a'\nstat = 'reject'\n")
    with pytest.raises(PolicyError) as exc:
        load_routing(path)
    assert exc.value.hint is not None and "did you mean 'state'?" in exc.value.hint


def test_bad_critical_list_is_rejected(tmp_path: Path) -> None:
    crit = '[policy]\nname = "c"\nversion = "1"\nschema = "trace.critical/v1"\n'
    crit += "[[packages]]\npattern = 'a'\nwhy = 'x'\n[[packages]]\npattern = 'a'\nwhy = 'y'\n"
    path = write_policy(tmp_path, HEADER + "[[rules]]\nname = 'a'\nstate = 'reject'\n", crit)
    with pytest.raises(PolicyError) as exc:
        load_routing(path)
    assert exc.value.file == str(tmp_path / "critical-packages.toml")
    assert (exc.value.key, exc.value.line) == ("packages.1.pattern", 9)


def trace(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )


def test_trace_route_prints_state_rule_and_version() -> None:
    cand = CANDIDATES / "pager-last-page" / "candidate.toml"
    proc = trace("route", str(cand))
    assert proc.returncode == 0, proc.stderr
    first, *rest = proc.stdout.splitlines()
    assert first == "human-review-required"
    text = "\n".join(rest)
    assert "rule:     reviewed-fix" in text
    assert "trace-routing 1.0.0" in text
    assert "severity medium (CVSS 5.3)" in text

    proc = trace("route", "--json", str(cand))
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "trace.route/v1"
    assert (doc["state"], doc["rule"]) == ("human-review-required", "reviewed-fix")
    assert doc["facts"]["origin"] == "human" and doc["facts"]["upstream_fix"] is True


def test_trace_route_with_own_policy_and_bad_policy(tmp_path: Path) -> None:
    cand_dir = tmp_path / "cand"
    shutil.copytree(CANDIDATES / "cparse-key-overflow", cand_dir)
    policy = write_policy(
        tmp_path,
        HEADER + "[[rules]]\nname = 'only-pypi'\nstate = 'auto-merge-eligible'\n"
        "when = { ecosystem = ['PyPI'] }\n",
    )
    proc = trace("route", "--policy", str(policy), str(cand_dir / "candidate.toml"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "reject"
    assert "none matched: reject is the default" in proc.stdout
    assert "test-routing 2.1" in proc.stdout

    policy.write_text(HEADER + "[[rules]]\nname = 'x'\nstate = 'merge'\n")
    proc = trace("route", "--policy", str(policy), str(cand_dir / "candidate.toml"))
    assert proc.returncode == 2
    assert f"{policy}:7, key 'rules.0.state'" in proc.stderr


EARLY = """\
id = "TRACE-2026-0009-early"
package = "cparse"
patches = ["not-yet.patch"]   # the model has not written it yet
origin = "model"

[advisory]
osv = "advisory.json"
"""


def test_trace_route_needs_only_the_advisory_package_and_origin(tmp_path: Path) -> None:
    """Routing happens before any model sees the candidate: no patch, reproducer or [expect]."""
    shutil.copy(CANDIDATES / "cparse-key-overflow" / "advisory.json", tmp_path / "advisory.json")
    early = tmp_path / "candidate.toml"
    early.write_text(EARLY)
    proc = trace("route", "--json", str(early))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    # the same advisory, package and origin route as the complete candidate does
    full = json.loads(
        trace("route", "--json", str(CANDIDATES / "cparse-key-overflow" / "candidate.toml")).stdout
    )
    assert (doc["state"], doc["rule"]) == (full["state"], full["rule"])
    assert doc["facts"]["candidate"] == "TRACE-2026-0009-early"
    # without even a patches key
    early.write_text(
        EARLY.replace('patches = ["not-yet.patch"]   # the model has not written it yet\n', "")
    )
    assert trace("route", str(early)).returncode == 0
    # what routing reads must still be there and well-formed
    early.write_text(EARLY.replace('origin = "model"', 'origin = "robot"'))
    proc = trace("route", str(early))
    assert proc.returncode == 2 and "key 'origin'" in proc.stderr
    (tmp_path / "advisory.json").unlink()
    early.write_text(EARLY)
    proc = trace("route", str(early))
    assert proc.returncode == 2 and "'advisory.json' does not exist" in proc.stderr
