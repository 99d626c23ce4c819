"""The `trace` command line. Parsers are cheap; each handler imports what it needs lazily.

Exit codes: 0 ok; 1 a step failed or a claim/policy did not hold; 2 bad input or usage;
3 the state directory is busy (another trace holds it); 4 Nix itself failed; 70 an internal error
(a bug in trace); 130 interrupted (SIGINT); 143 terminated (SIGTERM). docs/commands.md.

Every command is a module here, engine/cli/<command>.py: its parser (`register(subparsers)`) and
a short handler that calls the library and prints what it returns. The library (everything else
under engine/) never imports engine.cli (tests/test_layers.py).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import signal
import sys
from collections.abc import Callable, Sequence
from types import FrameType

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
    "watch",
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
    "record",
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
        "3 state directory busy, 4 Nix itself failed, 70 internal error (a bug in trace), "
        "130 interrupted, 143 terminated.",
    )
    parser.add_argument("--version", action="version", version=f"trace {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    only = module_of(command) if command is not None else None
    for name in [only] if only is not None else COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


# Exit codes of their own (docs/commands.md): an interrupt, a SIGTERM, and a bug in trace. Never 1,
# which says a claim did not hold; never 2, which says the input was bad.
EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_TERMINATED = 143  # 128 + SIGTERM
EXIT_INTERNAL = 70  # EX_SOFTWARE (sysexits.h)
BUG_HINT = (
    "this is a bug in trace, not in your input: please report it with the command line and "
    "this message (TRACE_DEBUG=1 prints the traceback)"
)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread like Ctrl-C so the same clean-ups run (locks released,
    child processes killed by subprocess.run, half-written drafts removed)."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise Terminated


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; every way it can end is an exit code (none is a traceback). Without
    `argv`, a trace process of its own (the console script), not a caller's main([...]): its
    collector is tuned at the start and the process ends here (`_leave`)."""
    if argv is not None:
        return _main(list(argv))
    _short_lived_gc()
    return _leave(_main(sys.argv[1:]))


def _main(argv: list[str]) -> int:
    restore = _install_sigterm()
    try:
        return _dispatch(argv)
    except TraceError as exc:
        print(f"trace: error: {exc.render()}", file=sys.stderr)
        return exc.exit_code
    except Terminated:
        print("trace: terminated", file=sys.stderr)
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        print("trace: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # e.g. `trace schema | head`
        sys.stderr.close()
        return 0
    except Exception as exc:  # the last resort: a bug, reported as one
        return _internal_error(exc)
    finally:
        restore()


def _short_lived_gc() -> None:
    """The cyclic garbage collector tuned for a process that builds a graph of thousands of small
    objects at once (the load cache's unpickled graph, the plan's per-step records): what is
    loaded so far (the interpreter's and trace's modules) is never traversed again (gc.freeze),
    and the generations are collected every 50,000 allocations (not 700) and every 20th time
    (not 10th): cycles are still collected, in bounded batches. On a one-step change at N=1000
    this saves ~22M of ~645M instructions, almost what turning the collector off would (~25M)
    (bench/README.md, cache30)."""
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)


def _leave(rc: int) -> int:
    """End a trace process of its own without the interpreter's teardown, which frees every
    object and module one by one: ~35 ms of the ~200 ms of Python in a first run of 100 steps
    (pydantic's schemas, the graph), more than anything else trace does after the build
    (docs/performance.md). As mypy's `hard_exit`: the atexit handlers run (logging's shutdown,
    weakref finalizers such as a temporary directory's), stdout and stderr are flushed, then
    os._exit. Every file trace writes is closed by then (its own writes use `with`); a stream
    that cannot be flushed (a reader that went away) is what a normal exit would lose too.
    While another non-daemon thread runs, `rc` is returned for the normal exit, which waits
    for it."""
    import atexit
    import contextlib
    import threading

    main = threading.main_thread()
    if any(t is not main and not t.daemon and t.is_alive() for t in threading.enumerate()):
        return rc
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe or stream
            stream.flush()
    os._exit(rc)


def _install_sigterm() -> Callable[[], object]:
    """Handle SIGTERM while a command runs (main thread only: elsewhere Python cannot); returns
    what puts the previous handler back."""
    try:
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread (main() called from a worker thread)
        return lambda: None
    return lambda: signal.signal(signal.SIGTERM, previous or signal.SIG_DFL)


def _internal_error(exc: Exception) -> int:
    if os.environ.get("TRACE_DEBUG"):
        import traceback

        traceback.print_exception(exc)
    what = type(exc).__name__ + (f": {exc}" if str(exc) else "")
    print(f"trace: internal error: {what}", file=sys.stderr)
    print(f"  hint: {BUG_HINT}", file=sys.stderr)
    return EXIT_INTERNAL


def _dispatch(args_list: list[str]) -> int:
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
    return handler(args)
