"""Dependencies point one way: engine.verify (the pipeline and its verdict) never imports the
bundle layers above it (engine.evidence, engine.bundle_verify): issue 11 untangled the circle
`engine.verify.command` -> `engine.bundle_verify` -> `engine.verify`."""

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
