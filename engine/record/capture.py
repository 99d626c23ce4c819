"""The call `trace record -- PROGRAM ARGS…` names, captured as an Interaction before anything
runs: each argument that names an existing regular file becomes a data file (by content, under
its base name), the stdin given with `--stdin` is read whole, and only the environment variables
named with `--env` are kept. Everything text-like is redacted by the bundles' rules
(engine/evidence/redact.py) before it is written or run: what trace records is what it runs."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import UsageError
from engine.record.interaction import Arg, Interaction

MAX_INPUT = 1 << 24  # bytes: a recorded file or stdin larger than this is refused
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PROGRAM = re.compile(r"^[A-Za-z0-9+._-]+$")
STRIPPED = ("LD_", "PYTHON")  # the harness drops these from every target's environment


@dataclass
class Redactions:
    """How many matches of each redaction rule the capture replaced, per place (an argument,
    a file, the stdin, a variable)."""

    counts: dict[str, dict[str, int]] = field(default_factory=dict)

    def add(self, where: str, found: dict[str, int]) -> None:
        if found:
            self.counts[where] = dict(found)


def _redacted(data: bytes, where: str, seen: Redactions) -> bytes:
    """Text (UTF-8) with every rule applied; binary data is kept as it is (as in a bundle)."""
    from engine.evidence.redact import redact_text

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return data
    out, found = redact_text(text)
    seen.add(where, found)
    return out.encode("utf-8")


def program_name(program: str) -> str:
    """`cparse` or `bin/cparse` -> `cparse` (a name in the package's bin/)."""
    name = program.removeprefix("bin/")
    if not PROGRAM.match(name) or name in (".", ".."):
        raise UsageError(
            f"program {program!r} is not a name in the package's bin/",
            key="PROGRAM",
            hint="name the program as the package installs it, e.g. `-- cparse FILE`",
        )
    return name


def data_name(path: Path, taken: set[str]) -> str:
    """A store-safe file name for a captured file (its base name, made unique)."""
    base = re.sub(r"[^A-Za-z0-9+._-]", "_", path.name).lstrip(".") or "data"
    name, n = base, 2
    while name in taken or name == Interaction.STDIN:
        name = f"{n}-{base}"
        n += 1
    taken.add(name)
    return name


def _read(path: Path, what: str) -> bytes:
    if path.stat().st_size > MAX_INPUT:
        raise UsageError(
            f"{what} {path} is larger than {MAX_INPUT} bytes",
            hint="record a smaller input: a reproducer's data is copied into every run",
        )
    return path.read_bytes()


def capture_args(
    argv: list[str], cwd: Path, seen: Redactions
) -> tuple[list[Arg], list[tuple[str, bytes]]]:
    args: list[Arg] = []
    files: list[tuple[str, bytes]] = []
    taken: set[str] = set()
    for i, text in enumerate(argv, start=1):
        path = cwd / text if text else None
        if path is not None and path.is_dir():
            raise UsageError(
                f"argument {i} ({text!r}) is a directory",
                key="ARGS",
                hint="trace record captures files by content: pass the files the program reads",
            )
        if path is not None and path.is_file():
            name = data_name(path, taken)
            files.append((name, _redacted(_read(path, "file"), f"file {name}", seen)))
            args.append(Arg(name, file=True))
            continue
        out = _redacted(text.encode("utf-8", "surrogateescape"), f"argument {i}", seen)
        args.append(Arg(out.decode("utf-8", "surrogateescape")))
    return args, files


def capture_env(
    specs: list[str], environ: dict[str, str], seen: Redactions
) -> list[tuple[str, str]]:
    """`--env NAME` (its value here) or `--env NAME=VALUE`."""
    env: list[tuple[str, str]] = []
    for spec in specs:
        name, eq, value = spec.partition("=")
        if not ENV_NAME.match(name) or name.startswith(STRIPPED):
            raise UsageError(
                f"--env {spec!r}: not a variable trace can pass to the program",
                key="--env",
                hint="a NAME or NAME=VALUE; LD_* and PYTHON* never reach a target (the harness "
                "drops them)",
            )
        if not eq:
            if name not in environ:
                raise UsageError(
                    f"--env {name}: not set in this environment",
                    key="--env",
                    hint=f"set it, or give its value: --env {name}=VALUE",
                )
            value = environ[name]
        out = _redacted(value.encode("utf-8", "surrogateescape"), f"variable {name}", seen)
        env.append((name, out.decode("utf-8", "surrogateescape")))
    return env


def capture(
    program: str,
    argv: list[str],
    *,
    stdin: bytes | None = None,
    env: list[str] | None = None,
    cwd: Path | None = None,
) -> tuple[Interaction, Redactions]:
    """The call as data, redacted; bad input (a directory, an unset variable) refused here."""
    seen = Redactions()
    args, files = capture_args(argv, cwd or Path.cwd(), seen)
    variables = capture_env(env or [], dict(os.environ), seen)
    data = None if stdin is None else _redacted(stdin, "stdin", seen)
    if data is not None and len(data) > MAX_INPUT:
        raise UsageError(f"stdin is larger than {MAX_INPUT} bytes", key="--stdin")
    call = Interaction(program_name(program), tuple(args), tuple(files), data, tuple(variables))
    return call, seen
