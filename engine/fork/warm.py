"""Warm `trace verify --bundle` and `trace decide`: a repeat with nothing changed replays the
previous run's output without building, evaluating or `--check`ing anything.

The rules are the `trace fork` memo's (engine/fork/memo.py, docs/evidence.md); this module only
applies them to one command line instead of one fork candidate:

- An entry is written only after a full run that passed the trust boundary (engine/verify/
  trusted.py: derivations instantiated again, outputs rehashed, `check` steps rebuilt with
  `--check`) and ended with exit 0 or 1 (an allow or a deny; errors are never memoised).
- It is authenticated with HMAC-SHA256 under the memo key, which lives outside the fork and the
  state directory (`$TRACE_MEMO_KEY`, else `$XDG_STATE_HOME/trace/memo.key`; engine/userkey.py
  refuses a key file others can read or one inside the fork or the state dir). The state
  directory only stores the entry; whoever writes there cannot make one that verifies.
- The MAC covers the command and every option (paths made absolute), the working directory,
  trace's version and a stat stamp of its code and data, the Nix tools and config files and
  environment (the fork memo's), today's UTC date (waivers and reason codes take effect on
  dates), the full stat signature (engine/fastpath.py) of every file the verdict was made from
  (`Graph.reads`, the candidate's folder and the files it names, every file or directory an
  option names, the fork's trace/ folder, the state's transcripts/, and the index files
  `state.db` and `state.db-wal`: never evidence, but any write to them, a forged row included,
  sends the next repeat down the full path), the store paths the run read and the stat
  signatures of the files it wrote (result, decision record, bundle).
- A lookup recomputes all of that in this process, checks the MAC, that every recorded store path
  still exists and that the written files are the very ones that run wrote; then it prints what
  that run printed and exits with its status. Any difference falls back to the full run, which
  records a new entry. An entry is recorded only when no file read was modified since one second
  before the run began (racy-clean, as git's index), so an edit made during a run is never
  memoised as unchanged. Keyless signing (`--sign`) is never memoised (who can sign changes
  without any file changing), nor a run asked for OpenTelemetry spans (`--otel`) or for
  rebuilds (`--rebuild`, `--rebuild-all`).

What it does not defend against is the fork memo's: whoever can read the key can forge entries,
as they could run a patched trace; a determinism re-check is not repeated while the entry holds
(at most one UTC day). Standard library only on the lookup path.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import hmac
import io
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from engine import __version__, userkey
from engine.fastpath import stamp

FORMAT = "trace.warm-memo/v1"
RACY_NS = 1_000_000_000
Read = tuple[str, tuple[str, ...]]
SKIP_ARGS = frozenset({"handler", "command"})
INDEX_FILES = ("state.db", "state.db-wal")


def _canon(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode()


def _plain(value: object) -> object:
    """An option's value as the MAC sees it: paths absolute, lists element-wise."""
    if isinstance(value, Path):
        return str(value.absolute())
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def option_paths(args: argparse.Namespace) -> list[Path]:
    """Every file or directory an option names (its contents are read, so they are stamped)."""
    found: list[Path] = []
    for name, value in vars(args).items():
        if name in SKIP_ARGS:
            continue
        for v in value if isinstance(value, list | tuple) else [value]:
            if isinstance(v, Path) and name not in ("out", "bundle", "state_dir", "fork"):
                found.append(v.absolute())
    return found


def stamp_digest(reads: Iterable[Read], *, exempt: Path, since_ns: int | None) -> str | None:
    """Digest of the stat signatures of `reads` (a missing path stamps as missing); None when
    one is unreadable or (with `since_ns`) was modified after it, outside `exempt`."""
    h = hashlib.sha256()
    for path, exclude in sorted(set(reads)):
        try:
            entries = stamp([(Path(path), list(exclude))])
        except FileNotFoundError:
            h.update(_canon(["missing", path]))
            continue
        except OSError:
            return None
        own = Path(path).is_relative_to(exempt)
        racy = since_ns is not None and any(e[2] >= since_ns or e[4] >= since_ns for e in entries)
        if racy and not own:
            return None
        h.update(_canon([path, list(exclude), entries]))
    return h.hexdigest()


