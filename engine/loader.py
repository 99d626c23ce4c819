"""One strict loader for every file trace reads: bytes -> BOM -> UTF-8 -> TOML or JSON -> depth
guard -> pydantic, each failure an input error naming the file, the line, the key and what to do.

- A path is opened as a **regular file only**: a directory, a FIFO, a device, a socket, a file
  under /proc or /sys, a symlink loop or a path through a file is refused before any byte is
  read (`O_NONBLOCK`, so a FIFO never blocks the open; the type is checked again on the open
  descriptor, so a swap between the check and the open is caught too).
- At most `MAX_BYTES` (16 MiB) are read; a larger file is refused (pipeline, candidate, policy,
  agent and machine files are a few kilobytes; patches and advisories well under a megabyte).
- Text is UTF-8, strictly, with a leading byte-order mark dropped; anything else (UTF-16,
  Latin-1) is refused with the byte, its offset and its line.
- Parsed values nest at most `MAX_DEPTH` (64) tables/arrays deep, checked without recursion
  before pydantic sees them; a parser's own RecursionError is the same error.
- Validation is pydantic's (the models are strict); the first error names the key as the file
  spells it, its line, and for an unknown key the closest known one ("did you mean").
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import tomli

from engine.errors import InputError

if TYPE_CHECKING:  # pydantic is imported when validating: the load cache's hot path needs none
    from pydantic import BaseModel, ValidationError

MAX_BYTES = 16 << 20
MAX_DEPTH = 64
_REFUSED_ROOTS = ("/proc", "/sys")

M = TypeVar("M", bound="BaseModel")


class Document:
    """A parsed file: where it lies, its text (for line numbers), its data and its digest (a
    plain class: a dataclass costs ~2-4M instructions to make at import, issue 30)."""

    __slots__ = ("data", "digest", "path", "text")

    def __init__(self, path: Path, text: str, data: Any, digest: str) -> None:
        self.path, self.text, self.data = path, text, data
        self.digest = digest  # sha256 of the bytes read


def _kind(mode: int) -> str | None:
    """What a non-regular file is, for the message (None for a regular file)."""
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    for test, name in kinds:
        if test(mode):
            return name
    return None if stat.S_ISREG(mode) else "not a regular file"


_ERRNO = {
    errno.ENOENT: ("{what} not found", "check the path"),
    errno.ELOOP: ("is a symlink loop", "point the symlink at a real file"),
    errno.ENOTDIR: ("a parent of this path is a file, not a directory", "check the path"),
    errno.EACCES: ("permission denied", "make the file readable"),
    errno.ENAMETOOLONG: ("the file name is too long", "use a shorter path"),
}


def _os_error(exc: OSError, path: Path, what: str, error: type[InputError]) -> InputError:
    msg, hint = _ERRNO.get(exc.errno or 0, (f"cannot read the {what}: {exc.strerror}", None))
    return error(msg.format(what=what), file=path, hint=hint)


def _not_regular(kind: str, path: Path, what: str, error: type[InputError]) -> InputError:
    hint = (
        "name the file itself"
        if kind == "a directory"
        else "trace reads only regular files: copy the content into a file"
    )
    return error(f"is {kind}, not a {what}", file=path, hint=hint)


def _refused_root(path: Path) -> bool:
    real = os.path.realpath(path)
    return any(real == r or real.startswith(r + "/") for r in _REFUSED_ROOTS)


def check_regular(path: Path, what: str = "file", *, error: type[InputError] = InputError) -> None:
    """Refuse anything but a regular file (without opening it), naming `path` as given: call it
    before resolving symlinks so the message names the user's own path."""
    try:
        kind = _kind(os.stat(path).st_mode)
    except OSError as exc:
        raise _os_error(exc, path, what, error) from None
    except ValueError:  # an embedded NUL
        raise error("the path holds a NUL character", file=repr(str(path))) from None
    if kind is None and _refused_root(path):
        kind = "a kernel file (/proc, /sys)"
    if kind is not None:
        raise _not_regular(kind, path, what, error)


NAME_MAX = 255  # bytes in one path component (Linux)
PATH_MAX = 4096  # bytes in a whole path


