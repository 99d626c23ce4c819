"""A recorded call as data: the program, its arguments (files among them by content), its stdin
and the environment variables it was given; and the reproducer script that replays it."""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Arg:
    """One argument: literal text, or (`file`) the name of a data file the call read."""

    text: str
    file: bool = False


@dataclass(frozen=True)
class Interaction:
    program: str  # a name in the package's bin/
    args: tuple[Arg, ...]
    files: tuple[tuple[str, bytes], ...]  # data files by name, in argument order
    stdin: bytes | None = None
    env: tuple[tuple[str, str], ...] = ()

    STDIN = "stdin.bin"

    def data(self) -> dict[str, bytes]:
        """Every file the reproducer's working directory gets: the named data and the stdin."""
        out = dict(self.files)
        if self.stdin is not None:
            out[self.STDIN] = self.stdin
        return out

    def with_file(self, name: str, content: bytes) -> Interaction:
        files = tuple((n, content if n == name else c) for n, c in self.files)
        return replace(self, files=files)

    def with_stdin(self, content: bytes) -> Interaction:
        return replace(self, stdin=content)

    def with_args(self, keep: tuple[int, ...]) -> Interaction:
        """Only the arguments at `keep` (indices); a data file no argument names is dropped."""
        args = tuple(self.args[i] for i in keep)
        named = {a.text for a in args if a.file}
        return replace(self, args=args, files=tuple((n, c) for n, c in self.files if n in named))

    def with_env(self, keep: tuple[int, ...]) -> Interaction:
        """Only the variables at `keep` (indices)."""
        return replace(self, env=tuple(self.env[i] for i in keep))

    def digest(self) -> str:
        doc = {
            "program": self.program,
            "args": [[a.text, a.file] for a in self.args],
            "files": {n: hashlib.sha256(c).hexdigest() for n, c in self.files},
            "stdin": None if self.stdin is None else hashlib.sha256(self.stdin).hexdigest(),
            "env": [list(e) for e in self.env],
        }
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()

    def size(self) -> int:
        """Bytes of input: every argument, data file, the stdin and each NAME=VALUE."""
        args = sum(len(a.text.encode()) for a in self.args if not a.file)
        env = sum(len(f"{n}={v}".encode()) for n, v in self.env)
        return args + env + sum(len(c) for c in self.data().values())


def command_line(call: Interaction) -> str:
    """The call as one shell command: environment assignments, the program under $TARGET, its
    arguments (data files by their name in the working directory), stdin from its file."""
    words = [f"{name}={shlex.quote(value)}" for name, value in call.env]
    words.append(f'"$TARGET/bin/{call.program}"')
    words += [shlex.quote(a.text) for a in call.args]
    if call.stdin is not None:
        words.append(f"< {call.STDIN}")
    return " ".join(words)


def repro_script(call: Interaction, note: str) -> str:
    """repro.sh: one comment line per `note` line, then the command."""
    comments = [f"# {line}".rstrip() for line in note.splitlines()]
    return "\n".join([*comments, command_line(call)]) + "\n"
