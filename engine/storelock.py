"""One Nix build at a time per store among a user's trace processes (an advisory flock).

Two `nix-store --realise` (or `nix-build`) processes whose derivations overlap can deadlock on
one store: Nix keeps the output locks of a goal whose outputs another process built first until
its whole call returns, so each can hold a lock the other waits for, forever (docs/performance.md,
"Two Nix processes on one store"; a nix-daemon runs the same code per client). So every trace
process takes an exclusive `flock` on one file per store around each realise or build it starts
(engine/nix.py `Nix._stream`); evaluation (`nix-instantiate`) holds no output lock and takes none.
`nix-build` evaluates and builds in one process, so it is started only when the lock is free at
once: when it is taken, trace evaluates first (unlocked) and then waits to realise (engine/run.py
`_build`), so bad input is refused without waiting for another process's build.
Nix's own `-j` parallelism inside one call is unchanged; a second trace process waits for the
first's call to end, says so after NOTICE_AFTER seconds, and Ctrl-C (or SIGTERM) while it waits
ends it as at any other point (the blocking flock is interrupted, the file closed).

The file is per user and per store: `$TRACE_STORE_LOCK_DIR`, else `.cache/trace/` in the
account's home from the password database (whatever `$HOME` or `$XDG_CACHE_HOME` a process was
started with), then `nix-store-<sha256 of the store's name>.lock`. A directory that cannot be
written is no reason to fail a build: the call then runs unlocked, as before this lock.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

NOTICE_AFTER = 1.0  # seconds of waiting before the user is told why
_POLL = 0.05
# the machine's own store, whichever way a client reaches it
_DEFAULT_STORES = frozenset({"", "auto", "local", "daemon"})


def store_of(args: Sequence[str]) -> str:
    """The store a Nix command line addresses: `--store URI`, else `--option store URI`, else
    $NIX_REMOTE; the machine's own store (local or through its daemon) is `default`, under its
    store directory when $NIX_STORE_DIR moves it."""
    uri = os.environ.get("NIX_REMOTE", "")
    for i, arg in enumerate(args[:-1]):
        if arg == "--store":
            uri = args[i + 1]
        elif arg == "--option" and args[i + 1] == "store" and i + 2 < len(args):
            uri = args[i + 2]
    if uri in _DEFAULT_STORES:
        return "default:" + os.environ.get("NIX_STORE_DIR", "/nix/store")
    return uri


def lock_dir() -> Path:
    """`$TRACE_STORE_LOCK_DIR`, else `.cache/trace` in the account's home as the password
    database gives it, not `$HOME` nor `$XDG_CACHE_HOME`: a process of the same user started with
    another HOME (a demo run with HOME in a temp dir, a test, `env -i`) must take the same lock,
    or its Nix calls run beside the others'. `$HOME` only when the account has no entry or its
    home cannot be written (a service account's `/nonexistent`)."""
    override = os.environ.get("TRACE_STORE_LOCK_DIR")
    if override:
        return Path(override)
    import pwd

    try:
        home = pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:  # a uid without a passwd entry (some containers)
        home = ""
    if not home or not os.access(home, os.W_OK):
        home = str(Path.home())
    return Path(home) / ".cache" / "trace"


def lock_path(store: str) -> Path:
    digest = hashlib.sha256(store.encode()).hexdigest()[:20]
    return lock_dir() / f"nix-store-{digest}.lock"


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _open(path: Path) -> int | None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        return None


def _try(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _acquire(fd: int, store: str, path: Path, notify: Callable[[str], None]) -> None:
    """Take the lock: poll for NOTICE_AFTER seconds, then say why and block until it is free."""
    until = time.monotonic() + NOTICE_AFTER
    while not _try(fd):
        if time.monotonic() >= until:
            notify(
                "trace: waiting for another trace process's Nix build on this store "
                f"({store}; lock {path})"
            )
            fcntl.flock(fd, fcntl.LOCK_EX)  # a signal's exception (Ctrl-C) ends the wait
            return
        time.sleep(_POLL)


@contextmanager
def store_lock(
    store: str, *, notify: Callable[[str], None] = _say, wait: bool = True
) -> Iterator[bool]:
    """Hold the user's build lock of `store` (one open and one flock when nobody else holds it)
    and yield True. `wait=False`: when another process holds it, yield False at once, holding
    nothing (`Nix.build`: a caller that can do useful work without the lock first)."""
    path = lock_path(store)
    fd = _open(path)
    if fd is None:  # unwritable cache dir: build unlocked rather than not at all
        yield True
        return
    try:
        if wait:
            _acquire(fd, store, path, notify)
        elif not _try(fd):  # taken: hold nothing
            yield False
            return
        yield True
    finally:
        os.close(fd)  # releases the flock