def check_path(
    path: Path, what: str, *, key: str | None = None, error: type[InputError] = InputError
) -> None:
    """Refuse up front a path trace could not record or use: not UTF-8 (it goes into JSON,
    SQLite and Nix expressions), or longer than the file system allows."""
    text = os.fspath(path)
    shown = text.encode("utf-8", "backslashreplace").decode("utf-8")
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError:
        raise error(
            f"the {what} path is not valid UTF-8",
            file=shown,
            key=key,
            hint="rename it using UTF-8 characters: trace records paths in JSON, SQLite and Nix",
        ) from None
    if len(raw) > PATH_MAX or any(len(part) > NAME_MAX for part in raw.split(b"/")):
        raise error(
            f"the {what} path is too long (at most {NAME_MAX} bytes a name, {PATH_MAX} in all)",
            file=shown[:200] + "...",
            key=key,
            hint="use a shorter path",
        )


def resolve(path: Path) -> Path:
    """`path` made absolute with symlinks followed; a symlink loop stays as written (reading it
    then fails with a clear error, where `Path.resolve` raises RuntimeError)."""
    return Path(os.path.realpath(path))


def read_bytes(
    path: Path, what: str = "file", cap: int = MAX_BYTES, *, error: type[InputError] = InputError
) -> bytes:
    """The bytes of a regular file (at most `cap`), or an input error naming it."""
    check_path(path, what, error=error)
    check_regular(path, what, error=error)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise _os_error(exc, path, what, error) from None
    try:
        kind = _kind(os.fstat(fd).st_mode)
        if kind is not None:  # swapped after the stat
            raise _not_regular(kind, path, what, error)
        return _read_capped(fd, path, what, cap, error)
    except OSError as exc:
        raise _os_error(exc, path, what, error) from None
    finally:
        os.close(fd)


def _read_capped(fd: int, path: Path, what: str, cap: int, error: type[InputError]) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while chunk := os.read(fd, min(1 << 20, cap + 1 - size)):
        chunks.append(chunk)
        size += len(chunk)
        if size > cap:
            raise error(
                f"the {what} is larger than {cap} bytes",
                file=path,
                hint="a file trace reads is small; check that this is the right file",
            )
    return b"".join(chunks)


def decode(
    data: bytes, path: Path, what: str = "file", error: type[InputError] = InputError
) -> str:
    """UTF-8 text without a leading byte-order mark; bad bytes are refused with offset and line."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        utf16 = data[:2] in (b"\xff\xfe", b"\xfe\xff") or b"\x00" in data[:64]
        raise error(
            f"not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start}"
            + (" (it looks like UTF-16)" if utf16 else ""),
            file=path,
            line=line,
            hint=f"save the {what} as UTF-8",
        ) from None
    return text.removeprefix("\ufeff")


def read_text(
    path: Path, what: str = "file", cap: int = MAX_BYTES, *, error: type[InputError] = InputError
) -> str:
    return decode(read_bytes(path, what, cap, error=error), path, what, error)


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Does `value` nest dicts/lists deeper than `limit`? (iterative: any depth is safe)"""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return False


def _deep(path: Path, what: str, error: type[InputError]) -> InputError:
    return error(
        f"nested too deeply (more than {MAX_DEPTH} levels of tables and arrays)",
        file=path,
        hint=f"a {what} needs only a few levels; flatten it",
    )


def parse_toml(text: str, path: Path, what: str, error: type[InputError] = InputError) -> Any:
    try:
        data = tomli.loads(text)
    except tomli.TOMLDecodeError as exc:
        raise error(
            f"TOML syntax error: {getattr(exc, 'msg', exc)}",
            file=path,
            line=getattr(exc, "lineno", None),
            hint="fix the TOML syntax at that line",
        ) from None
    except RecursionError:
        raise _deep(path, what, error) from None
    if too_deep(data):
        raise _deep(path, what, error)
    return data


def parse_json(text: str, path: Path, what: str, error: type[InputError] = InputError) -> Any:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(
            f"invalid JSON: {exc.msg} (column {exc.colno})",
            file=path,
            line=exc.lineno,
            hint="fix the JSON syntax at that line",
        ) from None
    except RecursionError:
        raise _deep(path, what, error) from None
    if too_deep(data):
        raise _deep(path, what, error)
    return data


def read_document(
    path: Path,
    what: str,
    *,
    error: type[InputError] = InputError,
    cap: int = MAX_BYTES,
    fmt: Literal["toml", "json"] = "toml",
) -> Document:
    """A TOML (or JSON) file, parsed and depth-checked."""
    raw = read_bytes(path, what, cap, error=error)
    text = decode(raw, path, what, error)
    parse = parse_json if fmt == "json" else parse_toml
    return Document(path, text, parse(text, path, what, error), hashlib.sha256(raw).hexdigest())


