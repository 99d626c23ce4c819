"""`dataclass` and `field` for the gate modules, without importing `inspect` at start-up.

The standard `dataclasses` module imports `inspect` (which imports `ast`, `dis`, `tokenize`,
`linecache`...) at its top, but uses it only to write a docstring for a dataclass that has none
(`inspect.signature`). That import was most of what `dataclasses` cost a gate process: ~34M of
its ~40M instructions, ~10 ms of CPU in every gate step that imports a module with a dataclass
(about half of a verify's gate steps, each a fresh interpreter). Here `dataclasses` is imported
with a stand-in `inspect` module that imports the real one on its first attribute read, so a
gate pays for `inspect` only if a dataclass without a docstring is made (every dataclass of the
sandbox has one: tests/test_gates_dataclasses.py) or some code reads it.

Stdlib only, like the rest of the sandbox. When `dataclasses` or `inspect` is already imported
(the test suite, the engine) this changes nothing.
"""

from __future__ import annotations

import sys
import types


class _Inspect(types.ModuleType):
    """Stands for `inspect` inside `dataclasses`: the real module, imported on first use."""

    def __getattr__(self, name: str) -> object:
        if sys.modules.get("inspect") is self:
            del sys.modules["inspect"]
        return getattr(__import__("inspect"), name)


def _import_dataclasses() -> None:
    if "dataclasses" in sys.modules or "inspect" in sys.modules:
        return
    stub = _Inspect("inspect")
    sys.modules["inspect"] = stub
    try:
        import dataclasses  # noqa: F401 (binds the stand-in as dataclasses.inspect)
    finally:
        if sys.modules.get("inspect") is stub:
            del sys.modules["inspect"]


_import_dataclasses()

from dataclasses import dataclass, field  # noqa: E402

__all__ = ["dataclass", "field"]
