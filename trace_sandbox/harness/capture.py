"""Capturing a target's output: fixed-size head + tail copies, teeing, normalisation.

Stdlib only (the sandbox's python3). What is kept depends only on the bytes, never on how reads
split them, so run records stay deterministic.
"""

from __future__ import annotations

import os
import re
import signal
import threading

TAIL_CHARS = 4000
INVOCATION_TAIL_CHARS = 2000
ORACLE_TEXT_CHARS = 16000  # characters of each stream the record keeps for the oracles
CAPTURE_HEAD = 1 << 20  # bytes of a stream kept from its start ...
CAPTURE_TAIL = 1 << 20  # ... and from its end (fixed sizes: independent of read sizes)
COLLECT_GRACE = 2.0  # seconds to drain the reproducer's pipes once it ended or was killed


def normalise(text: str, subs: list[tuple[str, str]]) -> str:
    for old, new in subs:
        if old:
            text = text.replace(old, new)
    text = re.sub(r"==\d+==", "==PID==", text)
    text = re.sub(r"0x[0-9a-fA-F]{4,}", "0xADDR", text)
    text = re.sub(r"\b(pid|PID|process) \d+", r"\1 N", text)
    return text


def signal_name(n: int) -> str:
    """`9` -> `SIGKILL`; real-time and unknown signals have no name in `signal.Signals`."""
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"SIG{n}"


class Capture:
    """A stream kept as its first CAPTURE_HEAD and last CAPTURE_TAIL bytes. What is kept depends
    only on the bytes (never on how reads split them), so records stay deterministic."""

    def __init__(self) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = CAPTURE_HEAD - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        self.tail += chunk
        if len(self.tail) > 2 * CAPTURE_TAIL:
            del self.tail[: len(self.tail) - CAPTURE_TAIL]

    def value(self) -> bytes:
        kept = len(self.head) + min(len(self.tail), CAPTURE_TAIL)
        if self.total <= kept:
            return bytes(self.head + self.tail)
        skipped = f"\n[trace: {self.total - kept} bytes omitted]\n".encode()
        return bytes(self.head) + skipped + bytes(self.tail[-CAPTURE_TAIL:])


def tee(src: int, dest: int | None, keep: Capture, broken: threading.Event | None = None) -> None:
    """Copy a stream to `dest` (None: only keep it), keeping a copy (head + tail). When the
    reader of `dest` goes away (EPIPE), stop reading and close `src` as a real pipe would: the
    writer's next write gets SIGPIPE/EPIPE instead of running on unseen."""
    while True:
        try:
            chunk = os.read(src, 65536)
        except OSError:
            break
        if not chunk:
            break
        keep.add(chunk)
        view = memoryview(chunk)
        try:
            while dest is not None and view:
                view = view[os.write(dest, view) :]
        except BrokenPipeError:
            if broken is not None:
                broken.set()
            break
        except OSError:
            dest = None  # the descriptor is unusable otherwise: keep capturing
    os.close(src)
