"""One reason catalogue: every reason code trace can emit, with its text, is declared in a
catalogue file under policy/ (the signing policy's codes in policy/reasons.toml, verify-bundle's
integrity codes in policy/bundle-reasons.toml), read through the one loader; the code base
emits every declared code, and no module keeps a copy of a declared text (issue 29)."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

from engine.errors import PolicyError
from engine.policy.reasons import load_bundle_catalogue

REPO = Path(__file__).resolve().parent.parent
POLICY = REPO / "policy" / "reasons.toml"
BUNDLE = REPO / "policy" / "bundle-reasons.toml"
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
    text = "\n".join(_sources(*roots).values())
    unused = [c for c in _declared(catalogue) if not _quoted(c).search(text)]
    assert unused == [], f"declared in {catalogue.name} but emitted nowhere in {roots}"


def test_no_module_keeps_its_own_copy_of_a_declared_text() -> None:
    texts = {
        (path.name, code, field): spec[field]
        for path in (POLICY, BUNDLE)
        for code, spec in _declared(path).items()
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
