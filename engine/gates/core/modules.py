"""Load a stdlib-only script the pipeline hands a gate (the reproducer harness, the expectation
gate's rules) as a module, from its store path: the gate runs the very code the verify steps
run, not a copy of it."""

from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType


def load_module(name: str, path: str, what: str) -> ModuleType:
    """`path`: a .py file, or a directory of modules run as `python3 DIR` (DIR/__main__.py,
    its siblings importable)."""
    if os.path.isdir(path):
        sys.path.insert(0, path)
        path = os.path.join(path, "__main__.py")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {what} {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
