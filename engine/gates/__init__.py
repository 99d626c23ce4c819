"""Gates that measure a candidate patch: scope/minimality, mutation testing, diff coverage.

`trace_sandbox.gates` holds the pure, stdlib-only logic; the same modules run inside the Nix
sandbox (shipped as a tree input of each gate step) and are imported here on the engine side.
"""
