"""Typed models of pipeline files as written (pydantic: strict validation, JSON Schema).

A pipeline file declares step *kinds* (template + typed parameters) and *steps* (instances of a
kind with parameters, the steps they need and the files they read). `trace schema` exports
`PipelineFile.model_json_schema()` for TOML editors. Loading (engine/graph.py) validates files
with these and resolves them into the graph of engine/graphtypes.py, which flows onward.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from engine.graphtypes import ParamType
from engine.specrules import FORBIDDEN_OPTIONS as FORBIDDEN_OPTIONS  # re-exported: its old home
from engine.specrules import ID_RE, MAX_REPEAT, numeric_option_problem
from engine.specrules import MAX_STEPS as MAX_STEPS
from engine.specrules import NUMERIC_OPTIONS as NUMERIC_OPTIONS


class FileModel(BaseModel):
    """A model of what a file says: types are strict (`repeat = true` or `jobs = "2"` are
    refused, not converted)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, defer_build=True)


class VarRef(FileModel):
    """`{ var = "candidate.package" }`: a value from the run's context (e.g. a candidate)."""

    var: str = Field(description="Dotted name of a context value, e.g. candidate.patches.")


class ParamSpec(FileModel):
    type: ParamType = Field(description="string, int, bool, float, path, strings or paths.")
    default: Any = Field(default=None, description="Value used when a step does not set it.")
    required: bool = Field(default=False, description="A step must set it (no default).")
    description: str = ""


class KindSpec(FileModel):
    template: str = Field(description="jinja2 template rendering a Nix expression (.nix.j2).")
    description: str = ""
    params: dict[str, ParamSpec] = Field(default_factory=dict)
    inputs: dict[str, str] = Field(
        default_factory=dict,
        description="Default inputs: files or trees every step of this kind reads, by name "
        "(path relative to this file; `trace:` = trace's data). A step's own input of the same "
        "name replaces one.",
    )
    check: bool = Field(
        default=False,
        description="Rebuild each new result once with `--check` and record whether it differed.",
    )


class StepSpec(FileModel):
    kind: str = Field(description="Name of a declared kind.")
    needs: list[str] = Field(default_factory=list, description="Ids of steps this one uses.")
    inputs: dict[str, str | VarRef] = Field(
        default_factory=dict,
        description="Files or trees the step reads, by name (path relative to this file).",
    )
    params: dict[str, Any] = Field(default_factory=dict)
    repeat: Annotated[int, Field(ge=1, le=MAX_REPEAT)] | VarRef = Field(
        default=1,
        description=f"Run as N independent steps id@1..id@N (1 to {MAX_REPEAT}), e.g. repeated "
        "reproducer runs.",
    )
    check: bool | None = Field(default=None, description="Override the kind's `check`.")
    description: str = ""


class NixSettings(FileModel):
    package_set: Annotated[str, Field(min_length=1)] | VarRef | None = Field(
        default=None,
        description="Directory (or .nix file) of the package set; templates get "
        "`pkgs = import <package_set> {}`. In a nixpkgs fork: its root.",
    )
    package_set_exclude: list[str] = Field(
        default_factory=list,
        description="Paths (relative to the package set, e.g. `trace`) left out of its digest: "
        "files the package set itself never reads, such as candidates, whose own digests "
        "already enter the steps that use them.",
    )
    extra_sandbox_paths: list[str] = Field(default_factory=list)
    options: dict[str, str] = Field(
        default_factory=dict,
        description="Extra `--option`s (not the sandbox ones: trace always builds sandboxed; "
        "use extra_sandbox_paths for paths the sandbox needs).",
    )
    jobs: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="Parallel builds (`-j`), 1 or more; unset: one per core."
    )

    @field_validator("options")
    @classmethod
    def _numeric_options(cls, value: dict[str, str]) -> dict[str, str]:
        problem = numeric_option_problem(value)  # engine/specrules.py
        if problem is not None:
            raise ValueError(problem)
        return value


class PipelineFile(FileModel):
    """One TOML file as written."""

    version: Literal[1] = 1

    @field_validator("version", mode="before")
    @classmethod
    def _integer_version(cls, value: Any) -> Any:
        # Literal[1] alone takes true and 1.0 (both == 1): the version is the integer 1
        if type(value) is not int:
            raise ValueError("version must be the integer 1 (not a boolean, float or string)")
        return value

    include: list[str] = Field(default_factory=list, description="Other pipeline files.")
    nix: NixSettings | None = None
    kinds: dict[str, KindSpec] = Field(default_factory=dict)
    steps: dict[str, StepSpec] = Field(default_factory=dict)

    @field_validator("steps", "kinds")
    @classmethod
    def _ids(cls, value: dict[str, Any]) -> dict[str, Any]:
        for name in value:
            if not ID_RE.match(name):
                raise ValueError(
                    f"'{name}' is not a valid name: use letters, digits, '_' and '-', "
                    "starting with a letter"
                )
        return value
