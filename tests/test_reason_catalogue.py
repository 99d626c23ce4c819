"""One reason catalogue: every reason code trace can emit, with its text, is declared in a
catalogue file under policy/ (the signing policy's codes in policy/reasons.toml, verify-bundle's
integrity codes in policy/bundle-reasons.toml), read through the one loader; the code base
emits every declared code, and no module keeps a copy of a declared text (issue 29). The gates'
rules (`[[rules]]` of policy/reasons.toml: rule, code, message, solution) are data of the same
catalogue: the sandbox reads them (trace_sandbox/gates/codes.py), it keeps no copy."""

from __future__ import annotations

import ast
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.errors import PolicyError
from engine.policy.reasons import load_bundle_catalogue, load_catalogue

REPO = Path(__file__).resolve().parent.parent
POLICY = REPO / "policy" / "reasons.toml"
BUNDLE = REPO / "policy" / "bundle-reasons.toml"
# not rules: file names the gates read
NOT_RULES = {"coverage.json", "variants.json"}
# not codes: file names of the replay (engine/audit/rebuild_steps.py) and of a bundle's payload
NOT_CODES = {"replay.nix", "replay.json"}


def _declared(path: Path) -> dict[str, dict[str, str]]:
    return {r["code"]: r for r in tomllib.loads(path.read_text(encoding="utf-8"))["reasons"]}


def _sources(*roots: str) -> dict[Path, str]:
    return {
        p: p.read_text(encoding="utf-8") for r in roots for p in sorted((REPO / r).rglob("*.py"))
    }


def _literals(text: str) -> list[str]:
    """The string literals of a module, docstrings left out (they may explain a code)."""
    tree = ast.parse(text)
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    return [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
    ]


def _quoted(code: str) -> re.Pattern[str]:
    """`code` as a string literal, or as the start of one (f"land-patch-differs: {x}")."""
    return re.compile(r"[\"']" + re.escape(code) + r"(?![a-z0-9.-])")


def test_every_bundle_code_the_checks_emit_is_declared() -> None:
    declared = _declared(BUNDLE)
    areas = "|".join(sorted({c.split(".")[0] for c in declared}))
    dotted = re.compile(r"[\"']((?:" + areas + r")\.[a-z][a-z-]*)[\"']")
    emitted = {
        code
        for text in _sources("engine/audit", "engine/signoff", "engine/report").values()
        for code in dotted.findall(text)
    } - NOT_CODES
    assert emitted - set(declared) == set(), "emitted but not declared in bundle-reasons.toml"
    assert {"bundle.unsigned", "decision.denied", "waiver.invalid"} <= emitted


@pytest.mark.parametrize(("catalogue", "roots"), [
    (POLICY, ("engine", "trace_sandbox")),
    (BUNDLE, ("engine/audit", "engine/report")),
])  # fmt: skip
def test_every_declared_code_is_emitted_somewhere(catalogue: Path, roots: tuple[str, ...]) -> None:
    """A gate emits a code through its rules (`[[rules]]` code), the rest of the code base by
    naming it."""
    text = "\n".join(_sources(*roots).values())
    by_rules = {r["code"] for r in _rules().values()} if catalogue == POLICY else set()
    unused = [c for c in _declared(catalogue) if not _quoted(c).search(text) and c not in by_rules]
    assert unused == [], f"declared in {catalogue.name} but emitted nowhere in {roots}"


def _rules(path: Path = POLICY) -> dict[str, dict[str, str]]:
    return {r["rule"]: r for r in tomllib.loads(path.read_text(encoding="utf-8"))["rules"]}


def test_no_module_keeps_its_own_copy_of_a_declared_text() -> None:
    """Neither a reason's text nor a gate rule's: both are read from the catalogue."""
    texts = {
        (path.name, code, field): spec[field]
        for path in (POLICY, BUNDLE)
        for code, spec in (_declared(path) | (_rules() if path == POLICY else {})).items()
        for field in ("message", "solution")
    }
    literals = {p: "\n".join(_literals(t)) for p, t in _sources("engine", "trace_sandbox").items()}
    copies = [
        f"{where} {code}.{field}: {p.relative_to(REPO)}"
        for (where, code, field), text in texts.items()
        for p, src in literals.items()
        if text[:40] in src
    ]
    assert copies == [], "a reason text is written again in code: read it from the catalogue"


