"""Reading policy files: TOML in, a validated pydantic model out, or a `PolicyError` that names
the file, the key, the line and what to do.

Every policy file starts with a `[policy]` header (name, version, schema). The file's sha256
(of its exact bytes) goes into decision records, so a decision names exactly what it applied.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import re
from pathlib import Path
from typing import Any, TypeVar

import tomli
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.errors import PolicyError
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


def _key_parts(raw: str) -> list[str]:
    """Dotted TOML key -> parts, with quoted parts unquoted (`a."b.c"` -> [a, b.c])."""
    parts = re.findall(r'"((?:[^"\\]|\\.)*)"|\'([^\']*)\'|([A-Za-z0-9_-]+)', raw)
    return [q1 or q2 or bare for q1, q2, bare in parts]


def key_lines(text: str) -> dict[tuple[str, ...], int]:
    """Map each key path (array-of-table entries indexed: ("rules", "2", "state")) to its line.

    Line based and best effort: enough to point at headers and `key = value` lines, which is
    where policy authors look. Keys inside inline tables resolve to the inline table's line.
    """
    out: dict[tuple[str, ...], int] = {}
    counters: dict[tuple[str, ...], int] = {}
    current: tuple[str, ...] = ()

    def with_indices(parts: list[str]) -> tuple[str, ...]:
        path: list[str] = []
        for part in parts:
            path.append(part)
            if tuple(path) in counters:
                path.append(str(counters[tuple(path)]))
        return tuple(path)

    for no, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if m := re.match(r"^\[\[\s*([^\]]+?)\s*\]\]", stripped):
            parts = _key_parts(m.group(1))
            parent = with_indices(parts[:-1])
            plain = (*parent, parts[-1])
            counters[plain] = counters.get(plain, -1) + 1
            current = (*plain, str(counters[plain]))
            out.setdefault(plain, no)
            out[current] = no
        elif m := re.match(r"^\[\s*([^\]]+?)\s*\]", stripped):
            current = with_indices(_key_parts(m.group(1)))
            out.setdefault(current, no)
        elif m := re.match(r"""^((?:"[^"]*"|'[^']*'|[A-Za-z0-9_.\s-])+?)\s*=""", stripped):
            out.setdefault((*current, *_key_parts(m.group(1))), no)
    return out


def find_line(text: str, loc: tuple[str | int, ...] | list[str | int]) -> int | None:
    """Line of the longest prefix of `loc` that the file spells out."""
    lines = key_lines(text)
    keys = tuple(str(p) for p in loc)
    for n in range(len(keys), 0, -1):
        if keys[:n] in lines:
            return lines[keys[:n]]
    return None


def closest(name: str, options: list[str]) -> str | None:
    found = difflib.get_close_matches(name, options, n=1, cutoff=0.5)
    return found[0] if found else None


def _submodel(ann: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation (`X`, `list[X]`, `dict[str, X]`, `X | None`)."""
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    for arg in getattr(ann, "__args__", ()):
        found = _submodel(arg)
        if found is not None:
            return found
    return None


def _known_keys(model: type[BaseModel], loc: tuple[str | int, ...]) -> list[str]:
    """The keys a model accepts at the parent of `loc` (for 'did you mean' hints)."""
    current: type[BaseModel] | None = model
    for part in loc[:-1]:
        if current is None:
            return []
        field = current.model_fields.get(str(part))
        if field is None:
            continue  # a list index or a dict key: stay on the same model
        current = _submodel(field.annotation)
    if current is None:
        return []
    return [f.alias or name for name, f in current.model_fields.items()]


def read_toml(path: Path, *, what: str) -> tuple[str, dict[str, Any], str]:
    """(text, data, sha256) of a TOML file, or a PolicyError naming the file and line."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise PolicyError(
            f"{what} not found", file=path, hint="check the path or pass the right file"
        ) from None
    except OSError as exc:
        raise PolicyError(f"cannot read {what}: {exc.strerror}", file=path) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise PolicyError(f"{what} is not UTF-8 text", file=path, hint="save it as UTF-8") from None
    try:
        data = tomli.loads(text)
    except tomli.TOMLDecodeError as exc:
        msg = getattr(exc, "msg", str(exc))
        raise PolicyError(
            f"TOML syntax error: {msg}",
            file=path,
            line=getattr(exc, "lineno", None),
            hint="fix the TOML syntax at that line",
        ) from None
    return text, data, hashlib.sha256(raw).hexdigest()


def validate(model: type[M], data: dict[str, Any], *, path: Path, text: str, what: str) -> M:
    """Validate `data` against `model`; the first error becomes a located PolicyError."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        # a misspelt key also makes the right one "missing": report the misspelling
        err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
        loc = tuple(
            p for p in err["loc"] if isinstance(p, int) or not str(p).startswith("function-")
        )
        key = ".".join(str(p) for p in loc) or None
        hint = f"see `docs/policy.md` for the {what} format"
        msg = err["msg"]
        if err["type"] == "extra_forbidden" and loc:
            name = str(loc[-1])
            msg = f"unknown key '{name}'"
            guess = closest(name, _known_keys(model, loc))
            hint = (f"did you mean '{guess}'? " if guess else f"remove '{name}'; ") + hint
        elif err["type"] == "missing":
            msg = "required key is missing"
            hint = f"add '{loc[-1]}'; {hint}" if loc else hint
        raise PolicyError(
            msg, file=path, key=key, line=find_line(text, loc) if loc else None, hint=hint
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
