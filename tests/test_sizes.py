"""Size limits of engine/ (issue 29): no module over MAX_MODULE lines, no function over
MAX_FUNCTION lines (decorators and docstring included: from `def` to its last line).

What is still over a limit is listed below, each entry with why it is left; the lists only shrink:
an entry that is back within the limit fails the test until it is removed, and nothing new may
join them. Measured with these checks, main at 91184d9: modules graph.py 772, run.py 693,
candidate.py 555, policy/signing.py 507; functions over 80: eleven (see issue 29). After the
candidate pipeline (engine/pipeline/) and the splits of issue 29 (policy/signing_rules.py,
oracles.py, plan.py, evaluation.py, graphfile.py, graphparams.py): the lists below.

The sandbox package trace_sandbox/ (the gates, harness and fuzzers that run inside Nix builds)
is held to the same limits (sizes32). Measured at main 7884c1c: modules gates/oracle.py 585,
gates/fuzz_python.py 533, gates/mutate.py 527, gates/variant_gate.py 508; functions
gates/mutation.py::evaluate 84, harness/main.py::run 82. Entries are keyed by their path from
the repository root (engine/..., trace_sandbox/...).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ENGINE = REPO / "engine"
SANDBOX = REPO / "trace_sandbox"
PACKAGES = (ENGINE, SANDBOX)  # every package held to the limits
MAX_MODULE = 500
MAX_FUNCTION = 80

# repository-relative path -> why it is still too long (remove the entry when it is split); none
KNOWN_LONG_MODULES: dict[str, str] = {}
# "path::function" -> why it is still too long (remove the entry when it is split); none now
KNOWN_LONG_FUNCTIONS: dict[str, str] = {}


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def long_modules(engine: Path = ENGINE) -> dict[str, int]:
    """engine-relative path -> lines, of every module over MAX_MODULE lines."""
    sizes = {p.relative_to(engine).as_posix(): _lines(p) for p in sorted(engine.rglob("*.py"))}
    return {rel: n for rel, n in sizes.items() if n > MAX_MODULE}


def long_functions(engine: Path = ENGINE) -> dict[str, int]:
    """ "path::name" -> lines, of every function (methods and nested ones included) over
    MAX_FUNCTION lines, counted from its first decorator to its last line."""
    out: dict[str, int] = {}
    for path in sorted(engine.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([d.lineno for d in node.decorator_list] + [node.lineno])
                n = (node.end_lineno or node.lineno) - first + 1
                if n > MAX_FUNCTION:
                    out[f"{path.relative_to(engine).as_posix()}::{node.name}"] = n
    return out


def _over(measure: Callable[[Path], dict[str, int]]) -> dict[str, int]:
    """`measure` over every package of PACKAGES, keyed by the path from the repository root."""
    return {f"{pkg.name}/{k}": n for pkg in PACKAGES for k, n in measure(pkg).items()}


def test_no_module_over_the_limit_but_the_known_ones() -> None:
    found = _over(long_modules)
    assert sorted(set(found) - set(KNOWN_LONG_MODULES)) == [], found
    fixed = sorted(set(KNOWN_LONG_MODULES) - set(found))
    assert fixed == [], f"within the limit now: remove from KNOWN_LONG_MODULES: {fixed}"


def test_no_function_over_the_limit_but_the_known_ones() -> None:
    found = _over(long_functions)
    assert sorted(set(found) - set(KNOWN_LONG_FUNCTIONS)) == [], found
    fixed = sorted(set(KNOWN_LONG_FUNCTIONS) - set(found))
    assert fixed == [], f"within the limit now: remove from KNOWN_LONG_FUNCTIONS: {fixed}"


def test_the_measures_catch_what_they_claim(tmp_path: Path) -> None:
    """An adversarial engine: a long module, a long method, a long nested function and a
    decorated one just over the limit are all found; one exactly at the limits is not."""
    engine = tmp_path / "engine"
    (engine / "pkg").mkdir(parents=True)
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION - 1))
    at_limit = f"def ok():\n{body}"  # MAX_FUNCTION lines exactly
    (engine / "fine.py").write_text(at_limit + "\n" * (MAX_MODULE - MAX_FUNCTION))
    (engine / "long.py").write_text("x = 1\n" * (MAX_MODULE + 1))
    (engine / "pkg" / "m.py").write_text(
        "class C:\n    def method(self):\n"
        + "".join(f"        y{i} = {i}\n" for i in range(MAX_FUNCTION))
        + "def outer():\n    def inner():\n"
        + "".join(f"        z{i} = {i}\n" for i in range(MAX_FUNCTION))
        + "    return inner\n"
        + f"@staticmethod\n{at_limit}"
    )
    assert long_modules(engine) == {"long.py": MAX_MODULE + 1}
    assert long_functions(engine) == {
        "pkg/m.py::method": MAX_FUNCTION + 1,
        "pkg/m.py::outer": MAX_FUNCTION + 3,
        "pkg/m.py::inner": MAX_FUNCTION + 1,
        "pkg/m.py::ok": MAX_FUNCTION + 1,
    }


def test_every_package_is_measured() -> None:
    """Both packages are walked, each with modules in it (a renamed package is not silently
    skipped), and the known-long tables name only files that exist."""
    assert all(any(pkg.rglob("*.py")) for pkg in PACKAGES), PACKAGES
    listed = [*KNOWN_LONG_MODULES, *(k.split("::")[0] for k in KNOWN_LONG_FUNCTIONS)]
    assert all((REPO / rel).is_file() for rel in listed), listed