def _shared_reads() -> list[Read]:
    from engine.paths import data_dir

    engine_dir = Path(__file__).resolve().parent.parent
    subs = [data_dir() / sub for sub in ("graphs", "templates", "policy")]
    return [(str(p), ()) for p in (engine_dir, *subs)]


@dataclass
class Warm:
    """The memo of one command line: its context digest, where its entry lives, the key."""

    command: str
    fork: Path
    state: Path
    key: bytes
    context: str
    began_ns: int = field(default_factory=time.time_ns)

    slot: str = ""  # the command line's own digest: where its entry lives (one per line)
    extra: tuple[Read, ...] = ()  # what every run of this command line reads besides the graph

    @property
    def where(self) -> Path:
        return self.state / "warm" / f"{self.slot[:32]}.json"

    def _mac(self, body: dict[str, Any]) -> str:
        msg = _canon([FORMAT, self.context]) + b"\n" + _canon(body)
        return hmac.new(self.key, msg, hashlib.sha256).hexdigest()

    def lookup(self) -> tuple[dict[str, Any] | None, str]:
        """The recorded output of this command line, or (None, why the full run is taken)."""
        try:
            doc = json.loads(self.where.read_bytes())
            body, mac = doc["body"], doc["mac"]
        except (OSError, ValueError, KeyError, TypeError):
            return None, "no memo entry"
        if not isinstance(mac, str) or not isinstance(body, dict):
            return None, "the memo entry is not authentic"
        if not hmac.compare_digest(mac, self._mac(body)):
            return None, "the memo entry is not authentic or not current"
        reads = [(p, tuple(ex)) for p, ex in body["reads"]]
        if stamp_digest(reads, exempt=self.state, since_ns=None) != body["stamp"]:
            return None, "a file the verdict was made from changed"
        missing = [p for p in body["outs"] if not os.path.lexists(p)]
        if missing:
            return None, f"{missing[0]} is no longer in the store"
        wrote = [(p, ()) for p in body["written"]]
        if stamp_digest(wrote, exempt=self.state, since_ns=None) != body["written_stamp"]:
            return None, "a file that run wrote is not the one it wrote"
        return body, ""

    def remember(
        self,
        reads: Iterable[Read],
        outs: Iterable[str],
        written: Sequence[Path],
        printed: tuple[str, str],
        status: int,
    ) -> bool:
        """Write the entry of a full run that just ended; False when it is not memoised."""
        from engine.files import write_atomic

        since = self.began_ns - RACY_NS
        reads = sorted(set(reads) | set(self.extra) | set(_shared_reads()))
        digest = stamp_digest(reads, exempt=self.state, since_ns=since)
        shown = [(str(p), ()) for p in written]
        wrote = stamp_digest(shown, exempt=self.state, since_ns=None)
        if digest is None or wrote is None or status not in (0, 1):
            self.where.unlink(missing_ok=True)
            return False
        body = {
            "reads": [[p, list(ex)] for p, ex in reads],
            "stamp": digest,
            "outs": sorted(set(outs)),
            "written": [p for p, _ in shown],
            "written_stamp": wrote,
            "stdout": printed[0],
            "stderr": printed[1],
            "status": status,
        }
        doc = {"format": FORMAT, "body": body, "mac": self._mac(body)}
        write_atomic(self.where, json.dumps(doc, sort_keys=True) + "\n")
        return True


