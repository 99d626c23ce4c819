"""Pure gate logic. STDLIB ONLY: this package is copied into the Nix sandbox and run there with
a bare Python 3.11 (`python3 -m trace_sandbox.gates.<module>`), so it must never import the engine,
pydantic or any third-party package. A test enforces this.
"""
