"""The pipeline files of a graph: read (bytes, UTF-8, TOML) and validated one by one, their
`include`s followed depth first, and the line of a key found for error messages. Loading them into
a graph is engine/graph.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import InputError
from engine.hashing import digest_bytes
from engine.loader import closest, decode, parse_toml, read_bytes, resolve
from engine.paths import data_dir, resolve_ref
from engine.plainfile import PlainFile, plain_file

if TYPE_CHECKING:  # pydantic is imported to validate a file (read_file), not to re-resolve a step
    from pydantic import ValidationError

    from engine.spec import PipelineFile


def find_line(text: str, dotted: list[str]) -> int | None:
    """Best-effort line of a dotted key in TOML text (headers and inline keys)."""
    lines = text.splitlines()
    for depth in range(len(dotted), 0, -1):
        head = r"\s*\.\s*".join(re.escape(p) for p in dotted[:depth])
        patterns = [rf"^\s*\[\[?\s*{head}\s*\]\]?\s*(#.*)?$", rf"^\s*{head}\s*="]
        if depth >= 2:
            tail = r"\s*\.\s*".join(re.escape(p) for p in dotted[depth - 1 : depth])
            patterns.append(rf"^\s*{tail}\s*=")
        for pat in patterns[:2]:
            for i, line in enumerate(lines, 1):
                if re.search(pat, line):
                    if depth == len(dotted):
                        return i
                    # find the remaining key below that header
                    rest = dotted[depth]
                    for j in range(i, len(lines)):
                        if re.match(rf"^\s*{re.escape(rest)}\s*=", lines[j]):
                            return j + 1
                        if j > i and lines[j].lstrip().startswith("["):
                            break
                    return i
    return None


def suggest(name: str, options: list[str], what: str) -> str:
    guess = closest(name, options)
    if guess:
        return f"did you mean '{guess}'?"
    known = ", ".join(sorted(options)) or "none"
    return f"declare the {what} first; known: {known}"


HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")


class File:
    def __init__(
        self,
        path: Path,
        text: str,
        spec: PipelineFile | PlainFile | None,
        digest: str,
        headers: dict[str, int] | None = None,
    ) -> None:
        self.path = path
        self.text = text
        self._spec = spec  # None: made to re-resolve steps of a file (engine/resident.py)
        self.digest = digest  # sha256 of the bytes read (engine/loadcache.py checks it)
        # dotted table name -> the line of its header (made from the text when first asked)
        self._headers = headers

    @property
    def spec(self) -> PipelineFile | PlainFile:
        """The file as validated (read_file); a File made without one has none to give."""
        if self._spec is None:
            raise AssertionError(f"{self.path} was not validated as a whole file")
        return self._spec

    def line(self, *dotted: str) -> int | None:
        """Line of a key, for error messages (a scan of the file: call it only when failing)."""
        return find_line(self.text, list(dotted))

    def header_line(self, *dotted: str) -> int | None:
        """Line of a `[table.header]`, from a map built once per file (cheap on every load)."""
        if self._headers is None:
            self._headers = {}
            for i, text in enumerate(self.text.splitlines(), 1):
                m = HEADER.match(text)
                if m:
                    name = ".".join(p.strip().strip('"') for p in m.group(1).split("."))
                    self._headers.setdefault(name, i)
        return self._headers.get(".".join(dotted))


def read_file(path: Path) -> File:
    """A pipeline file read and validated: plainly valid without pydantic (engine/plainfile.py),
    else by pydantic, whose first error is the message."""
    data = read_bytes(path, "pipeline file")
    text = decode(data, path, "pipeline file")
    raw = parse_toml(text, path, "pipeline file")
    spec = plain_file(raw) or _validated(raw, path, text)
    return File(path, text, spec, digest_bytes(data))


def _validated(raw: dict[str, Any], path: Path, text: str) -> PipelineFile:
    from pydantic import ValidationError

    from engine.spec import PipelineFile

    try:
        return PipelineFile.model_validate(raw)
    except ValidationError as exc:
        raise validation_error(exc, path, text, raw) from None


def validation_error(exc: ValidationError, path: Path, text: str, raw: Any) -> InputError:
    err = exc.errors()[0]
    # pydantic adds union members and validators to locations; keep the keys the file has
    keys: list[str] = []
    cur: Any = raw
    for part in err["loc"]:
        if isinstance(cur, Mapping) and str(part) in cur:
            keys.append(str(part))
            cur = cur[str(part)]
        elif isinstance(cur, list) and isinstance(part, int) and part < len(cur):
            cur = cur[part]
    hint = "see `trace schema` for the accepted keys and types"
    line = find_line(text, keys)
    msg = str(err["msg"])
    if err["type"] == "extra_forbidden":
        hint = f"remove or rename '{err['loc'][-1]}'; " + hint
    elif err["type"] == "value_error" and keys in (["steps"], ["kinds"]):
        m = re.search(r"'([^']*)' is not a valid name", msg)
        if m:  # the line of the offending [steps.<name>] / [kinds.<name>] header
            name = m.group(1)
            keys.append(name)
            for i, ln in enumerate(text.splitlines(), 1):
                if name in ln and (ln.lstrip().startswith("[") or "=" in ln):
                    line = i
                    break
        msg = msg.removeprefix("Value error, ")
        hint = "rename it (step and kind names are used in ids, store names and keys)"
    elif err["type"] in ("int_type", "bool_type", "string_type", "float_type"):
        hint = (
            f"write it as {err['type'].removesuffix('_type')} (no quotes around numbers); " + hint
        )
    return InputError(msg, file=path, key=".".join(keys) or None, line=line, hint=hint)


def load_files(entry: Path) -> list[File]:
    """The entry file and everything it includes, depth first, each file once."""
    files: list[File] = []
    seen: set[Path] = set()

    def visit(path: Path, stack: tuple[Path, ...]) -> None:
        if path in stack:
            chain = " -> ".join(str(p) for p in (*stack, path))
            raise InputError(
                f"include cycle: {chain}",
                file=path,
                key="include",
                hint="remove one of the includes",
            )
        if path in seen:
            return
        seen.add(path)
        f = read_file(path)
        for inc in f.spec.include:
            target = resolve_in(inc, f, "include")
            if target.is_dir() or not target.exists():
                is_dir = target.is_dir()
                raise InputError(
                    f"included file '{inc}' "
                    + (
                        f"is a directory ({target}), not a pipeline file"
                        if is_dir
                        else "does not exist"
                    ),
                    file=path,
                    key="include",
                    line=f.line("include"),
                    hint="name the .toml file itself"
                    if is_dir
                    else "fix the path (relative to this file)",
                )
            visit(target, (*stack, path))
        files.append(f)

    visit(resolve(entry), ())
    return files


def resolve_in(value: str, f: File, *key: str) -> Path:
    """`resolve_ref`, with a refused `trace:` reference located in the file that wrote it."""
    try:
        return resolve_ref(value, f.path.parent)
    except InputError as exc:
        raise InputError(
            exc.message, file=f.path, key=".".join(key), line=f.line(*key), hint=exc.hint
        ) from None


def shipped(path: Path) -> bool:
    return path.is_relative_to(data_dir())
