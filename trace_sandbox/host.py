"""The one interface the host (the engine) uses into the sandbox package.

The engine judges with the sandbox's own code where it must agree with a sandboxed step to the
letter: a side whose other side did not build (the expectation gate cannot run: `judge_side`,
`side_flaky`), the signing policy's re-check of the declared oracles on bundled records
(`judge_pre`, `post_fix_acceptable`), and `trace mutants`' list, the mutation gate's own
(`generate_mutants`, `Mutant`, `DiffError`), and `trace record`'s minimiser and fault site: the
fuzzing gate's delta debugging (`shrink`), the fault-site gate's own-frame rule
(`own_frames`) and the harness's rule for a failed invocation (`invocation_failed`).
Everything else in trace_sandbox runs only inside the Nix sandbox. tests/test_layers.py keeps
the engine to this module.
"""

from __future__ import annotations

from .ddmin import shrink
from .gates.diff import DiffError
from .gates.expectation import judge_side, side_flaky
from .gates.faultsite import own_frames
from .gates.mutate import Mutant
from .gates.mutate import generate as generate_mutants
from .gates.oracle import judge_pre, post_fix_acceptable
from .harness.targets import invocation_failed

__all__ = [
    "DiffError",
    "Mutant",
    "generate_mutants",
    "invocation_failed",
    "judge_pre",
    "judge_side",
    "own_frames",
    "post_fix_acceptable",
    "shrink",
    "side_flaky",
]