def load(
    path: Path,
    model: type[M],
    what: str,
    *,
    error: type[InputError] = InputError,
    fmt: Literal["toml", "json"] = "toml",
    hint: str | None = None,
) -> M:
    """`path` read, parsed and validated as `model`, or an input error naming file and key."""
    doc = read_document(path, what, error=error, fmt=fmt)
    return validate(model, doc, what, hint=hint, error=error)


# --- validation errors: the key as the file spells it, its line, and "did you mean"


def _key_parts(raw: str) -> list[str]:
    """Dotted TOML key -> parts, with quoted parts unquoted (`a."b.c"` -> [a, b.c])."""
    parts = re.findall(r'"((?:[^"\\]|\\.)*)"|\'([^\']*)\'|([A-Za-z0-9_-]+)', raw)
    return [q1 or q2 or bare for q1, q2, bare in parts]


def key_lines(text: str) -> dict[tuple[str, ...], int]:
    """Map each key path (array-of-table entries indexed: ("rules", "2", "state")) to its line.

    Line based and best effort: enough to point at headers and `key = value` lines. Keys inside
    inline tables resolve to the inline table's line.
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
            plain = (*with_indices(parts[:-1]), parts[-1])
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
    import difflib  # only for an error's hint: not on every run's import path

    found = difflib.get_close_matches(name, options, n=1, cutoff=0.5)
    return found[0] if found else None


def _submodel(ann: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation (`X`, `list[X]`, `dict[str, X]`, `X | None`)."""
    from pydantic import BaseModel

    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    for arg in getattr(ann, "__args__", ()):
        found = _submodel(arg)
        if found is not None:
            return found
    return None


def known_keys(model: type[BaseModel], loc: tuple[str | int, ...]) -> list[str]:
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


_TAGS = frozenset({"int", "str", "bool", "float", "list", "dict", "none"})


def _is_tag(part: int | str) -> bool:
    """A step pydantic adds to a location: a union member or a validator, not a key."""
    text = str(part)
    return "[" in text or text.startswith(("function-", "constrained-")) or text in _TAGS


def _file_loc(loc: tuple[int | str, ...], data: Any) -> tuple[int | str, ...]:
    """The parts of a pydantic location the file spells (union members and validators out)."""
    keys: list[int | str] = []
    cur = data
    for part in loc:
        if isinstance(cur, dict) and str(part) in cur:
            cur = cur[str(part)]
        elif isinstance(cur, list) and isinstance(part, int) and 0 <= part < len(cur):
            cur = cur[part]
        elif _is_tag(part) or (isinstance(part, str) and part[:1].isupper()):
            continue
        else:
            cur = None  # a key the file lacks (missing) or has wrong (extra): the last one
        keys.append(part)
    return tuple(keys)


def _union_pick(errors: list[Any], data: Any) -> Any:
    """Of the errors at the first error's key (one per union member), the one that is not just
    "wrong type" (`exit_code = []`: "at least 1 item", not "should be a valid integer")."""
    first = _file_loc(errors[0]["loc"], data)
    same = [e for e in errors if _file_loc(e["loc"], data) == first]
    return next((e for e in same if not str(e["type"]).endswith("_type")), errors[0])


def validation_error(
    exc: ValidationError,
    model: type[BaseModel],
    *,
    path: Path,
    text: str,
    data: Any = None,
    hint: str,
    error: type[InputError] = InputError,
) -> InputError:
    """The first error of `exc` (a misspelt key before the "missing" it causes), located."""
    errors = exc.errors()
    err = next((e for e in errors if e["type"] == "extra_forbidden"), None) or _union_pick(
        errors, data
    )
    loc = _file_loc(err["loc"], data)
    msg = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "extra_forbidden" and loc:
        name = str(loc[-1])
        msg = f"unknown key '{name}'"
        guess = closest(name, known_keys(model, loc))
        hint = (f"did you mean '{guess}'? " if guess else f"remove '{name}'; ") + hint
    elif err["type"] == "missing":
        msg = "required key is missing"
        hint = f"add '{loc[-1]}'; {hint}" if loc else hint
    key = ".".join(str(p) for p in loc) or None
    return error(msg, file=path, key=key, line=find_line(text, loc) if loc else None, hint=hint)


def validate(
    model: type[M],
    doc: Document,
    what: str,
    *,
    hint: str | None = None,
    error: type[InputError] = InputError,
) -> M:
    from pydantic import ValidationError

    try:
        return model.model_validate(doc.data)
    except ValidationError as exc:
        raise validation_error(
            exc,
            model,
            path=doc.path,
            text=doc.text,
            data=doc.data,
            hint=hint or f"see the {what} format in docs/",
            error=error,
        ) from None
