"""What a gate process imports at start-up (each gate step is a fresh `python3 -S -B`): the gate
modules' dataclasses come without `inspect` (trace_sandbox/gates/_dataclasses.py) and their
annotations without `typing` (only mypy reads them), so no gate pays for either."""

from __future__ import annotations

import ast
import collections
import subprocess
import sys
from pathlib import Path

SANDBOX = Path(__file__).resolve().parent.parent / "trace_sandbox"
GATES_WITH_DATACLASSES = sorted(
    p.stem
    for p in (SANDBOX / "gates").glob("*.py")
    if "from ._dataclasses import" in p.read_text(encoding="utf-8")
)


def _dataclasses_without_docstring() -> list[str]:
    found = []
    for path in sorted(SANDBOX.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef):
                continue
            decorated = any("dataclass" in ast.unparse(d) for d in node.decorator_list)
            if decorated and ast.get_docstring(node) is None:
                found.append(f"{path.relative_to(SANDBOX)}:{node.lineno} {node.name}")
    return found


def test_every_sandbox_dataclass_has_a_docstring() -> None:
    # a dataclass without one makes `dataclasses` write it with inspect.signature: the real
    # `inspect` is imported then, in every gate process that imports the module
    assert _dataclasses_without_docstring() == []


def test_the_sandbox_uses_its_dataclasses_module() -> None:
    plain = [
        str(p.relative_to(SANDBOX))
        for p in sorted(SANDBOX.rglob("*.py"))
        if "from dataclasses import" in p.read_text(encoding="utf-8")
        and p.name != "_dataclasses.py"
    ]
    assert plain == [], "import dataclass and field from trace_sandbox.gates._dataclasses"
    assert len(GATES_WITH_DATACLASSES) >= 15


def _fresh(code: str) -> str:
    """`code` run as a gate step runs: a fresh `python3 -S -B` with the sandbox on its path."""
    done = subprocess.run(
        [sys.executable, "-S", "-B", "-c", code],
        env={"PYTHONPATH": str(SANDBOX.parent)},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def test_a_gate_process_imports_no_inspect() -> None:
    modules = ", ".join(f"trace_sandbox.gates.{m}" for m in GATES_WITH_DATACLASSES)
    out = _fresh(
        f"import sys, {modules}\n"
        "print(sorted(m for m in ('inspect', 'ast', 'dis') if m in sys.modules))"
    )
    assert out == "[]"


def test_the_stand_in_is_the_real_inspect_when_used() -> None:
    out = _fresh(
        "import sys\n"
        "from trace_sandbox.gates._dataclasses import dataclass\n"
        "import dataclasses\n"
        "@dataclass(frozen=True)\n"
        "class P:\n"
        "    x: int\n"
        "    y: str = 'a'\n"
        "print(P.__doc__, 'inspect' in sys.modules)\n"  # no docstring: inspect.signature made it
        "import inspect\n"
        "print(inspect.signature is dataclasses.inspect.signature, P(1) == P(1, 'a'))"
    )
    assert out.splitlines() == ["P(x: int, y: str = 'a') True", "True True"]


GATE_MODULES = sorted(
    p.stem for p in (SANDBOX / "gates").glob("*.py") if not p.stem.startswith("_")
)


def test_no_gate_module_imports_typing_or_inspect() -> None:
    # (the verify harness, trace_sandbox/harness, is not a gate module: its runs import it;
    # `ast` is the mutation gate's own, equiv.py)
    modules = ", ".join(f"trace_sandbox.gates.{m}" for m in GATE_MODULES)
    out = _fresh(
        f"import sys, trace_sandbox.ddmin, {modules}\n"
        "print(sorted(m for m in ('typing', 'inspect', 'dis') if m in sys.modules))"
    )
    assert out == "[]"


def test_the_rule_table_rows_are_still_named_tuples() -> None:
    from trace_sandbox.gates.codes import Rule

    rule = Rule("scope-exceeded", "m", "s")
    assert isinstance(rule, tuple) and rule == ("scope-exceeded", "m", "s")
    assert rule.code == "scope-exceeded" and Rule._fields == ("code", "message", "solution")
    assert issubclass(Rule, tuple) and not issubclass(Rule, collections.OrderedDict)