def open_memo(command: str, args: argparse.Namespace, fork: Path, state: Path) -> Warm | None:
    """The memo of this command line, or None (no usable key, keyless signing)."""
    from engine.fork.memo import _machine, key_path

    if getattr(args, "sign", False):
        return None  # keyless: whether a signature can be made changes with no file changing
    if getattr(args, "otel", None):
        return None  # spans of a real run were asked for
    if getattr(args, "rebuild", None) or getattr(args, "rebuild_all", False):
        return None  # a --check rebuild was asked for: never answered from a memo
    path = key_path()
    key = None if path is None else userkey.load(path, (fork, state))
    if key is None:
        return None
    began = time.time_ns()
    options = {k: _plain(v) for k, v in sorted(vars(args).items()) if k not in SKIP_ARGS}
    context = {
        "format": FORMAT,
        "engine": __version__,
        "command": command,
        "options": options,
        "cwd": os.getcwd(),
        "fork": str(fork),
        "state": str(state),
        "today": dt.datetime.now(dt.UTC).date().isoformat(),
        "machine": _machine(dict(os.environ)),
        "shared": stamp_digest(_shared_reads(), exempt=state, since_ns=None),
    }
    digest = hashlib.sha256(_canon(context)).hexdigest()
    slot = hashlib.sha256(_canon([command, options, context["cwd"]])).hexdigest()
    return Warm(command, fork, state, key, digest, began, slot, extra_reads(args, fork, state))


def extra_reads(args: argparse.Namespace, fork: Path, state: Path) -> tuple[Read, ...]:
    """Every file an option names, the fork's trace/ folder (its policy), the state's
    transcripts (reviews) and the index files: the index is never evidence, but any write to it
    (a forged row, another run) sends the next repeat down the full path, which checks it
    against the store again."""
    found = [*option_paths(args), fork / "trace", state / "transcripts"]
    found += [state / name for name in INDEX_FILES]
    return tuple((str(p), ()) for p in found)


class _Tee(io.TextIOBase):
    """A text stream that writes through to `inner` and keeps a copy."""

    def __init__(self, inner: TextIO) -> None:
        self.inner = inner
        self.copy = io.StringIO()

    def write(self, s: str) -> int:
        self.copy.write(s)
        return self.inner.write(s)

    def flush(self) -> None:
        self.inner.flush()

    def isatty(self) -> bool:
        return self.inner.isatty()

    def fileno(self) -> int:
        return self.inner.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.inner, "encoding", "utf-8")


@contextmanager
def captured() -> Iterator[Callable[[], tuple[str, str]]]:
    """Tee stdout and stderr; yields what returns the copies. A terminal's stderr (progress
    display) is not kept: a replay prints no progress."""
    out, err = _Tee(sys.stdout), _Tee(sys.stderr)
    keep_err = not sys.stderr.isatty()
    old = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        yield lambda: (out.copy.getvalue(), err.copy.getvalue() if keep_err else "")
    finally:
        sys.stdout, sys.stderr = old


REPLAYED = (
    "trace: note: nothing changed since this command line's last run; its output (and the files "
    "it wrote, unchanged) served from the authenticated memo (docs/performance.md)\n"
)


def replay(body: dict[str, Any]) -> int:
    sys.stdout.write(body["stdout"])
    sys.stderr.write(body["stderr"] + REPLAYED)
    sys.stdout.flush()
    return int(body["status"])


def memoised(
    command: str,
    args: argparse.Namespace,
    fork: Path,
    state: Path,
    full: Callable[[], tuple[int, list[Read] | None, list[str], list[Path]]],
) -> int:
    """Replay this command line's memoised run, or run `full` (returning its status, reads,
    store paths read and files written) and memoise it."""
    warm = open_memo(command, args, fork, state)
    if warm is not None:
        body, _why = warm.lookup()
        if body is not None:
            return replay(body)
    with captured() as printed:
        status, reads, outs, written = full()
    if warm is not None and reads is not None:
        warm.remember(reads, outs, written, printed(), status)
    return status


def graph_reads(graph: Any, candidate_file: Path) -> list[Read] | None:
    """What a verify graph and its candidate read (as the fork memo records them); None (not
    memoised) for a graph that does not list its reads (a test's stand-in)."""
    from engine.candidate import load_candidate
    from engine.fork.one_candidate import _candidate_reads

    if not hasattr(graph, "reads"):
        return None
    cand = load_candidate(candidate_file)
    found = [*graph.reads, *_candidate_reads(cand)]
    return [(str(p), tuple(ex)) for p, ex in found]


def store_outs(run: Any) -> list[str]:
    return [str(r.out) for r in run.steps.values() if r.out]
