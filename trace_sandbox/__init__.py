"""trace's sandbox code: everything that runs inside the Nix sandbox, under one import name.

STDLIB ONLY: this package is copied into the Nix sandbox (templates/lib/sandbox.nix)
and run there by the package set's bare python3 (`python3 -S -B -m trace_sandbox.gates.main`,
`python3 -I -S .../trace_sandbox/harness`), so it never imports `engine`, pydantic or any
third-party package (tests/test_layers.py and tests/test_gates_records.py enforce both).

* `gates/`: the gates' logic (scope, mutation, coverage, variants, expectation, ...) and
  their records' schemas and reason codes;
* `harness/`: the verify harness, one reproducer run against one build;
* `host.py`: the one interface the engine (host side) imports from this package.
"""