def test_verify_bundle_reads_its_texts_from_the_catalogue(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.audit.reasons import REASONS, declared

    monkeypatch.delenv("TRACE_CLI", raising=False)
    assert set(REASONS) == set(declared()) == set(_declared(BUNDLE))
    message, solution = REASONS["decision.denied"]
    assert message == _declared(BUNDLE)["decision.denied"]["message"]
    assert "`trace decide`" in solution
    monkeypatch.setenv("TRACE_CLI", "nix run .#trace --")
    assert "`nix run .#trace -- decide`" in REASONS["decision.denied"][1]
    assert "`nix run .#trace -- bundle --sign`" in REASONS["bundle.unsigned"][1]


@pytest.mark.parametrize(("old", "new", "key", "needle"), [
    ('code = "bundle.unsigned"', 'code = "bundle.layout"', "reasons.2.code", "declared twice"),
    ('code = "bundle.unsigned"', 'code = "bundle_unsigned"', "reasons.2.code",
     "should match pattern"),
    ('schema = "trace.bundle-reasons/v1"', 'schema = "trace.reasons/v1"', "policy.schema",
     "schema"),
    ('message = "the bundle has no signature', 'mesage = "the bundle has no signature',
     "reasons.2.mesage", "mesage"),
])  # fmt: skip
def test_a_broken_bundle_catalogue_names_its_file_key_and_line(
    tmp_path: Path, old: str, new: str, key: str, needle: str
) -> None:
    text = BUNDLE.read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / "bundle-reasons.toml"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    with pytest.raises(PolicyError) as exc:
        load_bundle_catalogue(path)
    assert needle in exc.value.message
    assert (exc.value.file, exc.value.key) == (str(path), key)
    assert exc.value.line is not None


def test_the_gate_rules_are_the_catalogue_s_and_name_declared_codes() -> None:
    """Every `<gate>.<rule>` the sandbox names is a `[[rules]]` entry and every entry is named; the
    loader holds each entry to a declared code (tests below); the sandbox's table is the file's."""
    from trace_sandbox.gates import codes

    rules = _rules()
    gates = "|".join(sorted({r.split(".")[0] for r in rules}))
    named = {
        lit
        for text in _sources("trace_sandbox").values()
        for lit in _literals(text)
        if re.fullmatch(rf"(?:{gates})\.[a-z0-9.-]+", lit)
    } - NOT_RULES
    assert named - set(rules) == set(), "named by a gate but not declared in [[rules]]"
    assert set(rules) - named == set(), "declared in [[rules]] but named by no gate"
    assert {r["code"] for r in rules.values()} <= set(_declared(POLICY))
    assert {rule: tuple(r) for rule, r in codes.rules().items()} == {
        rule: (r["code"], r["message"], r["solution"]) for rule, r in rules.items()
    }
    assert len(rules) >= 43


@pytest.fixture
def own_catalogue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A copy of the catalogue the gates read instead (TRACE_GATE_REASONS, as in a gate step)."""
    from trace_sandbox.gates import codes

    path = tmp_path / "reasons.toml"
    path.write_text(POLICY.read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.setenv(codes.CATALOGUE_ENV, str(path))
    codes.rules.cache_clear()
    yield path
    codes.rules.cache_clear()


def test_the_sandbox_gates_report_what_the_catalogue_they_are_given_says(
    own_catalogue: Path,
) -> None:
    """Edit a rule's code and text in the catalogue: the gate record and the coverage summary
    follow the file, with no change to the sandbox's code."""
    from trace_sandbox.gates import codes, coverage_gate

    text = own_catalogue.read_text(encoding="utf-8")
    old = 'rule = "coverage.no-executable-lines"\ncode = "coverage-not-measurable"\nmessage = "'
    assert text.count(old) == 1
    own_catalogue.write_text(
        text.replace(old, old.replace("coverage-not-measurable", "coverage-below-threshold")
                     + "EDITED: "), encoding="utf-8",
    )  # fmt: skip
    record = codes.gate_record(
        "coverage", ["coverage.no-executable-lines"], measurable=False, score=None, details={}
    )
    assert record["reasons"] == ["coverage-below-threshold"]
    assert record["details"] == {"rules": ["coverage.no-executable-lines"]}
    summary = coverage_gate._summary(
        (0, 0, [0, 0]), [], ["coverage.no-executable-lines"], {"unmapped": [], "unmeasured": []}, []
    )
    assert summary.endswith("; EDITED: " + _rules()["coverage.no-executable-lines"]["message"])


def test_a_gate_step_without_its_catalogue_says_what_it_lacks(own_catalogue: Path) -> None:
    from trace_sandbox.gates import codes

    own_catalogue.unlink()
    with pytest.raises(RuntimeError, match=r"rule catalogue .*reasons\.toml cannot be read"):
        codes.code_of("scope.too-many-files")


@pytest.mark.parametrize(("old", "new", "key", "needle"), [
    ('rule = "scope.too-many-hunks"', 'rule = "scope.too-many-files"', "rules.2.rule",
     "declared twice"),
    ('code = "scope-too-large"\nmessage = "the patch has more hunks',
     'code = "scope-too-big"\nmessage = "the patch has more hunks', "rules.2.code",
     "undeclared code 'scope-too-big'"),
    ('rule = "scope.too-many-hunks"', 'rule = "Scope too many hunks"', "rules.2.rule",
     "should match pattern"),
])  # fmt: skip
def test_a_broken_gate_rule_names_its_file_key_and_line(
    tmp_path: Path, old: str, new: str, key: str, needle: str
) -> None:
    text = POLICY.read_text(encoding="utf-8")
    assert text.count(old) == 1
    path = tmp_path / "reasons.toml"
    path.write_text(text.replace(old, new), encoding="utf-8")
    with pytest.raises(PolicyError) as exc:
        load_catalogue(path)
    assert needle in exc.value.message
    assert (exc.value.file, exc.value.key) == (str(path), key)
    assert (
        exc.value.line is not None
        and new.split("\n")[0] in text.replace(old, new).splitlines()[exc.value.line - 1]
    )
