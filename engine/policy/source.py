"""Reading policy files: TOML in, a validated pydantic model out, or a `PolicyError` that names
the file, the key, the line and what to do.

Every policy file starts with a `[policy]` header (name, version, schema). The file's sha256
(of its exact bytes) goes into decision records, so a decision names exactly what it applied.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.errors import PolicyError
from engine.loader import closest as closest
from engine.loader import find_line as find_line
from engine.loader import key_lines as key_lines
from engine.loader import read_document, validation_error
from engine.paths import PREFIX, data_dir

VERSION_RE = r"^[0-9]+(\.[0-9]+)*$"


class Strict(BaseModel):
    """Unknown keys are errors; no lax coercion ("yes" is not a boolean, "1" not a number)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class PolicyHeader(Strict):
    """The `[policy]` table every policy file starts with."""

    name: str = Field(pattern=r"^[a-z][a-z0-9-]*$", description="stable name of this policy")
    version: str = Field(
        pattern=VERSION_RE, description="bump on every change that can change a decision"
    )
    schema_: str = Field(alias="schema", description="file format, e.g. trace.routing/v1")
    description: str = ""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, populate_by_name=True)


class PolicyRef(Strict):
    """Which policy file a decision applied: name, version and the sha256 of its bytes."""

    name: str
    version: str
    digest: str = Field(description="sha256 of the policy file's bytes")
    path: str = Field(description="path as given (informational; not part of identity)")


M = TypeVar("M", bound=BaseModel)


def read_toml(path: Path, *, what: str) -> tuple[str, dict[str, Any], str]:
    """(text, data, sha256) of a TOML file (engine/loader.py's rules), or a PolicyError naming
    the file and line."""
    doc = read_document(path, what, error=PolicyError)
    return doc.text, doc.data, doc.digest


def load_policy(path: Path, model: type[M], *, schema: str, what: str) -> tuple[M, str, str]:
    """A policy file read (engine/loader.py's rules), validated as `model` and its `[policy]`
    header's schema checked: (the model, the text, the sha256 of its bytes), or a PolicyError
    naming the file, the key and the line."""
    text, data, digest = read_toml(path, what=what)
    spec = validate(model, data, path=path, text=text, what=what)
    check_schema(PolicyHeader.model_validate(data["policy"]), schema, path=path, text=text)
    return spec, text, digest


def validate(model: type[M], data: dict[str, Any], *, path: Path, text: str, what: str) -> M:
    """Validate `data` against `model`; the first error becomes a located PolicyError."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_error(
            exc,
            model,
            path=path,
            text=text,
            data=data,
            hint=f"see `docs/policy.md` for the {what} format",
            error=PolicyError,
        ) from None


def check_schema(header: PolicyHeader, expected: str, *, path: Path, text: str) -> None:
    if header.schema_ != expected:
        raise PolicyError(
            f"unknown policy schema '{header.schema_}' (this engine reads '{expected}')",
            file=path,
            key="policy.schema",
            line=find_line(text, ("policy", "schema")),
            hint=f'set schema = "{expected}" or use an engine that reads this schema',
        )


def ref(header: PolicyHeader, path: Path, digest: str) -> PolicyRef:
    """The file's identity; shipped files are named `trace:policy/...` (machine-independent)."""
    shown = str(path)
    with contextlib.suppress(ValueError):
        shown = PREFIX + path.resolve().relative_to(data_dir()).as_posix()
    return PolicyRef(name=header.name, version=header.version, digest=digest, path=shown)


def require_unique(
    values: list[str],
    *,
    table: str,
    field: str,
    what: str,
    verb: str,
    path: Path,
    text: str,
    hint: str,
) -> None:
    """Refuse the second occurrence of a value in `[[table]] field = ...` (file, key, line)."""
    seen: set[str] = set()
    for i, value in enumerate(values):
        if value in seen:
            raise PolicyError(
                f"{what} '{value}' {verb}",
                file=path,
                key=f"{table}.{i}.{field}",
                line=find_line(text, (table, i, field)),
                hint=hint,
            )
        seen.add(value)
