"""The resolved graph that flows between modules (after loading, includes, validation).

Plain frozen dataclasses, typed: pipeline files are validated as they are read (engine/spec.py,
pydantic), and what they resolve to is held here, so a run whose graph comes from the load cache
(engine/loadcache.py) imports and validates nothing it does not use (no pydantic).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

ParamType = Literal["string", "int", "bool", "float", "path", "strings", "paths"]


@dataclass(frozen=True, kw_only=True)
class Param:
    """A kind's parameter (engine/spec.py ParamSpec, as validated)."""

    type: ParamType
    default: Any = None
    required: bool = False
    description: str = ""


@dataclass(frozen=True, kw_only=True)
class NixConfig:
    """The graph's `[nix]` settings, merged over its files (engine/spec.py NixSettings), the
    package set resolved to its path."""

    package_set: str | None = None
    package_set_exclude: list[str] = field(default_factory=list)
    extra_sandbox_paths: list[str] = field(default_factory=list)
    # what is behind those paths now (engine/hostpaths.py; None: no paths): in every step's key
    # and every derivation's TRACE_SANDBOX_PATHS attribute
    sandbox_identity: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    jobs: int | None = None


@dataclass(frozen=True, kw_only=True)
class Kind:
    """A kind: its template (path, text, digest), its params, whether its steps are checked."""

    name: str
    template_path: Path
    template_text: str
    template_digest: str
    params: dict[str, Param]
    check: bool
    source: Path
    inputs: dict[str, InputRef] = field(default_factory=dict)  # every step's, unless its own


@dataclass(frozen=True, kw_only=True)
class InputRef:
    """An input file or tree: its path, as written (`rel`), and the digest loading took of it."""

    path: Path
    rel: str
    digest: str


@dataclass(frozen=True, kw_only=True)
class Step:
    """A step, resolved: its needs, inputs and params (`path_params`: paths as keys see them)."""

    id: str
    base_id: str
    kind: str
    needs: tuple[str, ...]
    needs_base: dict[str, tuple[str, ...]]
    inputs: dict[str, InputRef]
    params: dict[str, Any]
    path_params: dict[str, Any]
    repeat_index: int | None
    check: bool
    source: Path
    line: int | None = None


@dataclass(frozen=True, kw_only=True)
class Graph:
    """A loaded graph: its kinds, its steps in build order, its `[nix]` settings, what it read."""

    root: Path
    entry: Path
    files: tuple[Path, ...]
    kinds: dict[str, Kind]
    steps: dict[str, Step]
    order: tuple[str, ...]
    nix: NixConfig
    package_set: InputRef | None
    variant: str | None = None
    # each pipeline file with the sha256 of the bytes loading read
    sources: tuple[tuple[Path, str], ...] = ()
    # every file and tree loading read (pipeline files, templates, inputs, the package set),
    # each with the paths left out of it: what the no-op fast path stats
    reads: tuple[tuple[Path, tuple[str, ...]], ...] = ()
