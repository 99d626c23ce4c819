"""Dependencies point one way: engine.verify (the pipeline and its verdict) never imports the
bundle layers above it (engine.evidence, engine.bundle_verify): issue 11 untangled the circle
`engine.verify.pipeline` -> `engine.bundle_verify` -> `engine.verify`."""

from __future__ import annotations

import ast
from pathlib import Path

ENGINE = Path(__file__).resolve().parent.parent / "engine"
ABOVE = ("engine.evidence", "engine.bundle_verify", "engine.signing")


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_verify_imports_nothing_above_it() -> None:
    bad = {
        f"{p.relative_to(ENGINE.parent)}: {m}"
        for p in sorted((ENGINE / "verify").glob("*.py"))
        for m in _imports(p)
        if m.startswith(ABOVE)
    }
    assert bad == set()


def _importers(folder: Path, banned: tuple[str, ...]) -> set[str]:
    return {
        f"{p.relative_to(ENGINE.parent)}: {m}"
        for p in sorted(folder.rglob("*.py"))
        for m in _imports(p)
        if m.startswith(banned)
    }


def test_gates_never_import_the_verify_pipeline_that_composes_them() -> None:
    """engine.verify loads the gate steps' context (engine.gates.context) and judges with the
    sandbox's own expectation code; the gates never reach back up into engine.verify."""
    assert _importers(ENGINE / "gates", ("engine.verify",)) == set()


def test_the_policy_registry_imports_no_policy_module() -> None:
    """routing, signing, gates, evidence and fork import the registry; it imports none of them
    (it used to import routing and signing, which imported it: a circle)."""
    mods = _imports(ENGINE / "policy" / "registry.py")
    assert {m for m in mods if m.startswith("engine.")} == {"engine.paths"}
