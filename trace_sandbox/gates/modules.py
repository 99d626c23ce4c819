"""Load what the pipeline hands a gate: a stdlib-only script (the expectation gate's rules) as
a module, from its store path, so the gate runs the very code the verify steps run, not a copy
of it; and the JSON records of upstream steps."""

from __future__ import annotations

import importlib.util
import json
from types import ModuleType

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def load_module(name: str, path: str, what: str) -> ModuleType:
    """`path`: a stdlib-only .py file the pipeline hands the gate (the mutation gate's judge)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {what} {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load_json_object(path: str) -> dict[str, Any]:
    """A JSON record an upstream step wrote; anything but an object is an error."""
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a JSON object")
    return data
