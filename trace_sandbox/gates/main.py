"""Entry point inside the Nix sandbox: `python3 -S -B -m trace_sandbox.gates.main GATE OUT`.

`... mutants OUTDIR` writes every mutant's patch series instead,
`... mutant-runs OUTDIR` is the mutant-runs step after the mutants' builds: for each mutant
the check (stillborn, equivalent, not code: trace_sandbox/gates/equiv.py), the reproducer's run,
and for a mutant the reproducer did not kill the PoC's variants (mutant_variants.py),
`... patched-source SRC OUT [MUTANTS]` records where the patch landed (landing.py), and with
MUTANTS writes every mutant's series there too, in the same interpreter,
`... coverage-run` is the coverage variant's reproducer run,
`... variant-plan OUTDIR` writes the variants gate's plan,
`... variant-runs PLAN OUTDIR` runs every variant of it against one build (variant_runs.py), and
`... tests-record OUT` one side's package-test record, and
`... base-test-patches OUTDIR` the patches without their test files' sections (testfiles.py),
`... library-patches OUTDIR` the patches without their entry files' sections (library_side.py),
`... rules-json CATALOGUE OUT` the reason catalogue's rule table as JSON (codes.py).

`-S`: the gates are stdlib only, so the interpreter's site (its site-packages and their `.pth`
files, which can run code at start-up) is never loaded into a gate. `-B`: the store is
read-only. Each gate imports only its own modules (the imports are inside the functions), as
byte-compiled once for every step in the shared `trace-sandbox` derivation on PYTHONPATH
(templates/lib/sandbox.nix): no gate compiles a module.

The gate's configuration comes as JSON in the environment variable TRACE_GATE_CONFIG (a
derivation attribute, so it is part of the derivation's hash); the gate writes its GateRecord
JSON to OUT. Exit status is 0 whenever a record was written, pass or fail: the record is the
result, and a failing gate is still a successful measurement.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable

from .applied import applied_policy, bound

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="surrogateescape") as fh:
        return fh.read()


def scope_gate(cfg: dict[str, Any]) -> dict[str, Any]:
    # each gate imports only its own modules: a gate is a process of its own, in a sandbox of its
    # own, that loads what it imports (from the compiled trace-sandbox derivation)
    from .scope import DEFAULT_SCOPE, ScopePolicy
    from .scope import evaluate as scope_evaluate

    applied = applied_policy(cfg)
    policy = ScopePolicy(
        scope=tuple(cfg.get("scope") or ()),
        default_scope=tuple(cfg.get("default_scope") or DEFAULT_SCOPE),
        max_files=bound(applied, "max_files"),
        max_hunks=bound(applied, "max_hunks"),
        max_lines=bound(applied, "max_lines"),
    )
    from .poc import collect

    poc = collect(cfg.get("script"), list(cfg.get("data") or []))
    record = scope_evaluate([_read(p) for p in cfg["patches"]], policy, poc)
    details = record["details"]
    assert isinstance(details, dict)
    details["policy"] = applied
    return record


def mutation_gate(cfg: dict[str, Any]) -> dict[str, Any]:
    from .mutation import evaluate

    return evaluate(cfg)


def coverage_gate(cfg: dict[str, Any]) -> dict[str, Any]:
    from .coverage_gate import evaluate

    return evaluate(cfg)


def variants_gate(cfg: dict[str, Any]) -> dict[str, Any]:
    from .variant_gate import evaluate

    return evaluate(cfg)


def expectation_gate(cfg: dict[str, Any]) -> dict[str, Any]:
    from .expectation import evaluate

    return evaluate(cfg)


def regression_gate(cfg: dict[str, Any]) -> dict[str, Any]:
    from .regression import evaluate

    return evaluate(cfg)


def fault_site_gate(cfg: dict[str, Any]) -> dict[str, Any]:
    from .faultsite import evaluate

    return evaluate(cfg)


def detector_gate(cfg: dict[str, Any]) -> dict[str, Any]:
    from .detector import evaluate

    return evaluate(cfg)


def differential_gate(cfg: dict[str, Any]) -> dict[str, Any]:
    from .differential import evaluate

    return evaluate(cfg)


def fuzz_gate(cfg: dict[str, Any]) -> dict[str, Any]:
    from .fuzz_gate import evaluate

    return evaluate(cfg)


GATES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "fuzz": fuzz_gate,
    "differential": differential_gate,
    "expectation": expectation_gate,
    "fault-site": fault_site_gate,
    "detector": detector_gate,
    "scope": scope_gate,
    "mutation": mutation_gate,
    "coverage": coverage_gate,
    "variants": variants_gate,
    "regression": regression_gate,
}


def write_json(path: str, value: object) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(value, fh, indent=2, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path)


def patched_source(cfg: dict[str, Any], args: list[str]) -> int:
    """`patched-source SRC OUT [MUTANTS]`: where the patch landed (landing.py), and with
    MUTANTS every mutant's patch series too (mutation.write_mutants), in this one interpreter
    (a second gate process in the patched-source step paid its start-up and imports again)."""
    from .landing import write_patched_source

    write_patched_source(cfg, args[0], args[1])
    if len(args) == 3:
        from .mutation import write_mutants

        write_mutants(cfg, args[2])
    return 0


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "mutants":
        from .mutation import write_mutants

        write_mutants(json.loads(os.environ["TRACE_GATE_CONFIG"]), argv[1])
        return 0
    if len(argv) == 2 and argv[0] == "variant-plan":
        from .variant_gate import write_plan

        write_plan(json.loads(os.environ["TRACE_GATE_CONFIG"]), argv[1])
        return 0
    if len(argv) == 2 and argv[0] == "fuzz-plan":
        from .fuzz_gate import write_plan as write_fuzz_plan

        write_fuzz_plan(json.loads(os.environ["TRACE_GATE_CONFIG"]), argv[1])
        return 0
    if len(argv) == 3 and argv[0] == "variant-runs":
        from .variant_runs import run_side

        run_side(argv[1], argv[2])
        return 0
    if len(argv) == 2 and argv[0] == "mutant-runs":
        from .mutant_variants import run_mutants

        run_mutants(json.loads(os.environ["TRACE_GATE_CONFIG"]), dict(os.environ), argv[1])
        return 0
    if len(argv) == 2 and argv[0] == "tests-record":
        from .regression import tests_record

        write_json(argv[1], tests_record(json.loads(os.environ["TRACE_GATE_CONFIG"])))
        return 0
    if len(argv) == 2 and argv[0] == "base-test-patches":
        from .testfiles import write_base_test_patches

        write_base_test_patches(json.loads(os.environ["TRACE_GATE_CONFIG"]), argv[1])
        return 0
    if len(argv) == 2 and argv[0] == "library-patches":
        from .library_side import write_library_patches

        write_library_patches(json.loads(os.environ["TRACE_GATE_CONFIG"]), argv[1])
        return 0
    if len(argv) == 3 and argv[0] == "rules-json":
        from .codes import write_rule_table

        write_rule_table(argv[1], argv[2])
        return 0
    if len(argv) in (3, 4) and argv[0] == "patched-source":
        return patched_source(json.loads(os.environ["TRACE_GATE_CONFIG"]), argv[1:])
    if argv == ["coverage-run"]:
        from .coverage import run

        return run(json.loads(os.environ["TRACE_GATE_CONFIG"]))
    if len(argv) != 2 or argv[0] not in GATES:
        print(
            f"usage: python3 -m trace_sandbox.gates.main {{{','.join(GATES)}}} OUT", file=sys.stderr
        )
        return 2
    cfg = json.loads(os.environ["TRACE_GATE_CONFIG"])
    record = GATES[argv[0]](cfg)
    write_json(argv[1], record)
    verdict = "pass" if record["passed"] else "fail"
    print(f"gate {argv[0]}: {verdict} {' '.join(record['reasons'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
