"""The `trace` command line. Parsers are cheap; each handler imports what it needs lazily.

Exit codes: 0 ok; 1 a step failed or a claim/policy did not hold; 2 bad input or usage;
3 the state directory is busy (another trace holds it).

Every command is a module here, engine/cli/<command>.py: its parser (`register(subparsers)`) and
a short handler that calls the library and prints what it returns. The library (everything else
under engine/) never imports engine.cli (tests/test_layers.py).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence

from engine import __version__
from engine.errors import TraceError

# trace uses no pydantic plugins; without this, pydantic scans every installed package's entry
# points on first import (~15 ms of every command).
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

Handler = Callable[[argparse.Namespace], int]

# One module per command, engine/cli/<command>.py, each with a `register(subparsers) -> None` that
# adds its parser (and sets `handler` via set_defaults). `trace COMMAND ...` imports only COMMAND's
# module: importing every module costs a few hundred milliseconds per call. tests/test_cli.py
# checks this table against what each module really registers. The order is `trace --help`'s.
COMMANDS: tuple[str, ...] = (
    "run",
    "plan",
    "graph",
    "schema",
    "gc",
    "bundle",
    "keygen",
    "verify-bundle",
    "route",
    "decide",
    "waive",
    "verify",
    "mutants",
    "fork",
    "report",
    "draft",
    "scout",
    "land",
    "init",
    "push",
)
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    f"engine.cli.{name.replace('-', '_')}": (name,) for name in COMMANDS
}


def module_of(command: str) -> str | None:
    """The module that registers `command`, or None for an unknown name."""
    for module, names in COMMAND_MODULES.items():
        if command in names:
            return module
    return None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or (given a known `command`) one with only that command's module."""
    parser = argparse.ArgumentParser(
        prog="trace",
        description="Build content-addressed Nix step graphs and turn fix claims into evidence.",
        epilog="Exit codes: 0 ok, 1 a step failed or a claim did not hold, 2 bad input or usage, "
        "3 state directory busy.",
    )
    parser.add_argument("--version", action="version", version=f"trace {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    only = module_of(command) if command is not None else None
    for name in [only] if only is not None else COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["run"]:
        # A no-op `trace run` is answered from file stats alone (engine/fastpath.py).
        from engine.fastpath import try_noop

        rc = try_noop(args_list)
        if rc is not None:
            return rc
    parser = build_parser(args_list[0] if args_list else None)
    args = parser.parse_args(args_list)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        return handler(args)
    except TraceError as exc:
        print(f"trace: error: {exc.render()}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("trace: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `trace schema | head`
        sys.stderr.close()
        return 0
